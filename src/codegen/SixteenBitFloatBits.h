// \file A peephole on the optimized LLVM IR: fneg, fabs and copysign of bf16 and f16 values
// (scalars or vectors) become integer operations on their sign bits, and loads, stores, selects,
// shuffles, extracts and phis of bf16 values those of their bits. Codegen emits bf16 negf and absf
// as fneg and fabs, and the optimizer makes more of them from bit operations on bf16 values; x86
// without AVX512-BF16 (kernels are built without it: its conversion flushes subnormals) computes
// those in f32 and rounds each lane back through a call to `__truncsfbf2`, as it does the value a
// bf16 select, shuffle, extract or phi holds in an f32 register (a matmul's lane sums made 121 such
// calls): SwiGLU on 1x32x14336 bf16 took 526 µs, with 16 calls a vector, against 28 µs in f32 (148
// µs now). x86 without AVX512-FP16 computes f16 fneg and fabs of a scalar in f32 and converts back,
// which quiets a signaling NaN (negf of 0x7C01 gave 0xFE01). Exact: they only move bits or set the
// sign bit.
#pragma once

namespace llvm {
class Module;
} // namespace llvm

namespace frank {

void lowerSixteenBitFloatBits(llvm::Module &module);

} // namespace frank
