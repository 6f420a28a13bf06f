// \file fuse-loops: neighbouring loops over the same extent become one loop whose body runs
// the first loop's body and then the second's, when every buffer one of them writes and the
// other touches is accessed by iteration i only within its own row [i*S, (i+1)*S). Applied
// from the outside in, it turns a softmax's or an rms_norm's passes over a whole tensor into
// one pass per row, each row still in L1 when the next pass reads it, and a per-head chain of
// attention nests into one parallel loop over the heads (one fork and join instead of several).
#pragma once

#include "loops/LoopIR.h"

namespace frank::loops {

/// Fuses loops across the program's body, recursively. Specialized programs only: it needs
/// constant extents inside the loops it fuses.
void fuseLoops(Program &program);

} // namespace frank::loops
