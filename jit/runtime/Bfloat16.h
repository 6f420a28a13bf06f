// Conversions to bfloat16 that kernels call on CPUs without bf16 instructions, where LLVM
// lowers them to these compiler-runtime functions (libgcc 12 has none).
#pragma once

#include <cstdint>

namespace frank::runtime {

/// The bfloat16 nearest to `x` (ties to even), as its bits: subnormals kept, overflow to
/// infinity, NaN quieted with its sign.
uint16_t bfloat16Bits(float x);
/// The same from a double, rounded once.
uint16_t bfloat16Bits(double x);

} // namespace frank::runtime

extern "C" {
/// `__truncsfbf2` and `__truncdfbf2`: the result in a half register, as LLVM passes bf16.
_Float16 frank_truncsfbf2(float x);
_Float16 frank_truncdfbf2(double x);
}
