// Command-line inputs in iree-run-module's forms, and output printing.
#pragma once

#include "frank/Frank.h"

#include <string>
#include <vector>

namespace frank::cli {

/// Parses one `--input` against the function's declared argument type:
///   32x4096xf32=@x.npy, @x.npy, 32x4096xf32=random, 2x32xi32=random:0:8 (uniform in [0, 8)),
///   2x2xf32=1,2,3,4, 4xf32=0.5 (splat), f32=1e-6, index=2, i1=true.
Arg parseInput(const std::string &text, const std::string &declaredType, uint64_t seed,
               size_t position);

/// Whether a signature's type names a scalar (f32, index, i1), not a tensor.
bool isScalarType(const std::string &type);

/// Checks that a scalar input's type (`f32` of `f32=1e-6`) is the declared one: a scalar's type
/// is never converted, so `i1=5` cannot pass for an f32.
void checkScalarType(const std::string &input, const std::string &declaredType, size_t position);

/// The type part of an input ("32x4096xf32" of "32x4096xf32=@x.npy"), reading the .npy header
/// for the `@x.npy` form; what `compile` and the kernel cache need.
std::string inputType(const Arg &arg);

/// Prints a tensor as `32x4096xf32=[...]`, at most `maxElements` values.
std::string formatTensor(const Tensor &t, int64_t maxElements);

} // namespace frank::cli
