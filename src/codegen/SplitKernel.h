// \file Splitting a kernel's LLVM module into parts that optimize and compile in parallel.
//
// A kernel is its entry function, the bodies of its parallel loops, which the entry hands to
// the runtime by address, and the nests codegen outlined from both (CodegenOptions::
// outlineNests): pieces of code that the optimizer and the code generator treat one at a time
// anyway. The functions are grouped with the functions they must inline (a
// loop's chunk and the body it inlines), the groups dealt out largest first, each to the
// lightest part, and each part cloned into a module of its own. Instructions are only a rough
// measure of what a function costs to compile, so there may be more parts than threads, for
// the threads to take in turn, heaviest first. Parts travel as bitcode, to be
// read into an LLVMContext of their own on another thread (a context serves one thread at a
// time). A function that another part refers to becomes an external symbol of hidden
// visibility, which the JIT resolves when it links the parts' objects together.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace frank {

/// The bitcode of at most `maxParts` modules, heaviest first, that together define what `module`
/// defines: as many as keep `minPartCost` in each, by compileCost. Nothing when two parts
/// would not (a kernel too small, or too much one function, for a split to pay). `module`
/// keeps its functions; those another part refers to become external.
std::vector<std::string> splitKernel(llvm::Module &module, unsigned maxParts,
                                     size_t minPartCost);

/// The same parts, each handed to `take` as soon as it is written (heaviest first), so that
/// compiling the first can start while the others are cloned; returns how many there were.
/// `take` is never called when the kernel does not split.
unsigned splitKernel(llvm::Module &module, unsigned maxParts, size_t minPartCost,
                     const std::function<void(std::string)> &take);

/// What optimizing and compiling `module`'s functions costs, in instructions: the measure the
/// parts balance. Those of a scalar innermost loop count several times (the vectorizer widens,
/// interleaves and keeps it).
size_t compileCost(llvm::Module &module);

/// Marks always-inline every local function of `module` that it only calls: the nests codegen
/// outlined (CodegenOptions::outlineNests) that did not go to a part of their own, which would
/// otherwise stay calls: the kernel passes inline only what is marked so.
void inlineLocalNests(llvm::Module &module);

} // namespace frank
