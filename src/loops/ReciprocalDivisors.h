// \file reciprocal-divisors: an innermost loop that divides by a value its iterations do not
// change (rms_norm's x / rms, softmax's e / sum) multiplies by that value's reciprocal instead,
// computed once before the loop. A 512-bit division takes a core several times as long as a
// multiply (S1's 4096-element rms_norm row: 0.80 us dividing, 0.32 multiplying, on a Xeon).
//
// x * (1 / d) is within 1.5 ulp of x / d, and has the same special values, when 1 / d is a
// normal number: for |d| from 2^-126 to 2^126 (f32; 2^-1022 to 2^1022 for f64). The loop is
// therefore versioned: it multiplies when every such divisor is in that range and divides, as
// written, otherwise (a zero, infinite, NaN, tiny or huge divisor). The divisors are read
// before the loop, so a loop of a runtime extent is versioned inside a test that it runs at
// all. Specialized programs only: generic kernels evaluate floats as written.
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

/// Versions the innermost serial and vectorized loops of the program that divide by values
/// they do not change and run their body at least 4096 times a call (a runtime extent counting
/// 256); returns how many loops it versioned.
int reciprocalDivisors(Program &program);

} // namespace frank::loops
