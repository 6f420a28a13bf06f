// \file distribute-rows: a serial loop over short rows (attention's softmax: rows of 128 scores,
// each scaled, reduced to its maximum, exponentiated, summed and divided) runs its rows in blocks
// of a few, each group of its statements over all the block's rows before the next group:
//
//   for i in 0..512 { A(i); B(i); C(i) }
//     ->  for i_block in 0..128 { for i in 0..4 { A(4 * i_block + i) }
//                                 for i in 0..4 { B(...) }  for i in 0..4 { C(...) } }
//
// A short row is a chain of dependent steps (a reduction into one accumulator, its horizontal
// sum or maximum, a divide) too short for the core to overlap with the next row, which comes
// some hundred instructions later; side by side, the block's rows overlap.
//
// Groups are cut where no let or local of the statements before is read after. Sound when no
// iteration's group reads or writes what a later iteration's earlier group touches: every buffer
// that two groups share, one of them writing it, gives each row a part of its own (see
// `rowsOfTheirOwn`), and every local assigned in the loop is declared in it. Loops whose rows are
// longer than a few vectors are left alone: their chains are long enough to overlap, and running
// their rows group by group would read each row back from L2 rather than L1. Specialized
// programs only; contract-temporaries, which runs after, keeps one block of rows of the
// temporaries the groups pass on.
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

/// Distributes every eligible row loop; returns how many it distributed.
int distributeRows(Program &program);

} // namespace frank::loops
