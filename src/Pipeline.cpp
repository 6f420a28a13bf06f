// The pass sequence.
#include "Pipeline.h"
#include "ir/Clone.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "loops/ContractTemporaries.h"
#include "loops/DistributeRows.h"
#include "loops/ForwardCopies.h"
#include "loops/FuseLoops.h"
#include "loops/ReciprocalDivisors.h"
#include "loops/ShareBodies.h"
#include "transforms/CollapseBeforeCopy.h"
#include "transforms/FoldCopies.h"
#include "transforms/Fusion.h"
#include "transforms/Generalize.h"
#include "transforms/Inline.h"
#include "transforms/Specialize.h"

#include <chrono>
#include <cstdlib>

namespace frank {

int debugLevel() {
  static const int level = [] {
    const char *text = std::getenv("FRANK_DEBUG");
    return text ? std::atoi(text) : 0;
  }();
  return level;
}

const FuncOp &lookupFunction(const ModuleOp &module, const std::string &name) {
  const FuncOp *fn = module.lookup(name);
  if (!fn && !module.name.empty() && name.rfind(module.name + ".", 0) == 0)
    fn = module.lookup(name.substr(module.name.size() + 1));
  if (!fn || fn->isDeclaration()) {
    std::vector<std::string> offered;
    for (auto &f : module.functions)
      if (!f->isDeclaration() && f->isPublic)
        offered.push_back("@" + f->name);
    throw Error(
        fmt::format("error: no function '@{}' in module{}; it defines: {}", name,
                    module.name.empty() ? "" : " @" + module.name,
                    offered.empty() ? "nothing" : fmt::format("{}", fmt::join(offered, ", "))));
  }
  return *fn;
}

PipelineResult runPipeline(const ModuleOp &module, const std::string &name,
                           const std::vector<ArgSpec> &args, const std::string &kernelName,
                           const PipelineOptions &options) {
  const bool timing = debugLevel() >= 1;
  auto after = [&](const char *pass, const FuncOp &fn, auto start) {
    if (timing)
      fmt::print(stderr, "frank: {:<20} {:8.3f} ms\n", pass,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    if (options.printAfter)
      options.printAfter(pass, printFunction(fn));
  };
  using clock = std::chrono::steady_clock;

  const FuncOp &source = lookupFunction(module, name);
  checkArguments(source, args);
  auto t = clock::now();
  std::unique_ptr<FuncOp> fn = cloneFunction(source);
  inlineCalls(*fn, module);
  inlineDispatchRegions(*fn);
  verifyFunction(*fn);
  after("inline", *fn, t);

  t = clock::now();
  generalizeNamedOps(*fn, /*attention=*/options.mode == Mode::Generic);
  verifyFunction(*fn);
  after("generalize", *fn, t);

  if (options.mode == Mode::Generic) {
    t = clock::now();
    fn = bindFlags(*fn, args);
    verifyFunction(*fn);
    after("bind-flags", *fn, t);
  }
  if (options.mode == Mode::Specialized) {
    t = clock::now();
    fn = specialize(*fn, args, options.explain);
    verifyFunction(*fn);
    after("specialize", *fn, t);
    t = clock::now();
    generalizeAttention(*fn, options.lowering.config, options.explain);
    verifyFunction(*fn);
    after("generalize-attention", *fn, t);
    if (options.fuse) {
      t = clock::now();
      foldCopiesIntoExtracts(*fn);
      verifyFunction(*fn);
      after("fold-copies", *fn, t);
      t = clock::now();
      collapseBeforeCopies(*fn);
      verifyFunction(*fn);
      after("collapse-before-copy", *fn, t);
      t = clock::now();
      fuseElementwise(*fn);
      verifyFunction(*fn);
      after("fuse-elementwise", *fn, t);
    }
  }

  t = clock::now();
  LoweredKernel kernel = lowerToLoops(*fn, options.mode, kernelName, options.lowering);
  auto afterLoops = [&](const char *pass, auto start) {
    if (timing)
      fmt::print(stderr, "frank: {:<20} {:8.3f} ms\n", pass,
                 std::chrono::duration<double, std::milli>(clock::now() - start).count());
    if (options.printAfter)
      options.printAfter(pass, loops::print(kernel.program));
  };
  afterLoops("lower-to-loops", t);
  if (options.mode == Mode::Specialized && options.fuse) {
    t = clock::now();
    loops::forwardCopies(kernel.program);
    afterLoops("forward-copies", t);
    t = clock::now();
    loops::fuseLoops(kernel.program);
    afterLoops("fuse-loops", t);
    t = clock::now();
    loops::distributeRows(kernel.program);
    afterLoops("distribute-rows", t);
    t = clock::now();
    loops::contractTemporaries(kernel.program);
    afterLoops("contract-temporaries", t);
  }
  if (options.mode == Mode::Specialized) {
    t = clock::now();
    loops::reciprocalDivisors(kernel.program);
    afterLoops("reciprocal-divisors", t);
  }
  if (options.mode == Mode::Specialized && options.fuse) {
    t = clock::now();
    loops::shareBodies(kernel.program);
    afterLoops("share-bodies", t);
  }
  return {std::move(fn), std::move(kernel)};
}

} // namespace frank
