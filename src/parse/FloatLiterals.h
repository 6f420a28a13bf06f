// \file Float literals rounded as the subset says (MLIR-SUBSET.md §1.2): once, to the nearest
// value of their type, ties to even, subnormals kept. Through a double first, a decimal with
// more digits than a double holds would round twice (1 + 2^-24 + 2^-60 to 1.0f, not the f32
// after it). Shared by the parser and the command line's --input values.
#pragma once

#include "ir/IR.h"

#include <llvm/ADT/APFloat.h>

#include <optional>
#include <string_view>

namespace frank {

/// APFloat's semantics of a float element type.
const llvm::fltSemantics &floatSemantics(ElemKind elem);

/// Decimal `text` (7, -2.5E+3, 1e-400) rounded once to `elem`, as the double that holds that
/// value exactly; nullopt if it is not a decimal number. `overflow` says whether a finite
/// number rounded to an infinity.
std::optional<double> roundDecimal(std::string_view text, ElemKind elem, bool &overflow);

} // namespace frank
