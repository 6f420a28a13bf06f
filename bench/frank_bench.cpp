// frank-jit benchmarks: S1 and S2 specialized vs generic vs the plain C++ oracle loop, the cold
// compile time of a kernel, and the overhead of a cached call. Prints the ratios measured in
// this run on stderr.
#include "Kernels.h"
#include "MedianReporter.h"

#include <cstring>
#include <fstream>

using namespace frank;
using namespace frank::bench;

namespace {

// Each iteration compiles a kernel no cache has seen: the module symbol differs per iteration,
// and the disk cache is off (it would serve a later run, and fill up with one-off kernels).
void coldCompile(benchmark::State &state) {
  std::string text;
  {
    std::ifstream in(componentPath("normalization/rms_norm.mlir"));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  ContextOptions options;
  options.diskCache = false;
  Context ctx(options);
  static int64_t n = 0; // process-wide: repetitions must not meet an earlier kernel either
  for (auto _ : state) {
    state.PauseTiming();
    std::string unique = text;
    const std::string symbol = "module @rms_norm_components";
    unique.replace(unique.find(symbol), symbol.size(),
                   fmt::format("module @rms_norm_cold_{}", n++));
    Function fn = ctx.loadString(unique, "rms_norm.mlir").function("rms_norm_linalg");
    state.ResumeTiming();
    benchmark::DoNotOptimize(
        fn.specialize(std::vector<std::string>{"32x4096xf32", "4096xf32", "f32"}));
  }
}

// The whole API path on a cached kernel: cache lookup, argument checks, output allocation.
void cachedCall(benchmark::State &state) {
  Context ctx;
  Case c = rmsNormCase(1, 8);
  Function fn = ctx.load(componentPath(c.component)).function(c.function);
  fn(c.args);
  for (auto _ : state)
    benchmark::DoNotOptimize(fn(c.args));
}

// A held kernel into preallocated outputs: argument checks and the call itself.
void kernelRun(benchmark::State &state) {
  Context ctx;
  Case c = rmsNormCase(1, 8);
  Kernel k = ctx.load(componentPath(c.component)).function(c.function).specialize(c.args);
  std::vector<Tensor> outputs = k(c.args);
  for (auto _ : state)
    k.run(c.args, outputs);
}

} // namespace

int main(int argc, char **argv) {
  std::string format = "console";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0)
      format = argv[i] + 19;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  Context ctx;
  std::vector<Case> cases = {rmsNormCase(32, 4096), rmsNormCase(1, 4096), swigluCase(1, 32, 14336)};
  for (const Case &c : cases)
    registerCase(ctx, c);
  benchmark::RegisterBenchmark("compile/rms_norm(rows=32,cols=4096)/cold", coldCompile)
      ->Unit(benchmark::kMillisecond)
      ->Iterations(20)
      ->UseRealTime();
  benchmark::RegisterBenchmark("call/rms_norm(rows=1,cols=8)/cached_api_call", cachedCall)
      ->UseRealTime();
  benchmark::RegisterBenchmark("call/rms_norm(rows=1,cols=8)/kernel_run", kernelRun)->UseRealTime();

  auto reporter = MedianReporter::forFormat(format);
  benchmark::RunSpecifiedBenchmarks(reporter.get());
  for (const Case &c : cases) {
    double s = reporter->seconds(c.name + "/specialized"),
           g = reporter->seconds(c.name + "/generic"), o = reporter->seconds(c.name + "/oracle");
    if (s > 0 && g > 0 && o > 0)
      fmt::print(stderr,
                 "{}: specialized {:.1f} us, generic {:.1f} us ({:.2f}x), oracle loop {:.1f} us "
                 "({:.2f}x)\n",
                 c.name, s * 1e6, g * 1e6, g / s, o * 1e6, o / s);
  }
  benchmark::Shutdown();
  return 0;
}
