// \file Generalization: named structured ops become `linalg.generic`, so that fusion and the
// lowering handle one form.
//
//   matmul, batch_matmul         one generic with a reduction over the contraction dim
//   transpose, broadcast, reduce one generic with the matching maps
//   softmax                      max, sum of exp, and divide: three generics
//   gather                       a generic that reads the source with tensor.extract at
//                                coordinates taken from the index tensor
//   attention                    scores (Q·K), scale, score region and mask, row max, exp,
//                                row sum, P·V;
//                                with few queries and static keys (decode), per chunk of
//                                keys, then a combine of the chunks; with many queries
//                                (prefill), per block of queries (generalizeAttention)
//
// matmul and batch_matmul with explicit indexing maps (transposed operands) take those maps;
// gather with a mask is reported as unsupported.
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace frank {
namespace loops {
struct ConfigOverride;
} // namespace loops

/// Marks the `tensor.extract` of a generalized gather: the loop indices it reads the source's
/// slice dims at must span those dims exactly (the lowering checks each extent equals its dim).
inline constexpr const char *kWholeSliceAttr = "frank.whole_slice";

/// Every named op, or (`attention` false) all but attention, which specialized kernels
/// generalize once their shapes are known.
void generalizeNamedOps(FuncOp &fn, bool attention = true);

/// Attention ops after specialization: decode attention (few queries a KV head, a static
/// number of keys, no mask) splits its keys into chunks that the threads take in runs, and
/// prefill whose scores of a KV head pass 1 MiB runs its queries in blocks. `key-chunks=N` and
/// `query-blocks=N` in `config` or in an op's `frank.config` set the counts (1: one piece); each
/// op's choices and their reasons go to `explain`. A causal mask marks the generics with the
/// keys each query sees (CausalMask.h).
void generalizeAttention(FuncOp &fn, const loops::ConfigOverride &config,
                         std::vector<std::string> *explain = nullptr);

} // namespace frank
