// \file Splitting a kernel's LLVM module into parts that optimize and compile in parallel.
//
// A kernel is its entry function, the bodies of its parallel loops, which the entry hands to
// the runtime by address, and the nests codegen outlined from both (CodegenOptions::
// outlineNests): pieces of code that the optimizer and the code generator treat one at a time
// anyway. The functions are grouped with the functions they must inline (a
// loop's chunk and the body it inlines), the groups dealt out largest first, each to the
// lightest part. Instructions are only a rough measure of what a function costs to compile, so
// there may be more parts than threads, for the threads to take in turn, heaviest first. The
// module travels as bitcode, written once, and each thread reads its part into an LLVMContext
// of its own (a context serves one thread at a time): the bodies of the part's functions only,
// read lazily, and declarations of the rest. A function that another part refers to becomes an
// external symbol of hidden visibility, which the JIT resolves when it links the parts' objects
// together.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace frank {

/// A kernel's module as bitcode, and the functions each of its parts defines.
struct KernelParts {
  std::string name; // the module's
  std::string bitcode;
  /// Per part, heaviest first. Empty when the kernel stays whole.
  std::vector<std::vector<std::string>> functions;

  size_t size() const { return functions.size(); }
  bool empty() const { return functions.empty(); }
};

/// At most `maxParts` parts, heaviest first, that together define what `module` defines: as
/// many as keep `minPartCost` in each, by compileCost. None when two parts would not (a kernel
/// too small, or too much one function, for a split to pay). `module` keeps its functions;
/// those another part refers to become external.
KernelParts splitKernel(llvm::Module &module, unsigned maxParts, size_t minPartCost);

/// Part `part` of `parts`, read into `context`: the bodies of its functions, declarations of
/// those it calls in other parts, and its local nests always-inline (inlineLocalNests).
std::unique_ptr<llvm::Module> readPart(const KernelParts &parts, size_t part,
                                       llvm::LLVMContext &context);

/// What optimizing and compiling `module`'s functions costs, in instructions: the measure the
/// parts balance. Those of a scalar innermost loop count several times (the vectorizer widens,
/// interleaves and keeps it).
size_t compileCost(llvm::Module &module);

/// Marks always-inline every local function of `module` that it only calls: the nests codegen
/// outlined (CodegenOptions::outlineNests) that did not go to a part of their own, which would
/// otherwise stay calls: the kernel passes inline only what is marked so.
void inlineLocalNests(llvm::Module &module);

} // namespace frank
