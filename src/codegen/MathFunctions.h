// \file Math functions that kernels call by name while the optimizer runs and that become inline
// code after it.
//
// The loop vectorizer widens a call only to a vector function it has a mapping for, and it
// widens scalar code only into instructions that have a scalar form. A call to `frank.exp.f32`,
// mapped to `frank.exp.v16f32` (as libmvec's functions are mapped to theirs), lets the 16-lane
// version use two AVX-512 instructions the vectorizer would never produce: vpermps, for a table
// of 2^(j/16), and vscalefps, for the power of two (the 8-lane version, with AVX2, a table of
// 2^(j/8)). Once the optimizer is done,
// `defineMathFunctions` gives every declared math function its body and inlines it.
#pragma once

#include <llvm/Analysis/TargetLibraryInfo.h>

#include <vector>

namespace llvm {
class IRBuilderBase;
class Module;
class Value;
} // namespace llvm

namespace frank {

/// A call to exp for `x` (f32 or a vector of f32); the function is declared on first use.
llvm::Value *callExpF32(llvm::Module &module, llvm::IRBuilderBase &builder, llvm::Value *x);

/// pow of doubles for a narrower powf: a call the vectorizer may widen to libmvec's double pow
/// (and only this one: an f64 powf stays libm's scalar pow), lowered to llvm.pow.f64 after it.
inline constexpr const char *kWidenedPow = "frank.pow.f64";

/// powf of `x` and `y` (f16, bf16 or f32, scalars or vectors) as pow of doubles rounded once to
/// their type: correctly rounded but in rare cases, the same on every CPU and lane count.
llvm::Value *powThroughDoubles(llvm::Module &module, llvm::IRBuilderBase &builder, llvm::Value *x,
                               llvm::Value *y);

/// The vector versions of the math functions for the loop vectorizer, at 4, 8 and 16 lanes.
std::vector<llvm::VecDesc> mathVectorMappings();

/// The instructions the math functions' vector forms may use.
struct MathTarget {
  bool avx2 = false;   // vpermps: the 8-lane forms
  bool avx512 = false; // AVX-512 F and DQ: the 16-lane forms
};

/// Gives the math functions `module` declares their bodies (for 8 and 16 lanes, with the
/// instructions `target` allows) and inlines every call to them; scalar calls to kWidenedPow
/// become llvm.pow.f64.
void defineMathFunctions(llvm::Module &module, MathTarget target);

} // namespace frank
