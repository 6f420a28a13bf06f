// linear/matmul.mlir against a double oracle, over shapes that exercise every part of the
// contraction pipelines: whole and leftover register tiles, packed and unpacked B, k blocks,
// the dot form (matmul_transpose_b) and the matrix-vector case, in both modes; then the same
// results under every hand-set strategy (`loweringConfig`), so an override never changes what a
// kernel computes.
//
// Tolerance: rtol 1e-4, atol 1e-5 per element, as for mul_mat_id (MulMatIdTest.cpp explains
// it): weights uniform in +-1/sqrt(K) and inputs in [-1, 1] keep every output's scale at 1/3
// whatever K, so the f32 rounding of a K-term sum, accumulated in any order, stays ten times
// under the atol up to K = 4096.
#include "Engine.h"
#include "TestSupport.h"
#include "oracles/Oracles.h"
#include "runtime/Bfloat16.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>

namespace frank::test {
namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5;

struct Shape {
  int64_t m, k, n;
};

std::string shapeName(const Shape &s) { return fmt::format("m{}_k{}_n{}", s.m, s.k, s.n); }

std::vector<double> matmulOracle(const std::vector<float> &x, const std::vector<float> &w,
                                 const Shape &s, bool transposeB) {
  return oracle::matmul(x.data(), w.data(), s.m, s.k, s.n, transposeB);
}

/// Runs `function` of linear/matmul.mlir in `ctx` and checks it against the oracle.
void checkMatmul(Context &ctx, const std::string &function, const Shape &s, Mode mode) {
  bool transposeB = function == "matmul_transpose_b";
  Module module = ctx.load(componentPath("linear/matmul.mlir"));
  std::vector<float> x = oracle::randomFloats(s.m * s.k, 11 + s.m);
  float bound = 1.0f / std::sqrt(float(std::max<int64_t>(s.k, 1)));
  std::vector<float> w = oracle::randomFloats(s.k * s.n, 29 + s.n, -bound, bound);
  Tensor xt = Tensor::borrow(x.data(), DType::F32, {s.m, s.k});
  Tensor wt =
      Tensor::borrow(w.data(), DType::F32,
                     transposeB ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n});
  GuardedOutput out({s.m, s.n});
  Kernel kernel = module.function(function).specialize({xt, wt}, mode);
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run({xt, wt}, outputs);
  auto result = oracle::compare(out.data(), matmulOracle(x, w, s, transposeB), kRtol, kAtol);
  EXPECT_TRUE(result.ok) << function << " " << shapeName(s) << ": " << result.describe();
  EXPECT_EQ(out.guardsIntact(), "") << function << " " << shapeName(s);
}

// GEMV with k split in two parts with rows left over in each (1x10, 1x2) and with k odd (1x5,
// the first part taking the last row after the halves).
// Dims that are whole vectors only of half or a quarter of the target's width (40, 36, 20, 12 on
// AVX-512; 36, 20, 12 on AVX2) take the narrower vectors (Strategy.NarrowerVectors...).
// A few rows stream a B of 1 MiB or more as one row does (up to 6 with AVX2, 12 with AVX-512):
// 12 rows with 3 rows left over in each half of k (12x1030), k odd (5x1025), fewer
// rows of B than a step (6x3), each step prefetching the next part's rows (8x4096).
// Dims that no vector width divides (1001, 29, 77, 9, 11, 103, 13, 259) take whole vectors and
// their last columns one lane wide, over all of k after the k blocks: B packed and read in
// place, one row and a leftover tile of rows, k blocks in groups of n blocks (64x512x259,
// 24x2048x259) and not (64x2048x13); streamed by a few rows, each part of k adding its rows to
// the columns left over (1x4096x4097, 3x2048x1027, 1x10x9, and with k odd 1x301x77).
// Whole vectors that only NR = 1 divides (17 at n = 136, 125 at n = 1000) take wider tiles, the
// vectors those leave over in a narrower tile, over all of k, then any last columns (n = 1001
// on AVX2).
// The last three are empty nests: no rows, no columns, and an empty sum (all zeros).
const Shape kShapes[] = {
    {1, 1, 1},       {1, 8, 8},      {3, 5, 7},       {7, 16, 24},       {13, 64, 40},
    {17, 100, 32},   {2, 300, 64},   {6, 512, 96},    {37, 512, 128},    {128, 256, 256},
    {33, 1024, 48},  {1, 4096, 64},  {64, 2048, 512}, {1, 10, 48},       {1, 2, 16},
    {1, 5, 32},      {128, 512, 40}, {9, 36, 20},     {1, 520, 36},      {21, 12, 12},
    {12, 1030, 256}, {5, 1025, 256}, {6, 3, 87392},   {8, 4096, 64},     {32, 300, 1001},
    {37, 53, 29},    {1, 300, 77},   {128, 64, 9},    {5, 7, 11},        {300, 17, 103},
    {64, 2048, 13},  {64, 512, 259}, {24, 2048, 259}, {1, 4096, 4097},   {3, 2048, 1027},
    {1, 10, 9},      {1, 301, 77},   {29, 512, 136},  {128, 1024, 1000}, {0, 8, 16},
    {5, 8, 0},       {5, 0, 16},
};

class MatmulTest : public testing::TestWithParam<std::tuple<Shape, std::string, Mode>> {};

TEST_P(MatmulTest, MatchesOracle) {
  auto [shape, function, mode] = GetParam();
  checkMatmul(context(), function, shape, mode);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         testing::Combine(testing::ValuesIn(kShapes),
                                          testing::Values("matmul", "matmul_transpose_b"),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           return fmt::format("{}_{}_{}", std::get<1>(info.param),
                                              shapeName(std::get<0>(info.param)),
                                              modeName(std::get<2>(info.param)));
                         });

// Every override that fits gives the oracle's answer; the strategy it asked for is the one the
// loop IR reports. With k blocks, the next k block's panel is packed a chunk of rows after each
// m block: 3x1 at k-block 64 over 37 rows packs 8 rows after each of the first 8 of 12 tiles,
// 6x1 at k-block 128 packs 32 rows (22 would not divide 128) after 4 of 6. The same with columns
// left over after the n blocks, which run over all of k.
class MatmulConfigTest : public testing::TestWithParam<std::string> {};

TEST_P(MatmulConfigTest, OverridesKeepResults) {
  Context ctx(withConfig(GetParam()));
  for (Shape s : {Shape{37, 512, 128}, Shape{64, 1024, 256}, Shape{4, 0, 16}, Shape{4, 16, 0}}) {
    checkMatmul(ctx, "matmul", s, Mode::Specialized);
    if (GetParam().find("pack") == std::string::npos &&
        GetParam().find("k-block") == std::string::npos)
      checkMatmul(ctx, "matmul_transpose_b", s, Mode::Specialized);
  }
  // Three columns left over after 16 vectors (NR of 1, 2 and 4 divide them); in dot products,
  // the columns NR leaves over (31 = 7 x 4 + 3).
  checkMatmul(ctx, "matmul", Shape{37, 512, 131}, Mode::Specialized);
  if (GetParam().find("pack") == std::string::npos &&
      GetParam().find("k-block") == std::string::npos)
    checkMatmul(ctx, "matmul_transpose_b", Shape{13, 64, 31}, Mode::Specialized);
  std::string loops = ctx.load(componentPath("linear/matmul.mlir"))
                          .function("matmul")
                          .emit(Stage::Loops, {"37x512xf32", "512x128xf32"});
  if (GetParam() == "pipeline=loops")
    EXPECT_THAT(loops, testing::Not(testing::HasSubstr("contraction")));
  else
    EXPECT_THAT(loops, testing::HasSubstr("contraction.outer"));
  if (GetParam().find("tile=") != std::string::npos) {
    EXPECT_THAT(loops, testing::HasSubstr(GetParam().substr(GetParam().find("tile="), 8)));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MatmulConfigTest,
                         testing::Values("pipeline=loops", "tile=1x1", "tile=5x2", "tile=3x4",
                                         "tile=8x1,k-block=64", "pack=0", "pack=1,k-block=256",
                                         "tile=7x2,k-block=128,pack=1", "tile=3x1,k-block=64",
                                         "tile=6x1,k-block=128"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c)))
                               c = '_';
                           return name;
                         });

// A dim of no whole vectors: the columns past its whole vectors run after the parallel loop of
// groups of n blocks, down every m block, over all 512 of k rather than the k blocks of 256 the
// n blocks take (the oracle checks the results: kShapes, 64x512x259). Accumulators that start
// from the fill take them in one vector ending at n (columns 251 to 258); an output that adds
// to what it holds takes them one lane wide.
TEST(MatmulColumnsLeftOver, RunAfterTheNBlocksOverAllOfK) {
  Context avx2(forCpu(kAvx2Cpu)); // the AVX2 kernel, on any host
  std::string loops = avx2.load(componentPath("linear/matmul.mlir"))
                          .function("matmul")
                          .emit(Stage::Loops, {"64x512xf32", "512x259xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("tile=2x4 lanes=8 k-block=256 pack=#1 n-group=4"));
  const size_t groups = loops.find("for n_group in 0..2 parallel");
  // Outside the parallel loop, the columns' own m blocks run on the threads.
  const size_t left = loops.find("\n  for m_block_1 in 0..32 parallel(");
  ASSERT_NE(groups, std::string::npos) << loops;
  ASSERT_NE(left, std::string::npos) << loops;
  EXPECT_LT(groups, left);
  EXPECT_NE(loops.find("for d2 in 0..512 {", left), std::string::npos) << loops;
  EXPECT_NE(loops.find("w[(251 + (d2 * 259)) : 8]", left), std::string::npos) << loops;
  EXPECT_EQ(loops.find("n_left"), std::string::npos) << loops;

  const char *accumulating = R"(
func.func @f(%x: tensor<64x512xf32>, %w: tensor<512x259xf32>, %c: tensor<64x259xf32>)
    -> tensor<64x259xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<64x512xf32>, tensor<512x259xf32>)
                     outs(%c : tensor<64x259xf32>) -> tensor<64x259xf32>
  return %r : tensor<64x259xf32>
}
)";
  Module module = avx2.loadString(accumulating, "acc.mlir");
  loops = module.function("f").emit(Stage::Loops, {"64x512xf32", "512x259xf32", "64x259xf32"});
  const size_t oneLane = loops.find("\n  for n_left in 0..3 {\n    for m_block_1 in 0..32 {");
  ASSERT_NE(oneLane, std::string::npos) << loops;
  EXPECT_NE(loops.find("w[((256 + n_left) + (d2 * 259))]", oneLane), std::string::npos) << loops;
  // Run: c + x w, against the oracle.
  std::vector<float> x = oracle::randomFloats(64 * 512, 3), w = oracle::randomFloats(512 * 259, 4),
                     c = oracle::randomFloats(64 * 259, 5);
  std::vector<double> expected = oracle::matmul(x.data(), w.data(), 64, 512, 259, false);
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] += c[i];
  std::vector<Tensor> out = module.function("f")({Tensor::borrow(x.data(), DType::F32, {64, 512}),
                                                  Tensor::borrow(w.data(), DType::F32, {512, 259}),
                                                  Tensor::borrow(c.data(), DType::F32, {64, 259})});
  auto result = oracle::compare(out[0].as<float>(), expected, kRtol, 1e-3);
  EXPECT_TRUE(result.ok) << result.describe();
}

// The same on AVX2, whatever the host: wider tiles over the vectors only NR = 1 divides, the
// vectors those leave over after the n blocks (with k blocks and packing, and not), then the
// last columns; and by hand, a tile that leaves vectors over where a wider one divides them.
TEST(MatmulVectorsLeftOver, MatchOracleOnAvx2) {
  Context avx2(forCpu(kAvx2Cpu));
  for (Shape s : {Shape{29, 512, 136}, Shape{128, 1024, 1000}, Shape{37, 300, 1001}})
    checkMatmul(avx2, "matmul", s, Mode::Specialized);
  std::string loops = avx2.load(componentPath("linear/matmul.mlir"))
                          .function("matmul")
                          .emit(Stage::Loops, {"29x512xf32", "512x136xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("tile=4x3 lanes=8 pack=#1"));
  // 5 n blocks of 3 vectors, then the 2 vectors left over (columns 120 to 135) down the m
  // blocks (in parallel), all 512 of k, B read in place.
  const size_t left = loops.find("\n  for m_block_1 in 0..7 parallel(");
  ASSERT_NE(left, std::string::npos) << loops;
  EXPECT_NE(loops.find("w[(120 + (d2 * 136)) : 8]", left), std::string::npos) << loops;
  EXPECT_NE(loops.find("w[(128 + (d2 * 136)) : 8]", left), std::string::npos) << loops;
  EXPECT_EQ(loops.find("n_left", left), std::string::npos) << loops;
  Context byHand(forCpu(kAvx2Cpu, "tile=2x3,k-block=256"));
  checkMatmul(byHand, "matmul", Shape{64, 1024, 256}, Mode::Specialized);
}

// A GEMV's parts of k set by hand need not divide n's vectors (127 of them and a column left
// over, in 4 parts of k = 64; 8 parts of k = 1032 on AVX2's 253 vectors and 3 columns).
TEST(MatmulStreamParts, OfKNeedNotDivideTheVectors) {
  Context ctx(withConfig("tile=4x4"));
  checkMatmul(ctx, "matmul", Shape{1, 64, 1017}, Mode::Specialized);
  Context eight(withConfig("tile=8x8"));
  checkMatmul(eight, "matmul", Shape{1, 1032, 2027}, Mode::Specialized);
}

// `frank.config` on one matmul of two chained ones: it holds for that op alone, wins over
// --config where both set a field, and the pair still computes x w1 w2 (the oracle chains the
// two products in double).
TEST(MatmulConfigAttribute, HoldsForItsOpAndWinsOverTheFlag) {
  const char *text =
      R"(util.func @chain(%x: tensor<?x?xf32>, %w1: tensor<?x?xf32>, %w2: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %x, %c0 : tensor<?x?xf32>
  %n = tensor.dim %w1, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %h = linalg.matmul {frank.config = "tile=1x1,pack=0"} ins(%x, %w1 : tensor<?x?xf32>, tensor<?x?xf32>) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
  %p = tensor.dim %w2, %c1 : tensor<?x?xf32>
  %e2 = tensor.empty(%m, %p) : tensor<?x?xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<?x?xf32>) -> tensor<?x?xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<?x?xf32>, tensor<?x?xf32>) outs(%f2 : tensor<?x?xf32>) -> tensor<?x?xf32>
  util.return %y : tensor<?x?xf32>
}
)";
  const Shape first{64, 256, 128}, second{64, 128, 64};
  std::vector<float> x = oracle::randomFloats(first.m * first.k, 3);
  std::vector<float> w1 = oracle::randomFloats(first.k * first.n, 4, -1 / 16.0f, 1 / 16.0f);
  std::vector<float> w2 = oracle::randomFloats(second.k * second.n, 5, -0.09f, 0.09f);
  std::vector<double> hidden = matmulOracle(x, w1, first, false);
  std::vector<double> expected(second.m * second.n, 0.0);
  for (int64_t i = 0; i < second.m; ++i)
    for (int64_t j = 0; j < second.n; ++j)
      for (int64_t p = 0; p < second.k; ++p)
        expected[i * second.n + j] += hidden[i * second.k + p] * w2[p * second.n + j];
  Tensor xt = Tensor::borrow(x.data(), DType::F32, {first.m, first.k});
  Tensor w1t = Tensor::borrow(w1.data(), DType::F32, {first.k, first.n});
  Tensor w2t = Tensor::borrow(w2.data(), DType::F32, {second.k, second.n});
  // What the selection alone gives the second matmul on this target (its attribute removed
  // from the first leaves the second's nest as it is).
  auto strategyAt = [](const std::string &loops, const std::string &location) {
    std::smatch line;
    std::regex_search(loops, line, std::regex(location + ": ([^\n]*)"));
    return line.empty() ? std::string() : line[1].str();
  };
  const std::vector<std::string> shapes{"64x256xf32", "256x128xf32", "128x64xf32"};
  std::string unconfigured =
      context()
          .loadString(std::regex_replace(std::string(text),
                                         std::regex(R"( \{frank.config = "[^"]*"\})"), ""),
                      "chain.mlir")
          .function("chain")
          .emit(Stage::Loops, shapes);
  const std::string selected = strategyAt(unconfigured, "chain.mlir:13:3");
  ASSERT_THAT(selected, testing::HasSubstr("contraction.outer")) << unconfigured;
  for (const char *flag : {"", "tile=2x2"}) {
    SCOPED_TRACE(flag);
    Context ctx(withConfig(flag));
    Function chain = ctx.loadString(text, "chain.mlir").function("chain");
    GuardedOutput out({second.m, second.n});
    std::vector<Tensor> outputs{out.tensor()};
    chain.specialize({xt, w1t, w2t}).run({xt, w1t, w2t}, outputs);
    auto result = oracle::compare(out.data(), expected, kRtol, kAtol);
    EXPECT_TRUE(result.ok) << result.describe();
    EXPECT_EQ(out.guardsIntact(), "");
    std::string loops = chain.emit(Stage::Loops, shapes);
    EXPECT_THAT(loops, testing::ContainsRegex("chain.mlir:9:3: contraction.outer [^\n]*tile=1x1 "))
        << loops;
    EXPECT_THAT(loops, testing::Not(testing::ContainsRegex("chain.mlir:9:3: [^\n]*pack=#")));
    EXPECT_THAT(loops, testing::HasSubstr(" (frank.config \"tile=1x1,pack=0\")\n"));
    // The second matmul takes the selection's choice, or the flag's tile.
    if (*flag)
      EXPECT_THAT(strategyAt(loops, "chain.mlir:13:3"), testing::HasSubstr("tile=2x2 ")) << loops;
    else
      EXPECT_EQ(strategyAt(loops, "chain.mlir:13:3"), selected) << loops;
    EXPECT_THAT(loops, testing::Not(testing::ContainsRegex("chain.mlir:13:3: [^\n]*tile=1x1")));
  }
}

// contraction.dot sums each tile row's accumulators into one vector of NR lanes when the row's
// outputs are consecutive and NR fits a vector (a shuffle tree, Codegen.cpp), and each
// accumulator alone when NR is wider; every power-of-two NR, with leftover rows, gives the
// oracle's answer.
// A fill that only the contraction reads is the tiles' starting value, not a pass over the
// output before them (see takeFillFor in LowerToLoops.cpp), in contraction.dot and in
// contraction.outer, whose tiles with k blocks start from it on the first k block and from the
// output on the others. Filled with 0.5 instead of the components' 0, every output must be the
// oracle's plus 0.5 (33x1024x48 runs k blocks).
TEST(MatmulFill, TilesStartFromTheFillValue) {
  std::string text = componentTextWith("linear/matmul.mlir", "%zero = arith.constant 0.0 : f32",
                                       "%zero = arith.constant 0.5 : f32");
  Module module = context().loadString(text, "matmul_half.mlir");
  for (const char *function : {"matmul", "matmul_transpose_b"})
    for (Shape s :
         {Shape{13, 64, 40}, Shape{13, 64, 48}, Shape{37, 512, 128}, Shape{3, 5, 7},
          Shape{128, 256, 256}, Shape{33, 1024, 48}, Shape{4, 4096, 64}, Shape{64, 128, 127}}) {
      SCOPED_TRACE(fmt::format("{} {}", function, shapeName(s)));
      bool transposeB = std::string(function) == "matmul_transpose_b";
      std::vector<float> x = oracle::randomFloats(s.m * s.k, 5 + s.m);
      std::vector<float> w = oracle::randomFloats(s.k * s.n, 7 + s.n, -0.1f, 0.1f);
      Tensor xt = Tensor::borrow(x.data(), DType::F32, {s.m, s.k});
      Tensor wt = Tensor::borrow(w.data(), DType::F32,
                                 transposeB ? std::vector<int64_t>{s.n, s.k}
                                            : std::vector<int64_t>{s.k, s.n});
      GuardedOutput out({s.m, s.n});
      std::vector<Tensor> outputs{out.tensor()};
      module.function(function).specialize({xt, wt}).run({xt, wt}, outputs);
      std::vector<double> expected = matmulOracle(x, w, s, transposeB);
      for (double &y : expected)
        y += 0.5;
      auto result = oracle::compare(out.data(), expected, kRtol, kAtol);
      EXPECT_TRUE(result.ok) << result.describe();
      EXPECT_EQ(out.guardsIntact(), "");
    }
  // No k blocks at 13x64x48 (n whole vectors of 8 or 16 lanes): the tiles start at 0.5 and
  // nothing fills the output.
  std::string loops = module.function("matmul").emit(Stage::Loops, {"13x64xf32", "64x48xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.outer"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("k-block")));
  EXPECT_THAT(loops, testing::ContainsRegex("var acc: f32x[0-9]+ = broadcast<[0-9]+>\\(0.5f\\)"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("] = 0.5f\n"))) << loops;
  // The dot form adds its sums to 0.5.
  loops = module.function("matmul_transpose_b").emit(Stage::Loops, {"13x64xf32", "40x64xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.dot"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("] = 0.5f\n"))) << loops;
  EXPECT_THAT(loops, testing::HasSubstr("0.5f")) << loops;
  // B transposed over 127 columns packs as over 128, its last n block ending at column 127:
  // its first columns start from 0.5 again, as those of the block before did.
  loops = module.function("matmul_transpose_b").emit(Stage::Loops, {"64x128xf32", "127x128xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.outer"));
  EXPECT_THAT(loops, testing::HasSubstr("pack=#1^T"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("n_left"))) << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("] = 0.5f\n"))) << loops;
  // With k blocks (S7's shape) the first block's tiles start at 0.5, the others load the
  // output, and nothing fills it.
  loops = module.function("matmul").emit(Stage::Loops, {"128x4096xf32", "4096x4096xf32"});
  EXPECT_THAT(loops, testing::HasSubstr("k-block="));
  EXPECT_THAT(loops,
              testing::ContainsRegex("var acc: f32x[0-9]+ = select\\(broadcast<[0-9]+>\\("
                                     "cmp.eq\\(k_block, 0\\)\\), broadcast<[0-9]+>\\(0.5f\\), "
                                     "out0\\["))
      << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("] = 0.5f\n"))) << loops;
}

TEST(MatmulDot, RowSumsOfEveryWidth) {
  const int lanes = targetOfContexts().vectorBits / 32;
  for (const char *tile : {"1x2", "3x4", "2x8", "1x16"}) {
    SCOPED_TRACE(tile);
    Context ctx(withConfig(fmt::format("pipeline=contraction.dot,tile={}", tile)));
    for (Shape s : {Shape{37, 512, 128}, Shape{5, 48, 32}, Shape{4, 16, 16}})
      checkMatmul(ctx, "matmul_transpose_b", s, Mode::Specialized);
    int columns = std::atoi(std::strchr(tile, 'x') + 1);
    std::string loops = ctx.load(componentPath("linear/matmul.mlir"))
                            .function("matmul_transpose_b")
                            .emit(Stage::Loops, {"37x512xf32", "128x512xf32"});
    EXPECT_THAT(loops, testing::HasSubstr(fmt::format("tile={} lanes={}", tile, lanes)));
    std::string sums = "reduce_add(acc";
    for (int c = 1; c < columns; ++c)
      sums += fmt::format(", acc_{}", c);
    if (columns <= lanes)
      EXPECT_THAT(loops, testing::HasSubstr(sums + ")")) << loops;
    else
      EXPECT_THAT(loops, testing::AllOf(
                             testing::HasSubstr("+ reduce_add(acc))"),
                             testing::HasSubstr(fmt::format("+ reduce_add(acc_{}))", columns - 1))))
          << loops;
  }
}

// Weights stored as bf16 or f16 in an f32 contraction whose body widens them (arith.extf): the
// register-tiled pipelines take it. The outer products pack them widened (loads `as f32` in the
// loop IR, the extf then has nothing left to do); the stream of one row reads them in place,
// half the bytes of f32 weights, and its extf widens each vector. The narrow values are
// exact in f32, so the oracle (and its tolerance, as above) is the f32 matmul of the widened
// weights. B as [k, n] and as [n, k], and A widened instead of B.
std::string widenedMatmulText(const char *narrow) {
  auto generic = [&](const char *name, const char *xType, const char *wType, const char *wMap,
                     const char *widen, int nDim) {
    return fmt::format(R"(
  util.func public @{0}(%x: tensor<?x?x{1}>, %w: tensor<?x?x{2}>) -> tensor<?x?xf32> {{
    %c0 = arith.constant 0 : index
    %cn = arith.constant {5} : index
    %m = tensor.dim %x, %c0 : tensor<?x?x{1}>
    %n = tensor.dim %w, %cn : tensor<?x?x{2}>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty(%m, %n) : tensor<?x?xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
    %y = linalg.generic {{indexing_maps = [affine_map<(m, n, k) -> (m, k)>, {3},
                                           affine_map<(m, n, k) -> (m, n)>],
                          iterator_types = ["parallel", "parallel", "reduction"]}}
        ins(%x, %w : tensor<?x?x{1}>, tensor<?x?x{2}>) outs(%acc : tensor<?x?xf32>) {{
    ^bb0(%a: {1}, %b: {2}, %o: f32):
      {4}
      %p = arith.mulf %aw, %bw : f32
      %s = arith.addf %o, %p : f32
      linalg.yield %s : f32
    }} -> tensor<?x?xf32>
    util.return %y : tensor<?x?xf32>
  }})",
                       name, xType, wType, wMap, widen, nDim);
  };
  const std::string widenB = fmt::format("%aw = arith.addf %a, %a : f32\n"
                                         "      %bw = arith.extf %b : {} to f32",
                                         narrow);
  const std::string widenA = fmt::format("%aw = arith.extf %a : {} to f32\n"
                                         "      %bw = arith.addf %b, %b : f32",
                                         narrow);
  const char *kn = "affine_map<(m, n, k) -> (k, n)>", *nk = "affine_map<(m, n, k) -> (n, k)>";
  // linalg.matmul casts the narrow B to f32 itself; x is doubled as in the others.
  const std::string named = fmt::format(R"(
  util.func public @named_b(%x: tensor<?x?xf32>, %w: tensor<?x?x{0}>) -> tensor<?x?xf32> {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %m = tensor.dim %x, %c0 : tensor<?x?xf32>
    %n = tensor.dim %w, %c1 : tensor<?x?x{0}>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty(%m, %n) : tensor<?x?xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
    %x2 = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                          iterator_types = ["parallel", "parallel"]}}
        ins(%x : tensor<?x?xf32>) outs(%x : tensor<?x?xf32>) {{
    ^bb0(%a: f32, %o: f32):
      %d = arith.addf %a, %a : f32
      linalg.yield %d : f32
    }} -> tensor<?x?xf32>
    %y = linalg.matmul ins(%x2, %w : tensor<?x?xf32>, tensor<?x?x{0}>)
        outs(%acc : tensor<?x?xf32>) -> tensor<?x?xf32>
    util.return %y : tensor<?x?xf32>
  }})",
                                        narrow);
  return "module @widened {" + generic("wide_b", "f32", narrow, kn, widenB.c_str(), 1) +
         generic("wide_bt", "f32", narrow, nk, widenB.c_str(), 0) +
         generic("wide_a", narrow, "f32", kn, widenA.c_str(), 1) + named + "\n}\n";
}

// `v` rounded to the 16-bit type: its bits, and the float they stand for.
uint16_t narrowBits(float v, DType type, float &value) {
  uint16_t bits;
  if (type == DType::BF16) {
    bits = runtime::bfloat16Bits(v);
    uint32_t wide = uint32_t(bits) << 16;
    std::memcpy(&value, &wide, 4);
  } else {
    _Float16 h = static_cast<_Float16>(v);
    std::memcpy(&bits, &h, 2);
    value = static_cast<float>(h);
  }
  return bits;
}

/// The 16-bit float types in both modes, for the suites of 16-bit matmuls.
using TypeAndMode = std::tuple<DType, Mode>;
auto sixteenBitTypesAndModes() {
  return testing::Combine(testing::Values(DType::BF16, DType::F16),
                          testing::Values(Mode::Specialized, Mode::Generic));
}
std::string typeAndModeName(const testing::TestParamInfo<TypeAndMode> &info) {
  return fmt::format("{}_{}", dtypeName(std::get<0>(info.param)),
                     modeName(std::get<1>(info.param)));
}

class MatmulWidenedTest : public testing::TestWithParam<TypeAndMode> {};

TEST_P(MatmulWidenedTest, MatchesTheOracleOfTheWidenedValues) {
  auto [narrow, mode] = GetParam();
  Module module = context().loadString(widenedMatmulText(dtypeName(narrow)), "widened.mlir");
  for (const char *function : {"wide_b", "wide_bt", "wide_a", "named_b"})
    for (Shape s : {Shape{1, 4096, 64}, Shape{37, 512, 128}, Shape{128, 1024, 1000},
                    Shape{32, 300, 1001}, Shape{5, 7, 11}, Shape{64, 512, 259}, Shape{1, 301, 77},
                    Shape{128, 256, 256}, Shape{6, 3, 4097}}) {
      SCOPED_TRACE(fmt::format("{} {}", function, shapeName(s)));
      const bool transposeB = std::string(function) == "wide_bt";
      const bool narrowA = std::string(function) == "wide_a";
      std::vector<float> x = oracle::randomFloats(s.m * s.k, 3 + s.m);
      float bound = 1.0f / std::sqrt(float(s.k));
      std::vector<float> w = oracle::randomFloats(s.k * s.n, 5 + s.n, -bound, bound);
      // The narrow operand as stored, and its values widened; the other operand doubled (the
      // body adds it to itself).
      std::vector<float> &narrowed = narrowA ? x : w;
      std::vector<uint16_t> bits(narrowed.size());
      for (size_t i = 0; i < narrowed.size(); ++i)
        bits[i] = narrowBits(narrowed[i], narrow, narrowed[i]);
      std::vector<float> &doubled = narrowA ? w : x;
      std::vector<float> stored = doubled;
      for (float &v : doubled)
        v *= 2;
      Tensor xt = narrowA ? Tensor::borrow(bits.data(), narrow, {s.m, s.k})
                          : Tensor::borrow(stored.data(), DType::F32, {s.m, s.k});
      std::vector<int64_t> wShape =
          transposeB ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
      Tensor wt = narrowA ? Tensor::borrow(stored.data(), DType::F32, wShape)
                          : Tensor::borrow(bits.data(), narrow, wShape);
      GuardedOutput out({s.m, s.n});
      std::vector<Tensor> outputs{out.tensor()};
      module.function(function).specialize({xt, wt}, mode).run({xt, wt}, outputs);
      auto result = oracle::compare(out.data(), matmulOracle(x, w, s, transposeB), kRtol, kAtol);
      EXPECT_TRUE(result.ok) << result.describe();
      EXPECT_EQ(out.guardsIntact(), "");
    }
  if (mode == Mode::Generic)
    return;
  const std::string n = dtypeName(narrow);
  for (const char *function : {"wide_b", "named_b"}) {
    std::string loops =
        module.function(function).emit(Stage::Loops, {"37x512xf32", "512x128x" + n});
    EXPECT_THAT(loops, testing::HasSubstr("contraction.outer"));
    EXPECT_THAT(loops, testing::ContainsRegex("packed_w\\[[^\n]*\\] = w\\[[^\n]*\\] as f32"))
        << loops;
  }
  std::string loops = module.function("wide_b").emit(Stage::Loops, {"1x4096xf32", "4096x64x" + n});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.stream"));
  EXPECT_THAT(loops, testing::ContainsRegex(fmt::format("let b: {}x[0-9]+ = w\\[", n))) << loops;
  EXPECT_THAT(loops, testing::ContainsRegex("let bw: f32x[0-9]+ = extf<f32>\\(b\\)")) << loops;
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulWidenedTest, sixteenBitTypesAndModes(), typeAndModeName);

// Every type of linear/matmul.mlir narrowed to bf16 or f16: the accumulator is 16-bit too, and
// each step rounds, as the body says. The tiled pipelines hold the accumulators as 16-bit vectors
// computed in f32 registers.
//
// Exact check: entries of -1, 0 or 1 with at most 256 nonzero terms per output (A's row m keeps
// the k with k % stride == m % stride) keep every partial sum, in any order, an integer of at
// most 256, exact in both types: the kernel must give the integer sum bit for bit whatever its
// order of summation (the stream's split k, the dot's lane reduction, f16 FMAs).
// Rounding check (bf16, B as [k, n]): the outer-product tiles and the generic loops keep each
// output's k order, and bf16 arithmetic rounds the f32 result of every op (the product of two
// bf16 values is exact in f32, and the sum's two roundings equal one since 24 >= 2 * 8 + 2), so
// real values give the sequential oracle that rounds after each multiply and add, bit for bit.
class MatmulSixteenBitTest : public testing::TestWithParam<TypeAndMode> {};

// `bits` of a 16-bit float of `type`, widened.
float widen(uint16_t bits, DType type) {
  if (type == DType::BF16) {
    uint32_t wide = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// An output of 16-bit floats between guards of signaling NaNs, which a stray write or a
// read-modify-write (quieting them) changes.
struct GuardedNarrowOutput {
  static constexpr int64_t kGuard = 64;
  GuardedNarrowOutput(DType type, int64_t m, int64_t n)
      : pattern(type == DType::BF16 ? 0x7f81 : 0x7c01), storage(m * n + 2 * kGuard, pattern),
        tensor(Tensor::borrow(storage.data() + kGuard, type, {m, n})) {}
  uint16_t at(int64_t i) const { return storage[kGuard + i]; }
  bool guardsIntact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (storage[i] != pattern || storage[storage.size() - 1 - i] != pattern)
        return false;
    return true;
  }
  uint16_t pattern;
  std::vector<uint16_t> storage;
  Tensor tensor;
};

std::vector<uint16_t> runNarrowMatmul(Module &module, const std::string &function, DType type,
                                      const Shape &s, std::vector<uint16_t> &x,
                                      std::vector<uint16_t> &w, Mode mode) {
  bool transposeB = function == "matmul_transpose_b";
  Tensor xt = Tensor::borrow(x.data(), type, {s.m, s.k});
  Tensor wt = Tensor::borrow(
      w.data(), type, transposeB ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n});
  GuardedNarrowOutput out(type, s.m, s.n);
  std::vector<Tensor> outputs{out.tensor};
  module.function(function).specialize({xt, wt}, mode).run({xt, wt}, outputs);
  EXPECT_TRUE(out.guardsIntact());
  return {out.storage.begin() + out.kGuard, out.storage.end() - out.kGuard};
}

TEST_P(MatmulSixteenBitTest, IntegerSumsAreExact) {
  auto [type, mode] = GetParam();
  Module module = context().loadString(
      componentTextWith("linear/matmul.mlir", "f32", dtypeName(type)), "matmul_narrow.mlir");
  std::mt19937 random(7);
  for (const char *function : {"matmul", "matmul_transpose_b"})
    for (Shape s : kShapes) {
      // The generic loops are scalar: their larger shapes would take seconds.
      if (mode == Mode::Generic && s.m * s.k * s.n > (int64_t(1) << 24))
        continue;
      SCOPED_TRACE(fmt::format("{} {}", function, shapeName(s)));
      const bool transposeB = std::string(function) == "matmul_transpose_b";
      const int64_t stride = std::max<int64_t>(1, (s.k + 255) / 256);
      std::vector<int> xv(s.m * s.k), wv(s.k * s.n);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t k = 0; k < s.k; ++k)
          xv[i * s.k + k] = k % stride == i % stride ? int(random() % 3) - 1 : 0;
      for (int &v : wv)
        v = int(random() % 3) - 1;
      float ignored;
      auto narrow = [&](const std::vector<int> &values) {
        std::vector<uint16_t> bits(values.size());
        for (size_t i = 0; i < values.size(); ++i)
          bits[i] = narrowBits(float(values[i]), type, ignored);
        return bits;
      };
      std::vector<uint16_t> x = narrow(xv), w = narrow(wv);
      std::vector<uint16_t> out = runNarrowMatmul(module, function, type, s, x, w, mode);
      int wrong = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          int sum = 0;
          for (int64_t k = 0; k < s.k; ++k)
            sum += xv[i * s.k + k] * (transposeB ? wv[j * s.k + k] : wv[k * s.n + j]);
          float got = widen(out[i * s.n + j], type);
          if (got != float(sum) && wrong++ < 3)
            ADD_FAILURE() << "out[" << i << ", " << j << "] = " << got << ", not " << sum;
        }
      EXPECT_EQ(wrong, 0);
    }
}

TEST(MatmulBfloat16Test, RoundsEachStep) {
  Module module = context().loadString(componentTextWith("linear/matmul.mlir", "f32", "bf16"),
                                       "matmul_bf16.mlir");
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (Shape s : {Shape{37, 512, 128}, Shape{64, 512, 259}, Shape{128, 256, 256},
                    Shape{6, 3, 87392}, Shape{128, 512, 40}, Shape{32, 300, 1001}}) {
      SCOPED_TRACE(fmt::format("{} {}", shapeName(s), modeName(mode)));
      std::vector<float> xf = oracle::randomFloats(s.m * s.k, 3 + s.m);
      std::vector<float> wf = oracle::randomFloats(s.k * s.n, 5 + s.n);
      std::vector<uint16_t> x(xf.size()), w(wf.size());
      for (size_t i = 0; i < xf.size(); ++i)
        x[i] = narrowBits(xf[i], DType::BF16, xf[i]);
      for (size_t i = 0; i < wf.size(); ++i)
        w[i] = narrowBits(wf[i], DType::BF16, wf[i]);
      std::vector<uint16_t> out = runNarrowMatmul(module, "matmul", DType::BF16, s, x, w, mode);
      int wrong = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          float acc = 0, rounded;
          for (int64_t k = 0; k < s.k; ++k) {
            narrowBits(xf[i * s.k + k] * wf[k * s.n + j], DType::BF16, rounded);
            narrowBits(acc + rounded, DType::BF16, acc);
          }
          if (out[i * s.n + j] != runtime::bfloat16Bits(acc) && wrong++ < 3)
            ADD_FAILURE() << "out[" << i << ", " << j
                          << "] = " << widen(out[i * s.n + j], DType::BF16) << ", not " << acc;
        }
      EXPECT_EQ(wrong, 0);
    }
}

// The accumulators are 16-bit vectors as wide as f32's: lanes of 16 with AVX-512, 8 with AVX2
// (whose B as [n, k] takes the dot tiles, as f32's does). bf16 lanes move as bits: the dot's
// lane sums shuffle them, which x86 without AVX512-BF16 did in f32 registers, rounding each
// lane back through a call to __truncsfbf2 (SixteenBitFloatBits.h).
TEST(MatmulSixteenBitStrategy, TilesHoldSixteenBitAccumulators) {
  for (auto [cpu, lanes] : {std::pair{kAvx512Cpu, 16}, std::pair{kAvx2Cpu, 8}})
    for (const char *type : {"bf16", "f16"}) {
      Context ctx(forCpu(cpu));
      Module module = ctx.loadString(componentTextWith("linear/matmul.mlir", "f32", type),
                                     "matmul_narrow.mlir");
      for (const char *function : {"matmul", "matmul_transpose_b"}) {
        SCOPED_TRACE(fmt::format("{} {} {}", cpu, type, function));
        const std::vector<std::string> shapes{fmt::format("64x512x{}", type),
                                              fmt::format("512x512x{}", type)};
        std::string loops = module.function(function).emit(Stage::Loops, shapes);
        EXPECT_THAT(loops, testing::ContainsRegex("contraction\\.(outer|dot) "));
        EXPECT_THAT(loops, testing::HasSubstr(fmt::format("var acc: {}x{} =", type, lanes)))
            << loops;
        for (const std::vector<std::string> &s :
             {shapes, {fmt::format("1x512x{}", type), fmt::format("512x512x{}", type)}})
          EXPECT_THAT(module.function(function).emit(Stage::Assembly, s),
                      testing::Not(testing::HasSubstr("truncsfbf2")));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulSixteenBitTest, sixteenBitTypesAndModes(), typeAndModeName);

} // namespace
} // namespace frank::test
