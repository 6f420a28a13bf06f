// \file Float literals rounded as the subset says (MLIR-SUBSET.md §1.2): once, to the nearest
// value of their type, ties to even, subnormals kept. Through a double first, a decimal with
// more digits than a double holds would round twice (1 + 2^-24 + 2^-60 to 1.0f, not the f32
// after it). Hexadecimal literals are bit patterns, as in MLIR. Shared by the parser and the
// command line's --input values and printed results.
#pragma once

#include "ir/IR.h"

#include <llvm/ADT/APFloat.h>

#include <optional>
#include <string_view>

namespace frank {

/// APFloat's semantics of a float element type.
const llvm::fltSemantics &floatSemantics(ElemKind elem);

/// The hexadecimal digits a bit pattern of `elem` takes: 4 (f16, bf16), 8 (f32) or 16 (f64).
size_t hexDigitsOf(ElemKind elem);

/// The value of `elem`'s bit pattern `bits` (0xFF800000 as f32 is -inf), as a double.
double floatFromBits(uint64_t bits, ElemKind elem);

/// Decimal `text` (7, -2.5E+3, 1e-400) rounded once to `elem`, as the double that holds that
/// value exactly; nullopt if it is not a decimal number. `overflow` says whether a finite
/// number rounded to an infinity.
std::optional<double> roundDecimal(std::string_view text, ElemKind elem, bool &overflow);

} // namespace frank
