// \file Reading through copies: a `tensor.extract` from the result of a `linalg.generic` that
// only permutes, broadcasts or picks from its single input reads that input directly, at the
// coordinates the copy would have read. When nothing else uses the copy it disappears. This is
// what keeps `mul_mat_id` from materializing its expert-first weights before gathering from
// them.
//
// A producer qualifies when it is all-parallel, has one tensor input, its body yields that input
// unchanged, and its output map is a permutation (so every output coordinate names one loop
// dim); its input map may use dims and constants.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Returns the number of extracts rewritten.
int foldCopiesIntoExtracts(FuncOp &fn);

/// A producer of the kind described above: a generic that only copies its one input.
bool isPureCopy(const Op *op);

} // namespace frank
