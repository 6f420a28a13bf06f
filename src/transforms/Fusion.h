// \file Elementwise fusion: an all-parallel `linalg.generic` whose only use is an input of
// another generic is folded into that consumer, so its values are computed where they are
// consumed and never stored. A cheap one (a few ops over at most one input, no copy) that
// several generics read is folded into each of them, computed again where each reads it.
//
// A producer P is fused into consumer C through C's input i when:
//  - P's output map is a permutation and P's body does not read its `outs` value, and
//  - C reads P with a permutation map, so each P element is computed exactly once.
// P's inputs become C's inputs with maps (P's map) composed with (C's map through P's output
// map); P's body is cloned at the head of C's body, with `linalg.index` dims renumbered.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Fuses until no producer qualifies. Returns the number of producers fused.
int fuseElementwise(FuncOp &fn);

} // namespace frank
