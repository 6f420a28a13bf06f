// \file Causal masks: an attention's boolean mask computed from indices alone, as the causal
// prefill's `keep = j <= s + (Skv - S)`, says which keys each query sees before anything runs.
// Generalize marks the scores (Q·K), the softmax's steps up to the sum of the exponentials and
// the weighted sum (P·V) it makes of such an attention with `frank.visible_keys`: the
// contraction tiles skip the keys no row of theirs sees (scores that the mask replaces by -inf,
// probabilities that are exactly 0), and the softmax's loops over a row's keys stop after the
// last one it sees. The normalization runs every key, writing 0 where the mask hides one, so
// that a P·V tile finds 0 past a row's own keys. The scaled scores and the normalization compute
// the mask from their own indices instead of reading it, so that it is never made.
#pragma once

#include "ir/IR.h"

#include <optional>

namespace frank {

/// Query q sees key j when j <= (q mod period) + offset. Over runtime sizes (partial
/// specialization) the period is the query dim's extent over `periodDivisor` (0: the constant
/// `period`), and the offset adds `keyCoef` times the key dim's extent and `periodCoef` times the
/// period (the causal prefill's Skv - S: 1 and -1).
struct CausalBound {
  int64_t period = 1;
  int64_t offset = 0;
  int64_t periodDivisor = 0;
  int64_t keyCoef = 0, periodCoef = 0;
  bool runtime() const { return periodDivisor != 0 || keyCoef != 0 || periodCoef != 0; }
};

/// The keys `mask` (an i1 tensor, query at dim `queryDim`, key at dim `keyDim`) keeps, when it is
/// a generic of indices alone comparing the key's index with the query's plus a constant, or plus
/// the extents of those two dims (the sizes its tensor.empty takes) and a constant, seen through
/// collapse_shape (the query's index being the last of the dims merged into the query dim: the
/// grouped layout's g * S + s, the others constant), or nullopt.
std::optional<CausalBound> causalBoundOf(const Value &mask, int queryDim, int keyDim);

} // namespace frank
