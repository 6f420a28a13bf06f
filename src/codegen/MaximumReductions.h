// \file A peephole on the optimized LLVM IR: the horizontal maximum (or minimum) of a float
// vector that the loop vectorizer leaves after a NaN-propagating reduction
// (`llvm.vector.reduce.fmaximum`: attention's row maximum) becomes an integer maximum of the
// lanes' bits, ordered as the floats are, and a test for NaN beside it. x86 has no instruction
// for `maximum` (NaN wins, +0 above -0); LLVM expands each step of the horizontal reduction into
// a blend, a max, a compare and a mask move, its last four steps on scalars through general
// registers: a chain of some 60 cycles a row, where the integer maximum's is about 20.
//
// Exact: flipping the 31 low bits of negative floats orders all non-NaN floats, -0 below +0, as
// signed integers; a NaN among the lanes makes the result NaN (the quiet NaN of the type, as any
// NaN may be, LLVM's operations not promising a payload).
#pragma once

namespace llvm {
class Module;
} // namespace llvm

namespace frank {

void lowerMaximumReductions(llvm::Module &module);

} // namespace frank
