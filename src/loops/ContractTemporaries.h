// \file contract-temporaries: a temporary that each iteration of a serial loop writes and reads
// in a row of its own (softmax's scaled scores and exponentials, a row's maximum and sum: one
// row of 128 per row of attention's scores, inside the parallel loop over KV heads) keeps one
// row per iteration of the loops outside instead, reused by every iteration of that loop. The
// rows it writes then stay in L1 rather than streaming through L2 (S5 writes 2 x 256 KiB of
// such rows per KV head).
//
// Sound when the loop holds every access of the temporary and its iterations cannot see each
// other's rows: each access is `S * i + inner + outer` for the loop's variable i, the same S,
// an inner part (loops inside it, constants, vector lanes) within [0, S), and the same outer
// part for all accesses, whose terms, in some order, each step past the rows (S times the
// loop's extent) and the smaller terms' reach (rowsOfTheirOwn). Different iterations then never
// share a row, and an iteration reads only what it wrote itself (reading a row before writing it
// reads an unwritten temporary either way). Specialized programs, partly specialized ones too:
// over runtime sizes, S, the bounds and the steps are polynomials in them (Polynomial.h),
// proved for any sizes (a softmax's rows as long as a runtime key count).
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

/// Drops the row term of every contractible temporary's accesses; returns how many temporaries
/// it contracted.
int contractTemporaries(Program &program);

} // namespace frank::loops
