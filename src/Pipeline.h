// \file The compiler's table of contents: the passes from a parsed module to a loop-IR kernel,
// in order, each printable after it runs.
//
//   inline            calls and flow.dispatch.region bodies spliced into one flat function
//   generalize        named ops (matmul, softmax, gather, ...) become linalg.generic; in
//                     specialized mode attention waits for its shapes
//   bind-flags        i1 arguments bound and the branches they decide folded (generic mode)
//   specialize        argument shapes, integer and i1 values bound, every type static
//                     (specialized mode only)
//   generalize-attention  attention becomes generics, decode attention per chunk of keys
//                     (specialized only)
//   fold-copies       extracts read through permuting copies, which then vanish
//                     (specialized only)
//   fuse-elementwise  elementwise producers folded into their consumers (specialized only)
//   lower-to-loops    buffer plan and one loop nest per tensor op
//
// Code generation and the kernel passes follow in the JIT engine (jit/Engine.h).
#pragma once

#include "Signature.h"
#include "loops/LowerToLoops.h"

#include <functional>
#include <string>

namespace frank {

struct PipelineOptions {
  Mode mode = Mode::Specialized;
  bool fuse = true;
  LoweringOptions lowering; // bounds checks, target, strategy overrides
  /// Called after each pass with the pass name and the IR it produced.
  std::function<void(const std::string &pass, const std::string &ir)> printAfter;
  /// Receives the specializer's account of what was baked in.
  std::vector<std::string> *explain = nullptr;
};

struct PipelineResult {
  std::unique_ptr<FuncOp> function; // after the last tensor-IR pass
  LoweredKernel kernel;
};

PipelineResult runPipeline(const ModuleOp &module, const std::string &function,
                           const std::vector<ArgSpec> &args, const std::string &kernelName,
                           const PipelineOptions &options);

/// FRANK_DEBUG: 0 quiet; 1 compile time per kernel and per pass on stderr; 2 also the IR after
/// every pass, as --print-ir-after-all prints it.
int debugLevel();

/// Finds a public function by name, with an error that lists what the module offers.
const FuncOp &lookupFunction(const ModuleOp &module, const std::string &name);

} // namespace frank
