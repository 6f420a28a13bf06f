// Dealing a kernel's functions out to parts (see SplitKernel.h).
#include "codegen/SplitKernel.h"
#include "ir/Diagnostics.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/EquivalenceClasses.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <set>

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

KernelParts splitKernel(llvm::Module &module, unsigned maxParts, size_t minPartCost) {
  KernelParts split;
  // Global variables would need an owner and declarations elsewhere; kernels define none.
  if (maxParts < 2 || !module.global_empty())
    return split;
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
    return split;
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
  split.functions.resize(parts);
  for (llvm::Function &f : module)
    if (!f.isDeclaration()) {
      const unsigned rank =
          unsigned(std::find(heaviestFirst.begin(), heaviestFirst.end(), partOf.lookup(&f)) -
                   heaviestFirst.begin());
      split.functions[rank].push_back(f.getName().str());
    }
  split.name = module.getModuleIdentifier();
  llvm::raw_string_ostream os(split.bitcode);
  llvm::WriteBitcodeToFile(module, os);
  os.flush();
  return split;
}

std::unique_ptr<llvm::Module> readPart(const KernelParts &parts, size_t part,
                                       llvm::LLVMContext &context) {
  auto unwrap = [](auto expected) {
    if (!expected)
      internalError("reading a kernel part: " + llvm::toString(expected.takeError()));
    return std::move(*expected);
  };
  auto check = [](llvm::Error error) {
    if (error)
      internalError("reading a kernel part: " + llvm::toString(std::move(error)));
  };
  std::unique_ptr<llvm::Module> module =
      unwrap(llvm::getLazyBitcodeModule(llvm::MemoryBufferRef(parts.bitcode, parts.name), context));
  const std::set<std::string> own(parts.functions[part].begin(), parts.functions[part].end());
  // The part's bodies are read; the others stay unread, as declarations, which may not have
  // local linkage (a local function of another part that no body of this one calls).
  for (llvm::Function &f : *module)
    if (own.count(f.getName().str()))
      check(f.materialize());
  for (llvm::Function &f : *module)
    if (!own.count(f.getName().str()) && f.isMaterializable()) {
      f.setIsMaterializable(false);
      if (f.hasLocalLinkage())
        f.setLinkage(llvm::GlobalValue::ExternalLinkage);
    }
  check(module->materializeAll());
  module->setModuleIdentifier(parts.name + ".part" + std::to_string(part));
  inlineLocalNests(*module);
  return module;
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
