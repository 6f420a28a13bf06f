// \file Generalization: named structured ops become `linalg.generic`, so that fusion and the
// lowering handle one form.
//
//   matmul, batch_matmul         one generic with a reduction over the contraction dim
//   transpose, broadcast, reduce one generic with the matching maps
//   softmax                      max, sum of exp, and divide: three generics
//   gather                       a generic that reads the source with tensor.extract at
//                                coordinates taken from the index tensor
//   attention                    scores (Q·K), scale and mask, row max, exp, row sum, P·V
//
// Attention with a score region other than the identity, gather with a mask, and named ops
// with explicit indexing maps are reported as unsupported.
#pragma once

#include "ir/IR.h"

namespace frank {

void generalizeNamedOps(FuncOp &fn);

} // namespace frank
