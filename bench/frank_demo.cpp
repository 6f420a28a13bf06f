// `make run`: the seed component rms_norm compiled for S1 (32x4096), checked against its oracle
// in both modes, then timed against generic loops and the plain C++ oracle loop.
#include "Kernels.h"
#include "MedianReporter.h"

using namespace frank;
using namespace frank::bench;

int main(int argc, char **argv) {
  try {
    Context ctx;
    Case c = rmsNormCase(32, 4096);
    Function fn = ctx.load(componentPath(c.component)).function(c.function);
    fmt::print("frank-jit: {} from components/{}\n", c.name, c.component);
    std::vector<double> expected = c.oracle();
    bool allOk = true;
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      Kernel k = fn.specialize(c.args, mode);
      Tensor y = k(c.args)[0];
      // Tolerance: MLIR-SUBSET.md §10 for f32 short reductions (rtol 1e-5, atol 1e-6).
      auto cmp = oracle::compare(y.as<float>(), expected, 1e-5, 1e-6);
      allOk &= cmp.ok;
      fmt::print("  {:<12} {} in {:5.1f} ms for {}; oracle check {} (max abs error {:.2g})\n",
                 mode == Mode::Specialized ? "specialized" : "generic",
                 k.loadedFromDisk() ? "loaded from the disk cache" : "compiled",
                 k.compileSeconds() * 1e3, k.signature(),
                 cmp.ok ? "passed" : "FAILED: " + cmp.describe(), cmp.maxAbsError);
    }
    if (!allOk)
      return 1;
    for (const auto &line : fn.specialize(c.args).explanation())
      fmt::print("  {}\n", line);
    fmt::print("\n");
    std::vector<char *> args(argv, argv + argc);
    std::string minTime = "--benchmark_min_time=0.2", reps = "--benchmark_repetitions=5",
                aggregates = "--benchmark_report_aggregates_only=true";
    args.push_back(minTime.data());
    args.push_back(reps.data());
    args.push_back(aggregates.data());
    int n = static_cast<int>(args.size());
    benchmark::Initialize(&n, args.data());
    registerCase(ctx, c);
    auto reporter = MedianReporter::forFormat("console");
    benchmark::RunSpecifiedBenchmarks(reporter.get());
    double s = reporter->seconds(c.name + "/specialized"),
           g = reporter->seconds(c.name + "/generic"), o = reporter->seconds(c.name + "/oracle");
    fmt::print(
        "\n{} medians: specialized {:.1f} us ({:.1f} GB/s), generic loops {:.1f} us, plain C++ "
        "oracle loop {:.1f} us\nspeed-up of the specialized kernel: {:.2f}x over generic "
        "loops, {:.2f}x over the oracle loop\n",
        c.name, s * 1e6, c.bytes / s / 1e9, g * 1e6, o * 1e6, g / s, o / s);
    benchmark::Shutdown();
    return 0;
  } catch (const Error &e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
