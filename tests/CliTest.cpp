// End-to-end tests of the frank-jit command line tool: each test runs the real binary, captures
// stdout, stderr and the exit status, and checks exact content (values against plain-double
// oracles, IR text per stage, and the exact error messages).
#include "Engine.h"
#include "TestSupport.h"
#include "ToolSupport.h"
#include "frank/Npy.h"
#include "frank/Tensor.h"
#include "oracles/AttentionMoe.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/TargetParser/Host.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace frank;
using namespace frank::test;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

namespace {

const std::string kComponents = std::string(FRANK_TESTS_DIR) + "/../components";
const std::string kRmsNorm = kComponents + "/normalization/rms_norm.mlir";
const std::string kSwiglu = kComponents + "/activation/swiglu.mlir";

// ---- Reading printed results -----------------------------------------------------------------

struct Printed {
  std::string type;           // "2x4xf32"
  std::vector<double> values; // in row-major order
};

/// Parses the line "result[N]: TYPE=[[a b] [c d]]" of `run`'s stdout.
Printed parseResult(const std::string &out, int index) {
  Printed p;
  std::string prefix = "result[" + std::to_string(index) + "]: ";
  size_t start = out.find(prefix);
  if (start == std::string::npos) {
    ADD_FAILURE() << "no '" << prefix << "' in stdout:\n" << out;
    return p;
  }
  start += prefix.size();
  size_t end = out.find('\n', start);
  std::string line = out.substr(start, end - start);
  size_t eq = line.find('=');
  p.type = line.substr(0, eq);
  std::string body = line.substr(eq + 1);
  for (char &c : body)
    if (c == '[' || c == ']')
      c = ' ';
  std::istringstream in(body);
  std::string token;
  while (in >> token)
    p.values.push_back(std::strtod(token.c_str(), nullptr));
  return p;
}

/// rtol plus a tiny atol so exact zeros compare; `run` prints 6 significant digits ({:g}), a
/// relative error of at most 5e-6, so rtol 1e-5 is the tightest meaningful tolerance.
void expectClose(const std::vector<double> &actual, const std::vector<double> &expected,
                 double rtol = 1e-5, double atol = 1e-7) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(std::fabs(actual[i] - expected[i]), rtol * std::fabs(expected[i]) + atol)
        << "element " << i << ": got " << actual[i] << ", expected " << expected[i];
}

// ---- Oracles: the documented maths in plain double loops --------------------------------------

/// rms_norm.mlir: y[b, i] = x[b, i] / sqrt(sum_j x[b, j]^2 / E + eps) * w[i].
std::vector<double> rmsNormOracle(const std::vector<double> &x, const std::vector<double> &w,
                                  int64_t rows, int64_t hidden, double eps) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < rows; ++b) {
    double ss = 0;
    for (int64_t j = 0; j < hidden; ++j)
      ss += x[b * hidden + j] * x[b * hidden + j];
    double rms = std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i)
      y[b * hidden + i] = x[b * hidden + i] / rms * w[i];
  }
  return y;
}

/// swiglu.mlir: y = gate * silu(up), silu(u) = u / (1 + exp(-u)).
std::vector<double> swigluOracle(const std::vector<double> &gate, const std::vector<double> &up) {
  std::vector<double> y(gate.size());
  for (size_t i = 0; i < gate.size(); ++i)
    y[i] = gate[i] * (up[i] / (1.0 + std::exp(-up[i])));
  return y;
}

std::string joinValues(const std::vector<double> &values) {
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < values.size(); ++i)
    os << (i ? "," : "") << values[i];
  return os.str();
}

Tensor f32Tensor(const std::vector<int64_t> &shape, const std::vector<double> &values) {
  Tensor t = Tensor::zeros(DType::F32, shape);
  for (size_t i = 0; i < values.size(); ++i)
    t.as<float>()[i] = static_cast<float>(values[i]);
  return t;
}

std::vector<double> tensorValues(const Tensor &t) {
  EXPECT_EQ(t.dtype(), DType::F32);
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i)
    v.push_back(t.as<float>()[i]);
  return v;
}

/// Deterministic values in [-1, 1), exactly representable as f32 so oracle and tool see the
/// same inputs.
std::vector<double> pattern(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t s = seed;
  for (double &x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<double>(s >> 8) / (1 << 23) - 1.0);
  }
  return v;
}

const std::vector<double> kX = {1, 2, 3, 4, 5, 6, 7, 8};
const std::vector<double> kW = {0.5, -1, 2, 1.25};

} // namespace

// ---- run: values against the oracle ----------------------------------------------------------

TEST(CliRun, RmsNormExplicitValuesMatchOracle) {
  for (std::string mode : {"specialized", "generic"}) {
    SCOPED_TRACE("mode " + mode);
    ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--mode=" + mode,
                            "--input=2x4xf32=" + joinValues(kX), "--input=4xf32=" + joinValues(kW),
                            "--input=f32=1e-6"});
    EXPECT_SUCCESS(r);
    EXPECT_EQ(r.err, "");
    // Exactly one result line, nested brackets per dim.
    EXPECT_TRUE(
        std::regex_match(r.out, std::regex(R"(result\[0\]: 2x4xf32=\[\[[^\]]*\] \[[^\]]*\]\]\n)")))
        << r.out;
    Printed p = parseResult(r.out, 0);
    EXPECT_EQ(p.type, "2x4xf32");
    expectClose(p.values, rmsNormOracle(kX, kW, 2, 4, 1e-6));
  }
}

TEST(CliRun, RmsNormFusedAgreesWithLinalg) {
  // The two public functions implement the same maths.
  ToolResult r =
      runTool({"run", kRmsNorm, "--function=rms_norm_fused", "--input=2x4xf32=" + joinValues(kX),
               "--input=4xf32=" + joinValues(kW), "--input=f32=1e-6"});
  EXPECT_SUCCESS(r);
  expectClose(parseResult(r.out, 0).values, rmsNormOracle(kX, kW, 2, 4, 1e-6));
}

TEST(CliRun, SwigluExplicitValuesMatchOracle) {
  std::vector<double> gate = {1, 2, 3, 4, 5, 6}, up = {-1, 0, 1, 2, -3, 0.5};
  for (std::string mode : {"specialized", "generic"}) {
    SCOPED_TRACE("mode " + mode);
    // swiglu.mlir has a single public function, so --function is optional.
    ToolResult r =
        runTool({"run", kSwiglu, "--mode=" + mode, "--input=1x2x3xf32=" + joinValues(gate),
                 "--input=1x2x3xf32=" + joinValues(up)});
    EXPECT_SUCCESS(r);
    Printed p = parseResult(r.out, 0);
    EXPECT_EQ(p.type, "1x2x3xf32");
    EXPECT_THAT(r.out, StartsWith("result[0]: 1x2x3xf32=[[["));
    expectClose(p.values, swigluOracle(gate, up));
  }
}

// A thread count that is not one is said so and the default taken: FRANK_NUM_THREADS=100000 used
// to create threads for minutes, and 0, -1 or abc passed silently.
TEST(CliRun, ThreadCountThatIsNotOneIsWarnedAboutAndNotUsed) {
  std::vector<double> gate = {1, 2, 3, 4, 5, 6}, up = {-1, 0, 1, 2, -3, 0.5};
  for (const char *threads : {"0", "-1", "abc", "4x", "100000", " "}) {
    SCOPED_TRACE(threads);
    ToolResult r =
        runTool({"run", kSwiglu, "--no-disk-cache", "--input=1x2x3xf32=" + joinValues(gate),
                 "--input=1x2x3xf32=" + joinValues(up)},
                {{"FRANK_NUM_THREADS", threads}});
    EXPECT_SUCCESS(r);
    EXPECT_THAT(r.err, HasSubstr(fmt::format("frank-jit: warning: FRANK_NUM_THREADS={} is not a "
                                             "thread count from 1 to 256; using ",
                                             threads)));
    expectClose(parseResult(r.out, 0).values, swigluOracle(gate, up));
  }
  ToolResult r =
      runTool({"run", kSwiglu, "--no-disk-cache", "--input=1x2x3xf32=1", "--input=1x2x3xf32=1"},
              {{"FRANK_NUM_THREADS", "256"}});
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.err, testing::Not(HasSubstr("FRANK_NUM_THREADS")));
  // Spaces around the number are taken on both sides.
  r = runTool({"run", kSwiglu, "--no-disk-cache", "--input=1x2x3xf32=1", "--input=1x2x3xf32=1"},
              {{"FRANK_NUM_THREADS", " 3 "}});
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.err, testing::Not(HasSubstr("FRANK_NUM_THREADS")));
  // Warned about before any kernel runs: a tiny one from the disk cache runs no parallel loop.
  const std::string cache = tempPath("cache");
  for (int i = 0; i < 2; ++i) {
    r = runTool({"run", kSwiglu, "--input=1x2x3xf32=1", "--input=1x2x3xf32=1"},
                {{"FRANK_NUM_THREADS", "abc"}, {"FRANK_CACHE_DIR", cache}});
    EXPECT_SUCCESS(r);
    EXPECT_THAT(r.err, HasSubstr("FRANK_NUM_THREADS=abc is not a thread count")) << "run " << i;
  }
}

TEST(CliRun, SwigluRandomIsDeterministicPerSeed) {
  auto runSeed = [](const std::string &seed) {
    return runTool(
        {"run", kSwiglu, "--input=4x4x8xf32=random", "--input=4x4x8xf32=random", "--seed=" + seed});
  };
  ToolResult a = runSeed("7"), b = runSeed("7"), c = runSeed("8");
  EXPECT_SUCCESS(a);
  EXPECT_SUCCESS(b);
  EXPECT_SUCCESS(c);
  EXPECT_EQ(a.out, b.out) << "the same seed must give the same inputs";
  EXPECT_NE(a.out, c.out) << "a different seed must give different inputs";

  Printed p = parseResult(a.out, 0);
  EXPECT_EQ(p.type, "4x4x8xf32");
  ASSERT_EQ(p.values.size(), 128u);
  // Random floats are in [-1, 1): |gate * silu(up)| < silu(1) = 0.7311. And gate and up must be
  // drawn independently: were they equal, y = u^2 * sigmoid(u) would never be negative.
  bool anyNegative = false;
  for (double v : p.values) {
    EXPECT_LT(std::fabs(v), 0.7311);
    anyNegative |= v < 0;
  }
  EXPECT_TRUE(anyNegative) << "gate and up look like the same random stream";
}

// random:LO:HI draws from [LO, HI): swiglu of gate and up in [2, 3) lies in
// [2 silu(2), 3 silu(3)) = [3.523, 8.574), where the default [-1, 1) keeps it under silu(1).
TEST(CliRun, RandomRangeBoundsFloats) {
  ToolResult r = runTool(
      {"run", kSwiglu, "--input=4x4x8xf32=random:2:3", "--input=4x4x8xf32=random:2:3", "--seed=3"});
  EXPECT_SUCCESS(r);
  Printed p = parseResult(r.out, 0);
  ASSERT_EQ(p.values.size(), 128u);
  for (double v : p.values) {
    EXPECT_GE(v, 2 * 2 / (1 + std::exp(-2.0)) - 1e-5);
    EXPECT_LT(v, 3 * 3 / (1 + std::exp(-3.0)) + 1e-5);
  }
}

// Integer ids in range for mul_mat_id's 8 experts pass its gather's bounds check; the default
// [0, 16) would not, nor would [8, 16), which proves the lower bound is applied too.
TEST(CliRun, RandomRangeBoundsIntegers) {
  const std::string mulMatId = kComponents + "/moe/mul_mat_id.mlir";
  auto runIds = [&](const std::string &ids) {
    return runTool({"run", mulMatId, "--input=16x8x8xf32=random", "--input=8x2x32xf32=random",
                    "--input=2x32xi32=" + ids});
  };
  EXPECT_SUCCESS(runIds("random:0:8"));
  for (const char *outOfRange : {"random", "random:8:16"}) {
    ToolResult r = runIds(outOfRange);
    EXPECT_FALSE(r.signaled) << outOfRange;
    EXPECT_EQ(r.exitCode, 1) << outOfRange;
    EXPECT_THAT(r.err, HasSubstr("is out of bounds for dim 2 of '%weights', which has "
                                 "size 8"))
        << outOfRange;
  }
}

// ---- .npy input and output -------------------------------------------------------------------

TEST(CliNpy, InputsAndOutputThroughNpyFiles) {
  std::string x = tempPath("x.npy"), w = tempPath("w.npy"), y = tempPath("y.npy");
  writeNpy(x, f32Tensor({2, 4}, kX));
  writeNpy(w, f32Tensor({4}, kW));
  std::vector<double> expected = rmsNormOracle(kX, kW, 2, 4, 1e-6);

  // Typed (2x4xf32=@x.npy, checked against the file) and untyped (@x.npy) spellings.
  for (std::string xInput : {"--input=2x4xf32=@" + x, "--input=@" + x}) {
    SCOPED_TRACE(xInput);
    std::remove(y.c_str());
    ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", xInput, "--input=@" + w,
                            "--input=f32=1e-6", "--output=@" + y});
    EXPECT_SUCCESS(r);
    EXPECT_EQ(r.out, "") << "results saved with --output are not printed";
    EXPECT_EQ(r.err, "");
    Tensor result = readNpy(y);
    EXPECT_EQ(result.typeString(), "2x4xf32");
    // Full float precision here, so a tighter check than the printed values allow.
    expectClose(tensorValues(result), expected, 1e-6, 0);
  }

  // Without --output the same inputs print the same result.
  ToolResult printed = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=@" + x,
                                "--input=@" + w, "--input=f32=1e-6"});
  EXPECT_SUCCESS(printed);
  expectClose(parseResult(printed.out, 0).values, expected);
}

TEST(CliNpy, LargeOddShapeMatchesOracleInBothModes) {
  // 4099 is not a multiple of any vector width: exercises the vector loop and its remainder.
  const int64_t rows = 3, hidden = 4099;
  std::vector<double> xs = pattern(rows * hidden, 1), ws = pattern(hidden, 2);
  std::string x = tempPath("x.npy"), w = tempPath("w.npy"), y = tempPath("y.npy");
  writeNpy(x, f32Tensor({rows, hidden}, xs));
  writeNpy(w, f32Tensor({hidden}, ws));
  std::vector<double> expected = rmsNormOracle(xs, ws, rows, hidden, 1e-5);
  for (std::string mode : {"specialized", "generic"}) {
    SCOPED_TRACE("mode " + mode);
    std::remove(y.c_str());
    ToolResult r =
        runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--mode=" + mode, "--input=@" + x,
                 "--input=@" + w, "--input=f32=1e-5", "--output=@" + y});
    EXPECT_SUCCESS(r);
    Tensor result = readNpy(y);
    EXPECT_EQ(result.typeString(), "3x4099xf32");
    // f32 sums of 4099 squares: the observed error is ~4e-7 relative, rtol 1e-5 leaves margin.
    expectClose(tensorValues(result), expected, 1e-5, 1e-7);
  }
}

// ---- compile: every stage ----------------------------------------------------------------------

namespace {
std::vector<std::string> compileArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "compile",          kRmsNorm,     "--function=rms_norm_linalg", "--input=32x4096xf32",
      "--input=4096xf32", "--input=f32"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}
} // namespace

TEST(CliCompile, EmitMlirPrintsTheParsedModule) {
  ToolResult r = runTool(compileArgs({"--emit=mlir"}));
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.out, StartsWith("module @rms_norm_components {"));
  EXPECT_THAT(r.out, HasSubstr("util.func public @rms_norm_linalg(%input: tensor<?x?xf32>"));
  EXPECT_THAT(r.out, HasSubstr("util.func public @rms_norm_fused("));
}

TEST(CliCompile, EmitSpecializedBakesInEveryShape) {
  ToolResult r = runTool(compileArgs({"--emit=specialized"}));
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.out, HasSubstr("util.func public @rms_norm_linalg(%input: tensor<32x4096xf32>, "
                               "%weight: tensor<4096xf32>, %eps: f32) -> tensor<32x4096xf32>"));
  EXPECT_THAT(r.out, Not(HasSubstr("?"))) << "no dynamic dim may survive specialization";
  // E converted to f32 is a constant now.
  EXPECT_THAT(r.out, HasSubstr("arith.constant 4096 : i32"));
}

TEST(CliCompile, EmitLoopsHasVectorizedConstantLoops) {
  ToolResult r = runTool(compileArgs({"--emit=loops"}));
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.out, StartsWith("kernel @"));
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(for \w+ in 0\.\.4096 vectorized \{)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(for \w+ in 0\.\.32 )"))) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("dims["))) << "specialized loops need no runtime dims";
}

TEST(CliCompile, GenericLoopsKeepRuntimeDims) {
  ToolResult r = runTool(compileArgs({"--emit=loops", "--mode=generic"}));
  EXPECT_SUCCESS(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(for \w+ in 0\.\.dims\[\d\])"))) << r.out;
  EXPECT_THAT(r.out, HasSubstr("runtime dims: 3"));
  EXPECT_THAT(r.out, Not(HasSubstr("4096"))) << "generic kernels must not bake in a dim";
}

TEST(CliCompile, EmitLlvmDefinesTheEntryFunction) {
  ToolResult r = runTool(compileArgs({"--emit=llvm"}));
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.out, HasSubstr("define void @"));
  EXPECT_THAT(r.out, HasSubstr("target triple"));
}

TEST(CliCompile, EmitOptimizedLlvmIsVectorized) {
  ToolResult r = runTool(compileArgs({"--emit=llvm-opt"}));
  EXPECT_SUCCESS(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("<" + floatVectorWidths() + " x float>")))
      << "no float vectors " << floatVectorWidths() << " wide in the optimized IR";
}

TEST(CliCompile, EmitAsmUsesVectorInstructions) {
  ToolResult r = runTool(compileArgs({"--emit=asm"}));
  EXPECT_SUCCESS(r);
  // SSE's packed instructions below AVX2 (x86-64).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(engineOfContexts().hasAvx2()
                                                      ? R"(vmovups|vfmadd|%ymm|%zmm)"
                                                      : R"(\b(movups|mulps|addps)\b)")))
      << "no vector code in the assembly";
  // asm is the default stage.
  ToolResult byDefault = runTool(compileArgs({}));
  EXPECT_SUCCESS(byDefault);
  EXPECT_EQ(byDefault.out, r.out);
}

// --cpu generates code for another CPU, by LLVM's name: its LLVM IR and assembly print on any
// host (16 lanes in zmm registers for an AVX-512 CPU, 8 in ymm for AVX2); an unknown name is an
// error that lists the names LLVM knows.
TEST(CliCompile, CpuPrintsAnotherCpusKernels) {
  for (auto [cpu, lanes, reg] :
       {std::tuple{"skylake-avx512", 16, "%zmm"}, std::tuple{"x86-64-v3", 8, "%ymm"}}) {
    SCOPED_TRACE(cpu);
    ToolResult ir = runTool(compileArgs({"--emit=llvm-opt", fmt::format("--cpu={}", cpu)}));
    EXPECT_SUCCESS(ir);
    EXPECT_THAT(ir.out, HasSubstr(fmt::format("<{} x float>", lanes)));
    EXPECT_THAT(ir.out, HasSubstr(fmt::format("\"target-cpu\"=\"{}\"", cpu)));
    ToolResult assembly = runTool(compileArgs({"--emit=asm", fmt::format("--cpu={}", cpu)}));
    EXPECT_SUCCESS(assembly);
    EXPECT_THAT(assembly.out, HasSubstr(reg));
    if (lanes == 8) {
      EXPECT_THAT(assembly.out, Not(HasSubstr("%zmm")));
    }
  }
  ToolResult unknown = runTool(compileArgs({"--emit=loops", "--cpu=bogus"}));
  EXPECT_FAILURE(unknown);
  EXPECT_THAT(unknown.err, HasSubstr("error: unknown CPU 'bogus' for x86_64"));
  EXPECT_THAT(unknown.err, HasSubstr("skylake-avx512"));
}

// FRANK_CPU stands in for the host where no --cpu is given; --cpu wins over it, and a name LLVM
// does not know is the same error.
TEST(CliCompile, FrankCpuNamesTheDefaultCpu) {
  ToolResult ir = runTool(compileArgs({"--emit=llvm-opt"}), {{"FRANK_CPU", "x86-64-v3"}});
  EXPECT_SUCCESS(ir);
  EXPECT_THAT(ir.out, HasSubstr("\"target-cpu\"=\"x86-64-v3\""));
  EXPECT_THAT(ir.out, HasSubstr("<8 x float>"));
  ToolResult named = runTool(compileArgs({"--emit=llvm-opt", "--cpu=skylake-avx512"}),
                             {{"FRANK_CPU", "x86-64-v3"}});
  EXPECT_SUCCESS(named);
  EXPECT_THAT(named.out, HasSubstr("\"target-cpu\"=\"skylake-avx512\""));
  ToolResult unknown = runTool(compileArgs({"--emit=loops"}), {{"FRANK_CPU", "bogus"}});
  EXPECT_FAILURE(unknown);
  EXPECT_THAT(unknown.err, HasSubstr("error: unknown CPU 'bogus' for x86_64"));
}

// A kernel for a CPU whose features the host lacks is an error when run, naming them, not an
// illegal instruction: Granite Rapids' AMX-FP16, which no host of ours has, unless this one does.
TEST(CliRun, AKernelForFeaturesTheHostLacksIsAnError) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--cpu=graniterapids",
                          "--input=2x4xf32=" + joinValues(kX), "--input=4xf32=" + joinValues(kW),
                          "--input=f32=1e-6"});
  if (llvm::sys::getHostCPUFeatures().lookup("amx-fp16")) {
    EXPECT_SUCCESS(r);
    expectClose(parseResult(r.out, 0).values, rmsNormOracle(kX, kW, 2, 4, 1e-6));
  } else {
    EXPECT_FAILURE(r);
    EXPECT_THAT(r.err, HasSubstr("error: kernels for CPU 'graniterapids' cannot run on this "
                                 "host, which lacks "));
    EXPECT_THAT(r.err, HasSubstr("amx-fp16"));
  }
}

// FRANK_LLVM_PASSES puts another optimization pipeline in place of the kernel passes, to compare:
// LLVM's O3 still makes a vectorized kernel, and a pipeline LLVM cannot parse is a clear error.
TEST(CliCompile, LlvmPassesReplaceTheKernelPipeline) {
  ToolResult o3 = runTool(compileArgs({"--emit=llvm-opt"}), {{"FRANK_LLVM_PASSES", "default<O3>"}});
  EXPECT_SUCCESS(o3);
  EXPECT_TRUE(std::regex_search(o3.out, std::regex("<" + floatVectorWidths() + " x float>")))
      << o3.out;
  ToolResult bad = runTool(compileArgs({"--emit=asm"}), {{"FRANK_LLVM_PASSES", "no-such-pass"}});
  EXPECT_FAILURE(bad);
  EXPECT_THAT(bad.err, HasSubstr("error: FRANK_LLVM_PASSES: unknown pass name 'no-such-pass'"));
  // A pipeline that hides the kernel's functions is the user's error, not an internal one.
  ToolResult hidden =
      runTool({"run", kSwiglu, "--no-disk-cache", "--input=1x2x3xf32=1", "--input=1x2x3xf32=1"},
              {{"FRANK_LLVM_PASSES", "internalize,globaldce"}});
  EXPECT_FAILURE(hidden);
  EXPECT_THAT(hidden.err, HasSubstr("error: FRANK_LLVM_PASSES='internalize,globaldce': the kernel "
                                    "does not link after it"));
  EXPECT_THAT(hidden.err, Not(HasSubstr("internal compiler error")));
}

TEST(CliCompile, PrintIrAfterAllShowsEveryPassInOrder) {
  ToolResult r = runTool(compileArgs({"--emit=loops", "--print-ir-after-all"}));
  EXPECT_SUCCESS(r);
  size_t last = 0;
  for (std::string pass :
       {"inline", "specialize", "generalize-attention", "fuse-elementwise", "lower-to-loops"}) {
    size_t at = r.out.find("// -----// IR Dump After " + pass + " //----- //\n");
    ASSERT_NE(at, std::string::npos) << "no dump after " << pass;
    EXPECT_GE(at, last) << pass << " is out of order";
    last = at;
  }
  // The requested stage still follows the dumps.
  EXPECT_THAT(r.out.substr(last), HasSubstr("\nkernel @"));
}

// --time-passes prints LLVM's reports on stderr, the optimizer's before the code generator's, for
// the printed assembly and for a kernel compiled to run; without it, neither prints.
TEST(CliCompile, TimePassesReportsTheOptimizerThenTheCodeGenerator) {
  auto expectReports = [](const ToolResult &r) {
    EXPECT_SUCCESS(r);
    const size_t optimizer = r.err.find("LoopVectorizePass");
    const size_t codegen = r.err.find("X86 DAG->DAG Instruction Selection");
    ASSERT_NE(optimizer, std::string::npos) << r.err;
    ASSERT_NE(codegen, std::string::npos) << r.err;
    EXPECT_LT(optimizer, codegen);
    EXPECT_THAT(r.out, Not(HasSubstr("timing report")));
  };
  ToolResult assembly = runTool(compileArgs({"--emit=asm", "--time-passes"}));
  expectReports(assembly);
  EXPECT_THAT(assembly.out, HasSubstr("frank_kernel:"));
  const std::vector<std::string> run = {"run", kSwiglu, "--no-disk-cache", "--input=1x2x3xf32=1",
                                        "--input=1x2x3xf32=1"};
  std::vector<std::string> timed = run;
  timed.push_back("--time-passes");
  ToolResult ran = runTool(timed);
  expectReports(ran);
  EXPECT_THAT(ran.out, HasSubstr("result[0]: 1x2x3xf32="));
  ToolResult quiet = runTool(run);
  EXPECT_SUCCESS(quiet);
  EXPECT_THAT(quiet.err, Not(HasSubstr("timing report")));
}

TEST(CliCompile, ExplainSaysWhatWasBakedIn) {
  ToolResult r = runTool(compileArgs({"--emit=loops", "--explain"}));
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.err, HasSubstr("argument #0 (%input): tensor<?x?xf32> -> tensor<32x4096xf32>, "
                               "baked in: dim 0 = 32, dim 1 = 4096\n"));
  EXPECT_THAT(r.err, HasSubstr("argument #1 (%weight): tensor<?xf32> -> tensor<4096xf32>, "
                               "baked in: dim 0 = 4096\n"));
  EXPECT_THAT(r.err, HasSubstr("argument #2 (%eps): f32 stays a runtime value\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("baked in"))) << "the explanation goes to stderr only";
}

// --explain says how each attention op splits its keys and why (generalize-attention).
TEST(CliCompile, ExplainSaysHowAttentionSplitsItsKeys) {
  const std::string attention = kComponents + "/attention/attention_gqa.mlir";
  auto explain = [&](const std::string &function, std::vector<std::string> extra) {
    std::vector<std::string> args = {"compile",
                                     attention,
                                     "--function=" + function,
                                     "--input=1x1x32x16xf32",
                                     "--input=1x512x8x16xf32",
                                     "--input=1x512x8x16xf32",
                                     "--input=f32",
                                     "--emit=loops",
                                     "--explain",
                                     "--no-disk-cache"};
    args.insert(args.end(), extra.begin(), extra.end());
    ToolResult r = runTool(args);
    EXPECT_TRUE(!r.signaled && r.exitCode == 0) << describe(r);
    return r.err;
  };
  EXPECT_THAT(
      explain("attention_gqa_decode", {}),
      testing::MatchesRegex(".*iree_linalg_ext.attention at .*attention_gqa.mlir:[0-9]+:[0-9]+: "
                            "keys in 2 chunks of 256 keys \\(decode; 4 queries a KV head\\)\n.*"));
  EXPECT_THAT(explain("attention_gqa_decode", {"--config=key-chunks=8"}),
              HasSubstr(": keys in 8 chunks of 64 keys (key-chunks; 4 queries a KV head)\n"));
  EXPECT_THAT(explain("attention_gqa_decode", {"--runtime-dims=key:1,value:1"}),
              HasSubstr(": keys in one piece: the key count is a runtime value\n"));
  EXPECT_THAT(explain("attention_gqa_causal", {}),
              HasSubstr(": keys in one piece: it has a mask\n"));
}

// ---- bench -------------------------------------------------------------------------------------

TEST(CliBench, JsonReportAndSpeedupSummary) {
  ToolResult r =
      runTool({"bench", kRmsNorm, "--function=rms_norm_linalg", "--input=32x4096xf32=random",
               "--input=4096xf32=random", "--input=f32=1e-6", "--benchmark_min_time=0.01",
               "--benchmark_format=json"});
  EXPECT_SUCCESS(r);
  // stdout is the JSON document alone.
  EXPECT_THAT(r.out, StartsWith("{"));
  EXPECT_EQ(r.out.find_last_not_of(" \n"), r.out.rfind('}'));
  // Google Benchmark appends "/real_time" to names registered with UseRealTime().
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"("name": "rms_norm_linalg/specialized(/real_time)?")")))
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"("name": "rms_norm_linalg/generic(/real_time)?")")))
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"argument_bytes/s\""));
  EXPECT_THAT(r.out, HasSubstr("\"compile_ms\""));
  // The summary line the tool prints after both benchmarks ran (its words, not the speeds, which
  // a loaded machine may turn around).
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(rms_norm_linalg: specialized is \d+\.\d\dx (faster|slower) than generic\n)")))
      << "stderr:\n"
      << r.err;
}

// Kernels that --benchmark_filter leaves out are never compiled: here the generic one (the
// generic MoE block at 32 tokens would gather 940 MB of weights on its first call).
TEST(CliBench, FilteredOutKernelsAreNotCompiled) {
  const std::vector<std::string> command = {"bench",
                                            kRmsNorm,
                                            "--function=rms_norm_linalg",
                                            "--input=8x64xf32=random",
                                            "--input=64xf32=random",
                                            "--input=f32=1e-6",
                                            "--benchmark_min_time=0.01",
                                            "--benchmark_format=json",
                                            "--no-disk-cache"};
  for (bool filtered : {false, true}) {
    SCOPED_TRACE(filtered ? "filtered" : "all");
    std::vector<std::string> args = command;
    if (filtered)
      args.push_back("--benchmark_filter=specialized");
    ToolResult r = runTool(args, {{"FRANK_DEBUG", "1"}});
    EXPECT_SUCCESS(r);
    EXPECT_THAT(r.err, HasSubstr("compiled @rms_norm_linalg (specialized, 8x64xf32"));
    EXPECT_EQ(r.err.find("compiled @rms_norm_linalg (generic") == std::string::npos, filtered)
        << r.err;
    EXPECT_EQ(r.out.find("rms_norm_linalg/generic") == std::string::npos, filtered) << r.out;
  }
}

TEST(CliBench, RuntimeDimsAddAPartlySpecializedKernel) {
  ToolResult r =
      runTool({"bench", kRmsNorm, "--function=rms_norm_linalg", "--input=32x4096xf32=random",
               "--input=4096xf32=random", "--input=f32=1e-6", "--runtime-dims=input:0",
               "--benchmark_min_time=0.01", "--benchmark_format=json"});
  EXPECT_SUCCESS(r);
  for (const char *kind : {"specialized", "partial", "generic"})
    EXPECT_TRUE(std::regex_search(
        r.out, std::regex(fmt::format(R"("name": "rms_norm_linalg/{}(/real_time)?")", kind))))
        << kind << "\n"
        << r.out;
  EXPECT_TRUE(
      std::regex_search(r.err, std::regex(R"(rms_norm_linalg: partly specialized \(input:0\))"
                                          R"( takes \d+\.\d\dx the fully specialized time\n)")))
      << "stderr:\n"
      << r.err;
}

// --versus compiles the fully specialized kernel a second time, under other choices, in a
// context of its own, and times it beside the first as `versus`.
TEST(CliBench, VersusTimesTheKernelUnderOtherChoices) {
  const std::vector<std::string> command = {"bench",
                                            kComponents + "/linear/matmul.mlir",
                                            "--function=matmul",
                                            "--input=16x64xf32=random",
                                            "--input=64x64xf32=random",
                                            "--benchmark_min_time=0.01",
                                            "--benchmark_format=json",
                                            "--no-disk-cache"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = command;
    args.insert(args.end(), extra.begin(), extra.end());
    return runTool(args, {{"FRANK_DEBUG", "1"}});
  };
  auto compiles = [](const std::string &err) {
    const std::string line = "compiled @matmul (specialized, 16x64xf32, 64x64xf32)";
    int n = 0;
    for (size_t at = err.find(line); at != std::string::npos; at = err.find(line, at + 1))
      ++n;
    return n;
  };
  ToolResult r = with({"--versus=tile=2x2"});
  EXPECT_SUCCESS(r);
  for (const char *kind : {"specialized", "versus", "generic"})
    EXPECT_TRUE(std::regex_search(
        r.out, std::regex(fmt::format(R"("name": "matmul/{}(/real_time)?")", kind))))
        << kind << "\n"
        << r.out;
  EXPECT_EQ(compiles(r.err), 2) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(matmul: specialized under --versus='tile=2x2')"
                                                  R"( takes \d+\.\d{3}x the time of the default)"
                                                  R"( strategy\n)")))
      << r.err;
  // Against --config's choices.
  r = with({"--config=tile=2x2", "--versus=tile=4x2", "--benchmark_filter=specialized|versus"});
  EXPECT_SUCCESS(r);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(matmul: specialized under --versus='tile=4x2')"
                                                  R"( takes \d+\.\d{3}x the time of)"
                                                  R"( --config='tile=2x2'\n)")))
      << r.err;
  // Left out by the filter, it is not compiled.
  r = with({"--versus=tile=2x2", "--benchmark_filter=specialized"});
  EXPECT_SUCCESS(r);
  EXPECT_EQ(compiles(r.err), 1) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("matmul/versus")));
  // Choices that do not fit fail before any benchmark runs, named as --versus's (why groups do
  // not apply depends on the host's vector width: a packed B with AVX-512, k blocks with AVX2).
  r = with({"--versus=n-group=3"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, HasSubstr("error: --versus: n-group=3 does not apply: groups need "));
  EXPECT_THAT(r.out, Not(HasSubstr("matmul/specialized")));
  r = with({"--versus=bogus=1"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, HasSubstr("error: --versus='bogus=1': unknown key 'bogus'"));
}

// --runtime-dims repeats like --input and --link: every occurrence counts (only the last did).
TEST(CliCompile, RuntimeDimsAccumulateOverOccurrences) {
  ToolResult r = runTool({"compile", kRmsNorm, "--function=rms_norm_linalg", "--emit=loops",
                          "--explain", "--input=32x4096xf32", "--input=4096xf32", "--input=f32",
                          "--runtime-dims=input:1", "--runtime-dims=weight:0"});
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.err, HasSubstr("argument #0 (%input): tensor<?x?xf32> -> tensor<32x?xf32>, baked "
                               "in: dim 0 = 32, runtime: dim 1"));
  EXPECT_THAT(r.err, HasSubstr("argument #1 (%weight): tensor<?xf32> -> tensor<?xf32>, runtime: "
                               "dim 0"));
}

// A flag Google Benchmark knows, with a value it refuses, is not called unknown.
TEST(CliBench, ABadBenchmarkFlagValueIsNotCalledUnknown) {
  ToolResult r = runTool({"bench", kRmsNorm, "--function=rms_norm_linalg", "--input=2x8xf32=1",
                          "--input=8xf32=1", "--input=f32=1e-6", "--benchmark_min_time=soon"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, HasSubstr("frank-jit: error: Google Benchmark did not take "
                               "'--benchmark_min_time=soon': an unknown flag or a bad value\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("unknown benchmark flag")));
}

TEST(CliCompile, QuestionMarkDimsStayRuntimeValues) {
  ToolResult r = runTool({"compile", kRmsNorm, "--function=rms_norm_linalg", "--input=?x4096xf32",
                          "--input=4096xf32", "--input=f32", "--emit=loops", "--explain"});
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.err, HasSubstr("tensor<?x?xf32> -> tensor<?x4096xf32>, baked in: dim 1 = 4096, "
                               "runtime: dim 0\n"));
  EXPECT_THAT(r.out, HasSubstr("in 0..dims[0]"));
  EXPECT_THAT(r.out, HasSubstr("in 0..4096"));
}

// ---- errors: exit 1, nothing on stdout, the exact message on stderr ----------------------------

TEST(CliErrors, UnknownFlag) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--bogus",
                          "--input=2x4xf32=1", "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, StartsWith("frank-jit: Unknown command line argument '--bogus'.  Try: '" +
                                kBinary + " --help'\n"));
}

TEST(CliErrors, NoSubcommand) {
  ToolResult none = runTool({});
  EXPECT_FAILURE(none);
  EXPECT_EQ(
      none.err,
      "frank-jit: error: choose a command: compile, run, bench, link or cache (see --help)\n");

  // A file where the subcommand belongs.
  ToolResult fileOnly = runTool({kRmsNorm});
  EXPECT_FAILURE(fileOnly);
  EXPECT_THAT(fileOnly.err, StartsWith("frank-jit: Unknown subcommand '" + kRmsNorm + "'."));
}

TEST(CliErrors, MissingFile) {
  std::string missing = tempPath("missing.mlir");
  ToolResult r = runTool({"run", missing, "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, missing + ": error: cannot open file: No such file or directory\n");
}

TEST(CliErrors, MalformedMlirPointsAtTheOp) {
  std::string path = tempPath("bad.mlir");
  writeFile(path, "module @m {\n"
                  "  util.func public @f(%x: f32) -> f32 {\n"
                  "    %y = arith.bogus %x : f32\n"
                  "    util.return %y : f32\n"
                  "  }\n"
                  "}\n");
  for (std::string command : {"run", "compile"}) {
    SCOPED_TRACE(command);
    ToolResult r = runTool({command, path, "--input=f32=1"});
    EXPECT_FAILURE(r);
    // file:line:col, then the source line and a caret under the op name.
    EXPECT_EQ(r.err, path + ":3:10: error: unsupported op 'arith.bogus'\n"
                            "    %y = arith.bogus %x : f32\n"
                            "         ^\n");
  }
}

// Integer literals are read and printed exactly: through a double, 2^53 + 1 became 2^53 and
// INT64_MAX became INT64_MIN.
TEST(CliRun, I64ValuesRoundTripExactly) {
  std::string path = tempPath("same_i64.mlir"), out = tempPath("same_i64.npy");
  writeFile(path, "module @m {\n"
                  "  util.func public @f(%x: tensor<?xi64>) -> tensor<?xi64> {\n"
                  "    util.return %x : tensor<?xi64>\n"
                  "  }\n"
                  "}\n");
  const std::vector<int64_t> values = {9007199254740993, INT64_MAX, INT64_MIN, -1};
  const std::string input = "--input=4xi64=9007199254740993,9223372036854775807,"
                            "-9223372036854775808,-1";
  ToolResult printed = runTool({"run", path, input});
  EXPECT_SUCCESS(printed);
  EXPECT_THAT(printed.out, HasSubstr("4xi64=[9007199254740993 9223372036854775807 "
                                     "-9223372036854775808 -1]"));
  EXPECT_SUCCESS(runTool({"run", path, input, "--output=@" + out}));
  Tensor t = readNpy(out);
  ASSERT_EQ(t.numel(), 4);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(t.as<int64_t>()[i], values[static_cast<size_t>(i)]);
}

// A literal becomes the nearest value of its element type, ties to even, subnormals kept, in one
// rounding from the decimal (through f32 first, 1 + 2^-11 + 2^-40 would tie and round down);
// hexadecimal gives the bits, as in MLIR. Expected bits from NumPy's float16 and an exact
// rational rounding to bfloat16.
TEST(CliRun, LiteralsRoundOnceToTheElementType) {
  struct Case {
    const char *type, *values;
    std::vector<uint16_t> bits;
  };
  const std::vector<Case> cases = {
      {"f16",
       "6e-8,1e-7,2049,2051,1.0005,1.0004882812509095,65504,-0.0,0x7E00",
       {0x0001, 0x0002, 0x6800, 0x6802, 0x3C01, 0x3C01, 0x7BFF, 0x8000, 0x7E00}},
      {"bf16",
       "1.006,1.00390625,1.01171875,3e38,1e-39,-1.006,0.1,0x7FC0,0xFF80",
       {0x3F81, 0x3F80, 0x3F82, 0x7F62, 0x000B, 0xBF81, 0x3DCD, 0x7FC0, 0xFF80}}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.type);
    std::string path = tempPath(fmt::format("same_{}.mlir", c.type)),
                out = tempPath(fmt::format("same_{}.npy", c.type));
    // .npy has no bf16: bf16 comes out widened to f32, exactly (its bits, 16 zeros after).
    const bool widen = std::string(c.type) == "bf16";
    writeFile(path, widen ? "util.func public @f(%x: tensor<?xbf16>) -> tensor<?xf32> {\n"
                            "  %c0 = arith.constant 0 : index\n"
                            "  %n = tensor.dim %x, %c0 : tensor<?xbf16>\n"
                            "  %e = tensor.empty(%n) : tensor<?xf32>\n"
                            "  %y = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, "
                            "affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]} "
                            "ins(%x : tensor<?xbf16>) outs(%e : tensor<?xf32>) {\n"
                            "  ^bb0(%a: bf16, %o: f32):\n"
                            "    %w = arith.extf %a : bf16 to f32\n"
                            "    linalg.yield %w : f32\n"
                            "  } -> tensor<?xf32>\n"
                            "  util.return %y : tensor<?xf32>\n}\n"
                          : "util.func public @f(%x: tensor<?xf16>) -> tensor<?xf16> {\n"
                            "  util.return %x : tensor<?xf16>\n}\n");
    ToolResult r =
        runTool({"run", path, fmt::format("--input={}x{}={}", c.bits.size(), c.type, c.values),
                 "--output=@" + out});
    EXPECT_SUCCESS(r);
    Tensor t = readNpy(out);
    ASSERT_EQ(t.numel(), static_cast<int64_t>(c.bits.size()));
    for (size_t i = 0; i < c.bits.size(); ++i)
      EXPECT_EQ(widen ? t.as<uint32_t>()[i] : t.as<uint16_t>()[i],
                widen ? uint32_t{c.bits[i]} << 16 : c.bits[i])
          << "element " << i;
  }
}

// f32 bits in hexadecimal, and integers in hexadecimal.
TEST(CliRun, HexadecimalLiteralsAreBitsForFloatsAndValuesForIntegers) {
  std::string floats = tempPath("same_f32.mlir"), ints = tempPath("same_i8.mlir"),
              longs = tempPath("same_i64.mlir");
  for (auto [path, type] :
       {std::pair{floats, "f32"}, std::pair{ints, "i8"}, std::pair{longs, "i64"}})
    writeFile(path, fmt::format("util.func public @f(%x: tensor<?x{0}>) -> tensor<?x{0}> {{\n"
                                "  util.return %x : tensor<?x{0}>\n}}\n",
                                type));
  ToolResult f = runTool({"run", floats, "--input=3xf32=0x3F800000,0xFF800000,0x00000001"});
  EXPECT_SUCCESS(f);
  EXPECT_THAT(f.out, HasSubstr("3xf32=[1 -inf 1.401298e-45]"));
  // As in MLIR, unsigned hexadecimal is the type's bits: 0xFF is -1 as an i8.
  ToolResult i = runTool({"run", ints, "--input=4xi8=0x7f,-0x80,0x0A,0xFF"});
  EXPECT_SUCCESS(i);
  EXPECT_THAT(i.out, HasSubstr("4xi8=[127 -128 10 -1]"));
  ToolResult l = runTool({"run", longs, "--input=2xi64=0xFFFFFFFFFFFFFFFF,0x8000000000000000"});
  EXPECT_SUCCESS(l);
  EXPECT_THAT(l.out, HasSubstr("2xi64=[-1 -9223372036854775808]"));
}

// Decimal literals round once from their digits, in --input and in the MLIR text alike: 1 +
// 2^-24 + 2^-60 through a double first tied and rounded down to 1.0f. A double's subnormal is a
// number (strtod's ERANGE had called it none), and an f32 underflow is 0.
TEST(CliRun, DecimalLiteralsRoundOnceFromTheirDigits) {
  const std::string justAbove = "1.000000059604644776257986737988403547205962240695953369140625";
  std::string path = tempPath("decimal.mlir"), out = tempPath("decimal.npy");
  writeFile(path, fmt::format("util.func public @f(%x: tensor<3xf32>) -> tensor<3xf32> {{\n"
                              "  %c = arith.constant {} : f32\n"
                              "  %e = tensor.empty() : tensor<3xf32>\n"
                              "  %r = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, "
                              "affine_map<(i) -> (i)>], iterator_types = [\"parallel\"]}} "
                              "ins(%x : tensor<3xf32>) outs(%e : tensor<3xf32>) {{\n"
                              "  ^bb0(%a: f32, %o: f32):\n"
                              "    %s = arith.mulf %a, %c : f32\n"
                              "    linalg.yield %s : f32\n"
                              "  }} -> tensor<3xf32>\n"
                              "  util.return %r : tensor<3xf32>\n}}\n",
                              justAbove));
  ToolResult r = runTool(
      {"run", path, fmt::format("--input=3xf32={},1e-400,1", justAbove), "--output=@" + out});
  EXPECT_SUCCESS(r);
  Tensor t = readNpy(out);
  ASSERT_EQ(t.numel(), 3);
  // x * c: (1 + 2^-23)^2 rounds to 1 + 2^-22; 0; c itself.
  EXPECT_EQ(t.as<uint32_t>()[0], 0x3F800002u);
  EXPECT_EQ(t.as<uint32_t>()[1], 0u);
  EXPECT_EQ(t.as<uint32_t>()[2], 0x3F800001u);
  std::string f64 = tempPath("same_f64.mlir");
  writeFile(f64, "util.func public @f(%x: tensor<?xf64>) -> tensor<?xf64> {\n"
                 "  util.return %x : tensor<?xf64>\n}\n");
  ToolResult sub = runTool({"run", f64, "--input=2xf64=4.9e-324,-2.2250738585072014e-309"});
  EXPECT_SUCCESS(sub);
  EXPECT_THAT(sub.out, HasSubstr("2xf64=[4.940656e-324 -2.225074e-309]"));
}

// A scalar argument may come from a 0-d .npy file of its type.
TEST(CliNpy, ScalarsFromZeroDimensionalFiles) {
  std::string x = tempPath("x.npy"), w = tempPath("w.npy"), eps = tempPath("eps.npy");
  writeNpy(x, f32Tensor({2, 4}, kX));
  writeNpy(w, f32Tensor({4}, kW));
  writeNpy(eps, f32Tensor({}, {0.5}));
  std::vector<double> expected = rmsNormOracle(kX, kW, 2, 4, 0.5);
  for (std::string epsInput : {"--input=@" + eps, "--input=f32=@" + eps}) {
    SCOPED_TRACE(epsInput);
    ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=@" + x,
                            "--input=@" + w, epsInput});
    EXPECT_SUCCESS(r);
    expectClose(parseResult(r.out, 0).values, expected);
  }
}

TEST(CliErrors, WrongNumberOfInputs) {
  ToolResult two = runTool(
      {"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x4xf32=1", "--input=4xf32=1"});
  EXPECT_FAILURE(two);
  EXPECT_EQ(two.err, "frank-jit: error: '@rms_norm_linalg' takes 3 arguments (tensor<?x?xf32>, "
                     "tensor<?xf32>, f32) but 2 --inputs were given\n");

  ToolResult one = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x4xf32=1"});
  EXPECT_FAILURE(one);
  EXPECT_EQ(one.err, "frank-jit: error: '@rms_norm_linalg' takes 3 arguments (tensor<?x?xf32>, "
                     "tensor<?xf32>, f32) but 1 --input was given\n");
}

TEST(CliErrors, WeightSizeDisagreesWithHiddenSize) {
  // The message points at the op that ties the dims together; find it in the component rather
  // than hard-coding a line number.
  std::istringstream source(readFile(kRmsNorm));
  std::string line, location;
  for (int number = 1; std::getline(source, line); ++number) {
    size_t col = line.find("%out = linalg.generic");
    if (col != std::string::npos) {
      location = kRmsNorm + ":" + std::to_string(number) + ":" + std::to_string(col + 1);
      break;
    }
  }
  ASSERT_FALSE(location.empty());
  std::string message = location + ": error: loop dim d1 of 'linalg.generic' has extent 4096 from "
                                   "operand #0 (%input) dim 1 but 4095 from operand #2 (%weight) "
                                   "dim 0\n";

  // Specialized: found while compiling, reported with the source line.
  ToolResult run = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=32x4096xf32=1",
                            "--input=4095xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(run);
  EXPECT_THAT(run.err, StartsWith(message));
  EXPECT_THAT(run.err, HasSubstr("    %out = linalg.generic"));

  ToolResult compile = runTool({"compile", kRmsNorm, "--function=rms_norm_linalg",
                                "--input=32x4096xf32", "--input=4095xf32", "--input=f32"});
  EXPECT_FAILURE(compile);
  EXPECT_THAT(compile.err, StartsWith(message));

  // Generic: dims are runtime values, so the same check happens when the kernel is called.
  ToolResult generic = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--mode=generic",
                                "--input=32x4096xf32=1", "--input=4095xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(generic);
  EXPECT_THAT(generic.err, StartsWith(message));
}

TEST(CliErrors, WrongRank) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=4096xf32=1",
                          "--input=4096xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: in call to '@rms_norm_linalg': argument #0 (%input) has rank "
                   "2 ('tensor<?x?xf32>') but was given rank 1 ('4096xf32')\n");
}

TEST(CliErrors, WrongDtype) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x4xi32=1",
                          "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: in call to '@rms_norm_linalg': argument #0 (%input) has "
                   "element type f32 but was given i32 ('2x4xi32')\n");
}

TEST(CliErrors, BadTypeString) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=32x?xf32=random",
                          "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: --input #0 '32x?xf32=random': a tensor with data has no '?' "
                   "dims (--runtime-dims keeps a dim a runtime value)\n");
}

TEST(CliErrors, BadValueCount) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x2xf32=1,2,3",
                          "--input=2xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: --input #0 '2x2xf32=1,2,3': gives 3 values but 2x2xf32 has 4 "
                   "elements (give one value to fill, or all of them)\n");
}

TEST(CliErrors, NpyShapeDisagreesWithInputType) {
  std::string x = tempPath("x.npy");
  writeNpy(x, f32Tensor({2, 4}, kX));
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=4x2xf32=@" + x,
                          "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: --input #0 '4x2xf32=@" + x +
                       "': the file holds 2x4xf32 but the input says 4x2xf32\n");
}

TEST(CliErrors, CorruptNpy) {
  std::string x = tempPath("corrupt.npy");
  writeFile(x, "this is not a .npy file at all");
  for (std::string input : {"--input=2x4xf32=@" + x, "--input=@" + x}) {
    SCOPED_TRACE(input);
    ToolResult r = runTool(
        {"run", kRmsNorm, "--function=rms_norm_linalg", input, "--input=4xf32=1", "--input=f32=1"});
    EXPECT_FAILURE(r);
    EXPECT_EQ(r.err, x + ": error: not a .npy file: bad magic string (expected \\x93NUMPY)\n");
  }
}

TEST(CliErrors, OutputCountMismatch) {
  std::string a = tempPath("a.npy"), b = tempPath("b.npy");
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x4xf32=1",
                          "--input=4xf32=1", "--input=f32=1", "--output=@" + a, "--output=@" + b});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err,
            "frank-jit: error: '@rms_norm_linalg' has 1 result but 2 --outputs were given\n");
  EXPECT_FALSE(fileExists(a)) << "nothing may be written when the outputs do not match";
  EXPECT_FALSE(fileExists(b));
}

TEST(CliErrors, OutputWithoutAt) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=2x4xf32=1",
                          "--input=4xf32=1", "--input=f32=1", "--output=y.npy"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: --output 'y.npy' must name a file as @file.npy\n");
}

TEST(CliErrors, AmbiguousFunction) {
  // rms_norm.mlir defines rms_norm_linalg and rms_norm_fused.
  ToolResult r =
      runTool({"run", kRmsNorm, "--input=2x4xf32=1", "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err,
            "frank-jit: error: " + kRmsNorm +
                " defines 2 public functions (@rms_norm_linalg, @rms_norm_fused); choose one "
                "with --function=NAME\n");
}

TEST(CliErrors, UnknownFunctionListsTheDefinedOnes) {
  ToolResult r = runTool({"run", kRmsNorm, "--function=nope", "--input=2x4xf32=1",
                          "--input=4xf32=1", "--input=f32=1"});
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: error: no function '@nope' in module @rms_norm_components; it "
                   "defines: @rms_norm_linalg, @rms_norm_fused\n");
}

TEST(CliErrors, UnknownEmitStage) {
  ToolResult r = runTool(compileArgs({"--emit=bogus"}));
  EXPECT_FAILURE(r);
  EXPECT_EQ(r.err, "frank-jit: for the --emit option: Cannot find option named 'bogus'!\n");
}

namespace frank::test {
namespace {

TEST(CliConfig, OverrideShowsInLoopsAndKeepsResults) {
  const std::string matmul = kComponents + "/linear/matmul.mlir";
  ToolResult r = runTool({"compile", matmul, "--function=matmul", "--input=16x64xf32",
                          "--input=64x32xf32", "--emit=loops", "--config=tile=3x2,pack=0"});
  EXPECT_SUCCESS(r);
  // The lanes follow the CPU the tool generates code for: $FRANK_CPU, else the host.
  const int lanes = targetOfContexts().vectorBits / 32;
  EXPECT_THAT(r.out, testing::HasSubstr(
                         fmt::format("contraction.outer m=d0 n=d1 k=d2 tile=3x2 lanes={}", lanes)));
  // x = 1 everywhere and w[k, n] = n: every output is 64 * n, whatever the tile.
  std::string w;
  for (int k = 0; k < 2; ++k)
    for (int n = 0; n < 16; ++n)
      w += fmt::format("{}{}", w.empty() ? "" : ",", n);
  r = runTool({"run", matmul, "--function=matmul", "--input=3x2xf32=1,1,1,1,1,1",
               "--input=2x16xf32=" + w, "--config=tile=2x1"});
  EXPECT_SUCCESS(r);
  EXPECT_THAT(r.out, testing::HasSubstr("[0 2 4 6 8 10 12 14 16 18 20 22 24 26 28 30]"));
}

TEST(CliConfig, BadOverrideIsAnError) {
  ToolResult r =
      runTool({"compile", kComponents + "/linear/matmul.mlir", "--function=matmul",
               "--input=16x64xf32", "--input=64x32xf32", "--emit=loops", "--config=tile=3y2"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, testing::HasSubstr("error: --config='tile=3y2': tile '3y2' is not MxN"));
  r = runTool({"compile", kComponents + "/linear/matmul.mlir", "--function=matmul",
               "--input=14x64xf32", "--input=64x32xf32", "--emit=loops", "--config=tile=15x1"});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, testing::HasSubstr("does not fit"));
}

// ---- kernels compiled in parts, and profiled --------------------------------------------------

// moe_ffn_block at 32 tokens: three expert projections, each a parallel loop of its own, and
// the routing around them, enough code for the kernel to compile in parts on two threads. The
// inputs are scaled as in MoeBlockTest, so that every intermediate is O(1).
struct MoeBlockFiles {
  static constexpr int64_t kTokens = 32, kEmbd = 32, kFf = 64, kExperts = 8, kUsed = 2;
  std::string input = tempPath("moe_x.npy"), router = tempPath("moe_router.npy"),
              up = tempPath("moe_up.npy"), gate = tempPath("moe_gate.npy"),
              down = tempPath("moe_down.npy");
  oracle::MoeResult expected;

  MoeBlockFiles() {
    const float ae = 1.5f / std::sqrt(float(kEmbd)), af = 1.5f / std::sqrt(float(kFf));
    auto write = [](const std::string &path, std::vector<int64_t> shape, std::vector<float> v) {
      writeNpy(path, Tensor::borrow(v.data(), DType::F32, std::move(shape)));
      return v;
    };
    std::vector<float> x = write(input, {kTokens, kEmbd},
                                 oracle::randomFloats(kTokens * kEmbd, 21)),
                       r = write(router, {kExperts, kEmbd},
                                 oracle::randomFloats(kExperts * kEmbd, 22, -3 * ae, 3 * ae)),
                       u = write(up, {kFf, kEmbd, kExperts},
                                 oracle::randomFloats(kFf * kEmbd * kExperts, 23, -ae, ae)),
                       g = write(gate, {kFf, kEmbd, kExperts},
                                 oracle::randomFloats(kFf * kEmbd * kExperts, 24, -ae, ae)),
                       d = write(down, {kEmbd, kFf, kExperts},
                                 oracle::randomFloats(kEmbd * kFf * kExperts, 25, -af, af));
    expected = oracle::moeFfnBlock(x.data(), r.data(), u.data(), g.data(), d.data(),
                                   {kTokens, kEmbd, kFf, kExperts, kUsed}, true);
  }
  std::vector<std::string> args(const std::string &output) const {
    return {"run",
            kComponents + "/moe/moe_ffn_block.mlir",
            "--function=moe_ffn_block",
            "--input=@" + input,
            "--input=@" + router,
            "--input=@" + up,
            "--input=@" + gate,
            "--input=@" + down,
            fmt::format("--input=index={}", kExperts),
            fmt::format("--input=index={}", kUsed),
            fmt::format("--input=index={}", kEmbd),
            fmt::format("--input=index={}", kFf),
            "--input=i1=true",
            "--output=@" + output};
  }
};

// Split on two threads or whole on one, compiled or read back from the disk cache (one entry
// holding every part's object): the same kernel, within MoeBlockTest's tolerance (rtol 1e-4,
// atol 1e-5: reductions over E and F in any order, and exp as a polynomial).
TEST(CliParts, SplitKernelsMatchTheOracleWholeAndFromDisk) {
  MoeBlockFiles files;
  ASSERT_GT(files.expected.minSelectionGap, 1e-5)
      << "test data: the top-k selection is ill-conditioned; change the seed";
  std::string cache = tempPath("parts_cache"), y = tempPath("moe_y.npy");
  std::filesystem::remove_all(cache);
  struct Run {
    std::string name, threads;
    std::optional<std::string> cacheDir;
    const char *compileLog;
  };
  for (const Run &run : {Run{"two threads, compiled", "2", cache, "frank: split-in-parts"},
                         Run{"two threads, from disk", "2", cache, nullptr},
                         Run{"one thread, whole", "1", std::nullopt, "frank: optimize "}}) {
    SCOPED_TRACE(run.name);
    std::remove(y.c_str());
    EnvOverrides env = {{"FRANK_DEBUG", "1"}, {"FRANK_NUM_THREADS", run.threads}};
    env["FRANK_CACHE"] = run.cacheDir ? "on" : "off";
    if (run.cacheDir)
      env["FRANK_CACHE_DIR"] = *run.cacheDir;
    ToolResult r = runTool(files.args(y), env);
    EXPECT_SUCCESS(r);
    if (run.compileLog)
      EXPECT_THAT(r.err, testing::HasSubstr(run.compileLog));
    else
      EXPECT_THAT(r.err, testing::HasSubstr("from the disk cache"));
    if (run.threads == "1") {
      EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("split-in-parts")));
    }
    expectClose(tensorValues(readNpy(y)), files.expected.out, 1e-4, 1e-5);
  }
  std::filesystem::remove_all(cache);
}

// FRANK_PERF_MAP=1 names the JIT's functions for `perf report` in /tmp/perf-<pid>.map: the
// kernel, the chunks of its parallel loops (with AVX-512 the three expert projections share one:
// share-bodies) and the nests outlined from it, at distinct addresses with non-zero sizes.
TEST(CliParts, PerfMapNamesTheKernelsFunctions) {
  MoeBlockFiles files;
  std::string y = tempPath("moe_perf_y.npy");
  for (const char *setting : {"1", "0"}) {
    SCOPED_TRACE(setting);
    RunningTool running =
        spawnTool(files.args(y), {{"FRANK_PERF_MAP", setting}, {"FRANK_CACHE", "off"}});
    std::string map = fmt::format("/tmp/perf-{}.map", running.pid);
    EXPECT_SUCCESS(waitTool(running));
    if (std::string(setting) == "0") {
      EXPECT_FALSE(std::filesystem::exists(map));
      continue;
    }
    std::string text = readFile(map);
    std::remove(map.c_str());
    std::regex line("([0-9a-f]+) ([0-9a-f]+) (frank_[0-9a-f]+(\\.[a-z_0-9]+\\.(chunk|nest))?)\n");
    std::set<std::string> names, addresses;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
         it != std::sregex_iterator(); ++it) {
      names.insert((*it)[3]);
      addresses.insert((*it)[1]);
      EXPECT_NE((*it)[2], "0");
    }
    EXPECT_EQ(addresses.size(), names.size()) << text;
    int kernels = 0, chunks = 0, nests = 0;
    for (const std::string &name : names)
      ++(name.ends_with(".chunk") ? chunks : name.ends_with(".nest") ? nests : kernels);
    EXPECT_EQ(kernels, 1) << text;
    EXPECT_GE(chunks, 1) << text;
    EXPECT_GE(nests, 1) << text;
  }
}

} // namespace
} // namespace frank::test
