// \file Deep copies of functions and ops, and use replacement (the IR keeps no use lists).
#pragma once

#include "ir/IR.h"

#include <unordered_map>

namespace frank {

using ValueMap = std::unordered_map<const Value *, Value *>;

/// Copies `op` (and its regions) with operands remapped through `map`; records its results.
std::unique_ptr<Op> cloneOp(const Op &op, ValueMap &map);
std::unique_ptr<FuncOp> cloneFunction(const FuncOp &fn);

/// Replaces every use of `from` by `to` in `block` and the regions below it.
void replaceAllUses(Block &block, const Value *from, Value *to);
/// Number of operand slots in `block` (and below) that read `value`.
int countUses(const Block &block, const Value *value);

} // namespace frank
