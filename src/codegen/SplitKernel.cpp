// Dealing a kernel's functions out to parts (see SplitKernel.h).
#include "codegen/SplitKernel.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/EquivalenceClasses.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>

namespace frank {

namespace {

// The loop vectorizer turns a scalar innermost loop into a vector body interleaved up to 4 times
// and keeps the scalar loop for the remainder: about this many times its instructions to
// optimize and compile. Attention's softmax loops (a fifth of its instructions before optimization)
// took 20 ms of 84, each of its products 27-31 ms.
constexpr size_t kWidenedCost = 5;

// What `f` costs to optimize and compile, in instructions.
size_t costOf(llvm::Function &f) {
  llvm::DominatorTree dominators(f);
  llvm::LoopInfo loops(dominators);
  size_t cost = 0;
  for (const llvm::BasicBlock &block : f) {
    const llvm::Loop *loop = loops.getLoopFor(&block);
    bool widened = loop && loop->isInnermost();
    if (widened)
      for (const llvm::BasicBlock *member : loop->blocks())
        for (const llvm::Instruction &inst : *member)
          widened = widened && !inst.getType()->isVectorTy();
    cost += block.size() * (widened ? kWidenedCost : 1);
  }
  return cost;
}

} // namespace

size_t compileCost(llvm::Module &module) {
  size_t cost = 0;
  for (llvm::Function &f : module)
    if (!f.isDeclaration())
      cost += costOf(f);
  return cost;
}

std::vector<std::string> splitKernel(llvm::Module &module, unsigned maxParts,
                                     size_t minPartCost) {
  std::vector<std::string> parts;
  splitKernel(module, maxParts, minPartCost,
              [&](std::string bitcode) { parts.push_back(std::move(bitcode)); });
  return parts;
}

unsigned splitKernel(llvm::Module &module, unsigned maxParts, size_t minPartCost,
                     const std::function<void(std::string)> &take) {
  // Global variables would need an owner and declarations elsewhere; kernels define none.
  if (maxParts < 2 || !module.global_empty())
    return 0;
  // A function and the functions it must inline go together.
  llvm::EquivalenceClasses<const llvm::Function *> groups;
  for (const llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    groups.insert(&f);
    for (const llvm::Instruction &inst : llvm::instructions(f))
      if (const auto *call = llvm::dyn_cast<llvm::CallBase>(&inst))
        if (const llvm::Function *callee = call->getCalledFunction();
            callee && !callee->isDeclaration() &&
            callee->hasFnAttribute(llvm::Attribute::AlwaysInline))
          groups.unionSets(&f, callee);
  }
  llvm::DenseMap<const llvm::Function *, size_t> costs;
  for (llvm::Function &f : module)
    if (!f.isDeclaration())
      costs[&f] = costOf(f);
  std::vector<std::pair<size_t, const llvm::Function *>> sizes; // per group: cost, leader
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    if (!it->isLeader())
      continue;
    size_t size = 0;
    for (auto member = groups.member_begin(it); member != groups.member_end(); ++member)
      size += costs.lookup(*member);
    sizes.emplace_back(size, it->getData());
  }
  std::sort(sizes.begin(), sizes.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second->getName() < b.second->getName();
  });
  // The most parts (up to `maxParts`) whose lightest still has `minPartCost`.
  std::vector<size_t> load;
  llvm::DenseMap<const llvm::Function *, unsigned> partOf;
  unsigned parts = maxParts;
  for (; parts >= 2; --parts) {
    load.assign(parts, 0);
    partOf.clear();
    for (const auto &[size, leader] : sizes) {
      const unsigned lightest = unsigned(std::min_element(load.begin(), load.end()) - load.begin());
      load[lightest] += size;
      for (auto member = groups.findLeader(groups.findValue(leader)); member != groups.member_end();
           ++member)
        partOf[*member] = lightest;
    }
    if (*std::min_element(load.begin(), load.end()) >= minPartCost)
      break;
  }
  if (parts < 2)
    return 0;
  // A local function used from another part (a loop body whose address the entry passes on)
  // must be a symbol the linker resolves.
  for (llvm::Function &f : module) {
    if (f.isDeclaration() || !f.hasLocalLinkage())
      continue;
    for (const llvm::User *user : f.users()) {
      const auto *inst = llvm::dyn_cast<llvm::Instruction>(user);
      if (!inst || partOf.lookup(inst->getFunction()) != partOf.lookup(&f)) {
        f.setLinkage(llvm::GlobalValue::ExternalLinkage);
        f.setVisibility(llvm::GlobalValue::HiddenVisibility);
        break;
      }
    }
  }
  std::vector<unsigned> heaviestFirst(parts);
  for (unsigned p = 0; p < parts; ++p)
    heaviestFirst[p] = p;
  std::stable_sort(heaviestFirst.begin(), heaviestFirst.end(),
                   [&](unsigned a, unsigned b) { return load[a] > load[b]; });
  unsigned written = 0;
  for (unsigned p : heaviestFirst) {
    llvm::ValueToValueMapTy map;
    // Functions of other parts become declarations.
    std::unique_ptr<llvm::Module> part =
        llvm::CloneModule(module, map, [&](const llvm::GlobalValue *value) {
          const auto *f = llvm::dyn_cast<llvm::Function>(value);
          return !f || partOf.lookup(f) == p;
        });
    inlineLocalNests(*part);
    part->setModuleIdentifier(module.getModuleIdentifier() + ".part" + std::to_string(written++));
    std::string bitcode;
    llvm::raw_string_ostream os(bitcode);
    llvm::WriteBitcodeToFile(*part, os);
    os.flush();
    take(std::move(bitcode));
  }
  return parts;
}

void inlineLocalNests(llvm::Module &module) {
  for (llvm::Function &f : module) {
    if (f.isDeclaration() || !f.hasLocalLinkage() || f.use_empty())
      continue;
    bool onlyCalled = true;
    for (const llvm::Use &use : f.uses()) {
      const auto *call = llvm::dyn_cast<llvm::CallBase>(use.getUser());
      onlyCalled = onlyCalled && call && call->isCallee(&use);
    }
    if (onlyCalled && !f.hasFnAttribute(llvm::Attribute::NoInline))
      f.addFnAttr(llvm::Attribute::AlwaysInline);
  }
}

} // namespace frank
