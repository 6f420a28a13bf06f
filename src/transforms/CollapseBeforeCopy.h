// \file Collapsing before permuting: `collapse_shape(copy(x))`, where the copy only permutes the
// dims of x and every group the collapse merges is, unit dims aside, a run of consecutive dims
// of x in order, becomes `copy'(collapse_shape'(x))`: x collapses as a view, and the new copy
// permutes the merged dims. The copy then reads x directly, so fuse-elementwise can fold it into
// its consumers: attention reads K and V in their [B, Skv, Hkv, D] layout instead of copying
// them to [B*Hkv, Skv, D] first.
//
// Expanding likewise: `expand_shape(copy(x))` with a static result becomes
// `copy'(expand_shape'(x))`, each dim of x split as the copied dim it becomes (decode attention's
// chunks of keys, generalize-attention, read K and V so).
//
// Only copies that nothing else reads are rewritten. Sizes asked of the collapse (`tensor.dim`,
// with runtime dims) are asked of the collapsed x instead.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Returns the number of collapses and expands moved before their copies.
int collapseBeforeCopies(FuncOp &fn);

} // namespace frank
