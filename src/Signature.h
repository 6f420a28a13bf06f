// \file What a kernel is compiled for: one concrete type per function argument, plus the values
// of the integer arguments that specialization bakes in.
#pragma once

#include "frank/Frank.h"
#include "ir/IR.h"

#include <optional>
#include <string>
#include <vector>

namespace frank {

/// One argument of a call: a tensor type with static shape (but for the dims that stay runtime
/// values, kDynamic), or a scalar type. Integer, index and i1 scalars carry their value when it
/// is a specialization key.
struct ArgSpec {
  Type type;
  std::optional<int64_t> intValue;

  std::string str() const; // "32x4096xf32", "?x4096xf32", "f32", "index=4"
};

/// Checks kinds, ranks, dtypes and the signature's static dims; errors name the argument.
void checkArguments(const FuncOp &fn, const std::vector<ArgSpec> &args);

/// "%name" of argument `i`, or "#i" when it has no source name.
std::string argumentName(const FuncOp &fn, size_t i);

} // namespace frank
