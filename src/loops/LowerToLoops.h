// \file Lowers a flat tensor-IR function (calls and dispatch regions inlined) to a loop-IR
// kernel: a buffer plan, then one loop nest per tensor op.
//
// Buffer plan: inputs are the tensor arguments; a fill or generic writes in place into its
// `outs` tensor when that tensor has no other use and is not an argument, so a chain
// empty -> fill -> generic shares one buffer; the chain of a returned value lives in the output
// buffer. Everything else is a temporary in the workspace.
//
// Specialized mode (all shapes static) marks reduction accumulation `reassoc` and the innermost
// loops for vectorization; generic mode keeps the source's evaluation order.
#pragma once

#include "Signature.h"
#include "loops/LoopIR.h"
#include "loops/Strategy.h"

namespace frank {

struct LoweredKernel {
  loops::Program program;
  std::vector<std::vector<loops::Expr>> outputShapes; // per function result
  std::vector<ElemKind> outputTypes;
  /// (arg, dim) each DimParam reads, and the argument each scalar slot carries.
  std::vector<std::pair<int, int>> dimParamSources;
  std::vector<int> scalarParamArgs;
  std::vector<int> inputArgs; // the argument behind each input buffer slot
  /// Extents that must agree at run time (generic mode; specialization checked the rest).
  struct Constraint {
    loops::Expr a, b;
    Location loc;
    std::string message;      // with {} for the two extents, in order
    bool lessOrEqual = false; // a <= b instead of a == b
    // When set, the condition the call must meet instead (non-zero); a and b then only fill in
    // the message.
    loops::Expr holds = nullptr;
  };
  std::vector<Constraint> constraints;
};

struct LoweringOptions {
  /// A check before every data-dependent read (tensor.extract, and so every gather): an index
  /// outside its dim stops the kernel with an error instead of reading outside.
  bool boundsChecks = true;
  loops::Target target;         // the vector registers strategies may block for
  loops::ConfigOverride config; // hand-set strategy choices (`--config=`)
};

/// Each generic's strategy (loops/Strategy.h) prints as a comment above its nest.
LoweredKernel lowerToLoops(const FuncOp &fn, Mode mode, const std::string &kernelName,
                           const LoweringOptions &options = {});

} // namespace frank
