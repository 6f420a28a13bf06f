// \file forward-copies: a loop nest that only copies one buffer into another in a permuted
// order (a transpose the tensor program could not fold into its reader or writer, such as
// attention's query moved into [KV head, group member, position] order and its output moved
// back) disappears into the accesses around it:
//
// - when the copy fills a temporary from a buffer nothing writes, every read of the
//   temporary reads the source at the corresponding element instead;
// - when the copy empties a temporary nothing else reads, written only before it, into a buffer
//   nothing else touches, every write of the temporary writes the destination at the
//   corresponding element instead.
//
// The copy's store must walk its buffer in a dense mixed-radix order (each loop a digit, the
// innermost of stride 1), so that an index into it splits back into the loop values that
// produced it; a digit whose terms could pass its radix carries into the next (as a remainder
// and a quotient), a vector access stays within the innermost digit. Only row-preserving
// copies are forwarded: the innermost loop must have stride 1 on both sides, so rows stay
// contiguous (a pack that transposes a panel for a contraction keeps its copy).
//
// Extents and strides are polynomials in the runtime sizes (Polynomial.h), so partly
// specialized programs forward their copies too: over a runtime length S, row r of a KV head's
// [group member, position] order is position r % S of member r / S. A term carries on its own
// when the radix is a multiple of its scale (m * 2 over 128: (m % 64) * 2, then m / 64), which
// leaves room for the smaller terms beside it, and with its digit's whole value otherwise
// (m * 2 + 1 over an S that may be odd). S5 (attention prefill): 1.06-1.10 -> 0.97-1.05 ms;
// S5c partly specialized, against its specialized kernel in one process: 1.17-1.20x with both
// copies, 1.06-1.14x without.
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

/// Forwards every row-preserving permuting copy nest it can into the accesses around it and
/// removes the nest; returns how many it removed.
int forwardCopies(Program &program);

} // namespace frank::loops
