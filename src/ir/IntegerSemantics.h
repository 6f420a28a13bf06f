// \file The meaning of arith's integer ops on known values: two's-complement wraparound to the
// result's width, signed and unsigned division, comparisons. Specialization folds with it and
// the host evaluates shape expressions with it, so the two always agree.
#pragma once

#include "ir/IR.h"

#include <llvm/ADT/ArrayRef.h>

#include <optional>
#include <string>
#include <vector>

namespace frank {

/// Sign-extends the low bits of `v` that fit `type` (i1 is 0 or 1).
int64_t wrapToType(int64_t v, ElemKind type);

bool isIntegerDivision(OpKind op);

/// Whether signed division or remainder `op` of `dividend` by `divisor` (of `type`) overflows:
/// the smallest value by -1, which traps on the host as division by zero does.
bool signedDivisionOverflows(OpKind op, ElemKind type, int64_t dividend, int64_t divisor);

/// The result of integer op `op` (arith binary, cast, cmpi or select) on `operands`, whose type
/// is `operandType`, producing `resultType`; nullopt for an op that is not an integer op.
/// Division by zero must be ruled out by the caller (it reports it in its own terms).
std::optional<int64_t> foldInteger(OpKind op, ElemKind operandType, ElemKind resultType,
                                   llvm::ArrayRef<int64_t> operands,
                                   const std::string &predicate = {});

} // namespace frank
