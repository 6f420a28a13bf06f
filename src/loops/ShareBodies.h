// \file share-bodies: parallel loops whose bodies differ only in index constants read those
// constants from lets bound just before each loop, so that their bodies become the same tree up
// to names, and codegen compiles one chunk function for all of them (its shape match; see
// emitParallelFor in codegen/Codegen.cpp). The MoE block's down projection differs from its gate
// and up projections only in its row count, row stride and k blocks: sharing one function saves
// the compile of a whole register-blocked tile.
//
// Constants that LLVM needs to see stay constant: a group whose bodies differ in the extent of a
// vectorized loop (the vectorizer would add runtime checks and a remainder loop) or in more than
// kMaxSharedConstants places is left alone.
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

inline constexpr int kMaxSharedConstants = 16;

/// Rewrites groups of parallel loops across the program's body; returns how many loops now take
/// constants from lets.
int shareBodies(Program &program);

} // namespace frank::loops
