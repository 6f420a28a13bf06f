// Which functions of a kernel compile as cold code (see ColdCode.h).
#include "codegen/ColdCode.h"

#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <vector>

namespace frank {

namespace {
constexpr const char *kColdAttribute = "frank-cold";
} // namespace

bool isCold(const llvm::Function &f) { return f.hasFnAttribute(kColdAttribute); }

void markColdFunctions(const std::map<llvm::Function *, double> &work) {
  std::vector<std::pair<double, llvm::Function *>> lightestFirst;
  double total = 0;
  for (auto [f, statements] : work) {
    lightestFirst.emplace_back(statements, f);
    total += statements;
  }
  std::sort(lightestFirst.begin(), lightestFirst.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first < b.first : a.second->getName() < b.second->getName();
  });
  double cold = 0;
  for (auto [statements, f] : lightestFirst) {
    cold += statements;
    if (cold > kColdShare * total)
      break;
    f->addFnAttr(kColdAttribute);
  }
}

void settleColdFunctions(llvm::Module &module) {
  for (bool changed = true; changed;) {
    changed = false;
    for (llvm::Function &f : module) {
      if (f.isDeclaration() || isCold(f) || !f.hasFnAttribute(llvm::Attribute::AlwaysInline))
        continue;
      for (llvm::User *user : f.users())
        if (auto *call = llvm::dyn_cast<llvm::CallBase>(user);
            call && call->getCalledFunction() == &f && isCold(*call->getFunction())) {
          call->getFunction()->removeFnAttr(kColdAttribute);
          changed = true;
        }
    }
  }
}

void compileColdFunctionsQuickly(llvm::Module &module) {
  for (llvm::Function &f : module) {
    if (f.isDeclaration() || !isCold(f))
      continue;
    f.removeFnAttr(llvm::Attribute::AlwaysInline);
    f.addFnAttr(llvm::Attribute::NoInline);
    f.addFnAttr(llvm::Attribute::OptimizeNone);
  }
}

} // namespace frank
