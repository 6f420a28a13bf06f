// \file Loop IR to an LLVM module. The kernel's entry point is
//   void NAME(void *const *buffers, const int64_t *dims, const uint64_t *scalars, void *ws,
//             int64_t *status)
// with input then output buffer pointers, the runtime dims (generic mode), one 8-byte slot per
// scalar argument, the workspace for temporaries, and three zeroed slots a failed check fills
// with {check id + 1, observed value, bound} before the kernel returns early.
#pragma once

#include "loops/LoopIR.h"

#include <memory>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace frank {

struct CodegenOptions {
  /// FMA contraction everywhere, reassociation where the loop IR allows it.
  bool fastMath = true;
  /// Vectorizable math: exp as a call to frank's own (MathFunctions.h), and calls the optimizer
  /// may widen to the host's vector math library (libmvec) for the rest. Off: scalar libm calls.
  bool vectorMath = true;
  /// The widest vector of 32-bit lanes the target permutes by an index vector in one
  /// instruction: 256 with AVX2 (vpermps), 512 with AVX-512; 0 permutes lane by lane. -1: the
  /// host's, which the engine fills in (codegen alone then permutes lane by lane).
  int permuteBits = -1;
  /// Large independent runs of statements in the kernel's body and in parallel loop bodies as
  /// functions of their own, which the engine may optimize and compile on separate threads
  /// (codegen/SplitKernel.h). Where they stay in one module, the optimizer inlines them back.
  bool outlineNests = true;
  /// Vectorized loops that compute exp interleave this many vectors (0: the vectorizer's
  /// choice, which is one on a 16-register target: see Engine.cpp), but those of at most 128
  /// trips. -1: the host's.
  int expInterleave = -1;
  /// The width of the vectors the vectorizer widens loops to: 512 with AVX-512, 256 with AVX2.
  /// A vectorized loop whose trip count is not a constant multiple of its interleaved step runs
  /// the rest one vector an iteration. -1: the host's; 0 leaves the rest to the vectorizer.
  int vectorBits = -1;
};

/// Builds and verifies the module; an invalid module is an internal error.
std::unique_ptr<llvm::Module> codegen(const loops::Program &program, llvm::LLVMContext &context,
                                      const CodegenOptions &options);

} // namespace frank
