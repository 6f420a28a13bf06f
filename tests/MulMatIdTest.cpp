// mul_mat_id (components/moe/mul_mat_id.mlir) against its oracle, over many shapes and routings,
// in specialized and generic modes, with guard regions around every output.
//
// Tolerance (MLIR-SUBSET.md §10, matmul-like ops): rtol 1e-4, atol 1e-5, per element. Each output
// is an f32 sum of n_in products, accumulated in vector lanes or blocks (specialized) or in
// source order (generic), against a double oracle. The rounding error of such a sum is absolute:
// about 2^-24 times the root of sum_j (partial sum_j)^2, so it grows with the reduction length
// and with the data's scale, while outputs that cancel to near zero only get the atol. The
// weights are therefore drawn as a model's are initialized, uniform in +-1/sqrt(n_in), with inputs
// in [-1, 1]: every output then has a standard deviation of 1/3 whatever n_in, and the f32 error
// of a sequential sum is about 2^-24 * sqrt(n_in / 18), 1e-6 at n_in = 4099, ten times under the
// atol. With unit-range weights the error at n_in = 1024 would already reach the atol for outputs
// that cancel; the last test shows that case under the §10 alternative for long reductions,
// NMSE <= 1e-10.
//
// Benchmark shape S9 (weights [3584, 1024, 8], input [1024, 2, T]) runs here with T = 1 in both
// modes and with T = 32 in specialized mode. Generic T = 32 is left to the benchmarks: without
// fusion it materializes the gathered per-slot weight copy, 2 * 32 * 3584 * 1024 floats (940 MB).
#include "TestSupport.h"
#include "ToolSupport.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace frank::test {
namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5; // see the file comment

Function mulMatIdFunction() {
  static Module module = context().load(componentPath("moe/mul_mat_id.mlir"));
  return module.function("mul_mat_id");
}

enum class Routing {
  Distinct, // each token's k slots hold k distinct experts, as top-k selects them
  Same,     // every slot of every token routed to one expert
  Repeated, // ids drawn independently, repeats within a token allowed
};

const char *routingName(Routing r) {
  switch (r) {
  case Routing::Distinct: return "distinct";
  case Routing::Same: return "same";
  case Routing::Repeated: return "repeated";
  }
  return "?";
}

/// ids [k, T] in [0, X).
std::vector<int32_t> makeIds(Routing routing, int64_t experts, int64_t used, int64_t tokens,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(used * tokens));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t e = 0; e < used; ++e) {
      int32_t id = 0;
      switch (routing) {
      case Routing::Distinct: id = order[e % experts]; break;
      case Routing::Same: id = static_cast<int32_t>(experts - 1); break;
      case Routing::Repeated:
        id = static_cast<int32_t>(rng() % static_cast<uint64_t>(experts));
        break;
      }
      ids[e * tokens + t] = id;
    }
  }
  return ids;
}

struct MoeDims {
  int64_t nOut, nIn, experts, used, tokens;
};

/// Runs mul_mat_id into a guarded output and returns the comparison with the oracle.
oracle::Comparison runAndCompare(const MoeDims &d, std::vector<float> &weights,
                                 std::vector<float> &input, std::vector<int32_t> &ids, Mode mode,
                                 double rtol, double atol, Function fn = mulMatIdFunction()) {
  std::vector<Arg> args{Tensor::borrow(weights.data(), DType::F32, {d.nOut, d.nIn, d.experts}),
                        Tensor::borrow(input.data(), DType::F32, {d.nIn, d.used, d.tokens}),
                        Tensor::borrow(ids.data(), DType::I32, {d.used, d.tokens})};
  Kernel kernel = fn.specialize(args, mode);
  GuardedOutput out({d.nOut, d.used, d.tokens});
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  auto expected = oracle::mulMatId(weights.data(), input.data(), ids.data(), d.nOut, d.nIn,
                                   d.experts, d.used, d.tokens);
  return oracle::compare(out.data(), expected, rtol, atol);
}

/// Weights uniform in +-1/sqrt(n_in), inputs in [-1, 1] (see the file comment).
void checkMulMatId(const MoeDims &d, Routing routing, Mode mode, Function fn = mulMatIdFunction()) {
  const uint64_t seed = 1 + d.nOut * 3 + d.nIn * 5 + d.experts * 7 + d.used * 11 + d.tokens * 13;
  const float bound = 1.0f / std::sqrt(static_cast<float>(d.nIn));
  auto weights = oracle::randomFloats(d.nOut * d.nIn * d.experts, seed, -bound, bound);
  auto input = oracle::randomFloats(d.nIn * d.used * d.tokens, seed + 1);
  auto ids = makeIds(routing, d.experts, d.used, d.tokens, seed + 2);
  auto cmp = runAndCompare(d, weights, input, ids, mode, kRtol, kAtol, fn);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// ---- shapes --------------------------------------------------------------------------------

struct MoeShape {
  MoeDims dims;
  Routing routing;
};

class MulMatIdTest : public testing::TestWithParam<std::tuple<MoeShape, Mode>> {};

TEST_P(MulMatIdTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  checkMulMatId(shape.dims, shape.routing, mode);
}

// All ones; one expert; primes and sizes that are not multiples of 8 in every dim; k = X; one
// token (decode, T = 1) and many (T = 32, 100); every token routed to the same expert; Mixtral's
// X = 8, k = 2 at reduced widths; reductions from 1 to 4099.
const MoeShape kMoeShapes[] = {
    {{1, 1, 1, 1, 1}, Routing::Distinct},
    {{1, 1, 2, 1, 1}, Routing::Same},
    {{3, 5, 2, 1, 1}, Routing::Distinct},
    {{7, 13, 4, 2, 3}, Routing::Distinct},
    {{16, 16, 8, 2, 1}, Routing::Distinct},
    {{17, 31, 8, 2, 32}, Routing::Distinct},
    {{64, 64, 8, 2, 32}, Routing::Same},
    {{8, 129, 3, 3, 5}, Routing::Distinct},
    {{100, 255, 16, 4, 7}, Routing::Repeated},
    {{33, 1000, 8, 2, 1}, Routing::Distinct},
    {{128, 1024, 8, 2, 32}, Routing::Distinct},
    {{5, 2, 60, 8, 13}, Routing::Repeated},
    {{255, 64, 32, 4, 1}, Routing::Same},
    {{1, 4099, 2, 1, 3}, Routing::Distinct},
    {{96, 7, 6, 6, 9}, Routing::Distinct},
    {{31, 37, 5, 1, 100}, Routing::Same},
    {{9, 23, 8, 2, 32}, Routing::Repeated},
    {{2, 1, 3, 3, 17}, Routing::Distinct},
    // 6 to 15 pairs: one padded rank of contraction.ranks with AVX-512 (Strategy.cpp).
    {{13, 40, 8, 2, 3}, Routing::Distinct},
    {{20, 64, 8, 2, 7}, Routing::Repeated},
    {{9, 33, 8, 2, 5}, Routing::Same},
    {{16, 24, 16, 4, 2}, Routing::Distinct},
};

INSTANTIATE_TEST_SUITE_P(Shapes, MulMatIdTest,
                         testing::Combine(testing::ValuesIn(kMoeShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const MoeShape &s = std::get<0>(info.param);
                           const MoeDims &d = s.dims;
                           return fmt::format("mul_mat_id_out{}_in{}_x{}_k{}_t{}_{}_{}", d.nOut,
                                              d.nIn, d.experts, d.used, d.tokens,
                                              routingName(s.routing),
                                              modeName(std::get<1>(info.param)));
                         });

// Each pipeline for many pairs, forced: contraction.ranks with its slots in order (the default
// for 8 experts with 32 registers, or 16 with 16 lanes) and by choice (the default for 8 with
// 16 registers), and contraction.gather (the default otherwise), on balanced, one-expert and
// repeated routings, with rows that leave a short tile and reductions that are not multiples
// of 8. One expert taking every pair is the ranks' worst case: in order, every pair is a rank
// of its own; by choice, every pair past the ranks of even routing overflows into ranks in
// order. Either way the other experts' lanes are padding that must stay out of the outputs.
class MulMatIdPipelines : public testing::TestWithParam<std::tuple<MoeShape, const char *>> {};

TEST_P(MulMatIdPipelines, MatchesOracle) {
  auto [shape, config] = GetParam();
  Context forced(withConfig(config));
  Function fn = forced.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
  const std::vector<std::string> types = {
      fmt::format("{}x{}x{}xf32", shape.dims.nOut, shape.dims.nIn, shape.dims.experts),
      fmt::format("{}x{}x{}xf32", shape.dims.nIn, shape.dims.used, shape.dims.tokens),
      fmt::format("{}x{}xi32", shape.dims.used, shape.dims.tokens)};
  const std::string loops = fn.emit(Stage::Loops, types);
  const std::string pipeline = std::string(config).substr(9, std::string(config).find(',') - 9);
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(": {} m=d0", pipeline)));
  EXPECT_EQ(loops.find("ranks=by-choice") != std::string::npos,
            std::string(config).find("by-choice") != std::string::npos);
  checkMulMatId(shape.dims, shape.routing, Mode::Specialized, fn);
}

const MoeShape kPipelineShapes[] = {
    {{17, 31, 8, 2, 32}, Routing::Distinct}, {{64, 64, 8, 2, 32}, Routing::Same},
    {{9, 23, 8, 2, 32}, Routing::Repeated},  {{13, 40, 8, 2, 8}, Routing::Distinct},
    {{31, 37, 8, 1, 100}, Routing::Same},    {{7, 129, 8, 4, 9}, Routing::Repeated},
};

INSTANTIATE_TEST_SUITE_P(
    Forced, MulMatIdPipelines,
    testing::Combine(testing::ValuesIn(kPipelineShapes),
                     testing::Values("pipeline=contraction.ranks,ranks=in-order",
                                     "pipeline=contraction.ranks,ranks=by-choice",
                                     "pipeline=contraction.gather")),
    [](const auto &info) {
      const MoeShape &s = std::get<0>(info.param);
      const MoeDims &d = s.dims;
      std::string config = std::get<1>(info.param);
      std::string name = config.substr(config.find('.') + 1);
      std::replace_if(
          name.begin(), name.end(),
          [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      return fmt::format("out{}_in{}_x{}_k{}_t{}_{}_{}", d.nOut, d.nIn, d.experts, d.used, d.tokens,
                         routingName(s.routing), name);
    });

// contraction.ranks with k blocks, forced by hand, outside the m blocks or inside each tile:
// every m block (outside) or every rank block of a tile (in the tile) runs once per k block and
// adds to its slots what the earlier blocks left there. Rows that leave a short tile (17 and 9
// rows with 4-row tiles), several ranks per expert and one expert taking every pair (by
// choice, ranks that permute after those of even routing); rows in 8 parts each running its k
// blocks (64 and 32 rows, outside), in place and in slot temporaries (30 tokens).
struct KBlockCase {
  MoeShape shape;
  int64_t blockK;
};

class MulMatIdRanksKBlocks : public testing::TestWithParam<KBlockCase> {};

TEST_P(MulMatIdRanksKBlocks, MatchesOracle) {
  const KBlockCase &c = GetParam();
  const MoeDims &d = c.shape.dims;
  for (const char *ranks : {"in-order", "by-choice"})
    for (const char *place : {"outside", "in-tile"}) {
      SCOPED_TRACE(fmt::format("ranks={},k-blocks={}", ranks, place));
      Context forced(withConfig(fmt::format(
          "pipeline=contraction.ranks,k-block={},ranks={},k-blocks={}", c.blockK, ranks, place)));
      Function fn = forced.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
      const std::vector<std::string> types = {fmt::format("{}x{}x{}xf32", d.nOut, d.nIn, d.experts),
                                              fmt::format("{}x{}x{}xf32", d.nIn, d.used, d.tokens),
                                              fmt::format("{}x{}xi32", d.used, d.tokens)};
      const std::string loops = fn.emit(Stage::Loops, types);
      EXPECT_THAT(loops,
                  testing::HasSubstr(fmt::format("for k_block in 0..{} {{", d.nIn / c.blockK)));
      EXPECT_EQ(loops.find("each k block of the tile's rows, for every rank block") !=
                    std::string::npos,
                std::string(place) == "in-tile");
      checkMulMatId(d, c.shape.routing, Mode::Specialized, fn);
    }
}

const KBlockCase kKBlockCases[] = {
    {{{17, 64, 8, 2, 32}, Routing::Distinct}, 16},
    {{{9, 40, 8, 2, 32}, Routing::Repeated}, 8},
    {{{13, 96, 8, 1, 100}, Routing::Same}, 32},
    {{{64, 512, 8, 2, 64}, Routing::Distinct}, 128},
    {{{32, 64, 8, 2, 30}, Routing::Repeated}, 16},
};

INSTANTIATE_TEST_SUITE_P(Forced, MulMatIdRanksKBlocks, testing::ValuesIn(kKBlockCases),
                         [](const auto &info) {
                           const MoeDims &d = info.param.shape.dims;
                           return fmt::format("out{}_in{}_k{}_t{}_{}_kblock{}", d.nOut, d.nIn,
                                              d.used, d.tokens,
                                              routingName(info.param.shape.routing),
                                              info.param.blockK);
                         });

// ---- routing and selection -----------------------------------------------------------------

// Only the selected experts are read: with every expert but one filled with NaN, routing every
// token to the clean one gives finite results equal to the oracle's, and routing one slot to a
// NaN expert poisons exactly that slot's outputs. With T = 16 the specialized kernel is
// contraction.gather, which groups the pairs by expert and packs them into padded vectors: the
// padding and the other groups must never carry a NaN into a selected output.
class MulMatIdRouting : public testing::TestWithParam<MoeDims> {};

TEST_P(MulMatIdRouting, ReadsOnlyTheSelectedExpert) {
  const MoeDims d = GetParam();
  const float bound = 1.0f / std::sqrt(static_cast<float>(d.nIn));
  auto weights = oracle::randomFloats(d.nOut * d.nIn * d.experts, 3, -bound, bound);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t o = 0; o < d.nOut; ++o)
    for (int64_t i = 0; i < d.nIn; ++i)
      for (int64_t x = 0; x < d.experts; ++x)
        if (x != 2)
          weights[(o * d.nIn + i) * d.experts + x] = nan;
  auto input = oracle::randomFloats(d.nIn * d.used * d.tokens, 4);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    std::vector<int32_t> ids(static_cast<size_t>(d.used * d.tokens), 2);
    auto cmp = runAndCompare(d, weights, input, ids, mode, kRtol, kAtol);
    EXPECT_TRUE(cmp.ok) << cmp.describe();

    // Slot 1 of token 3 routed to NaN expert 0: only out[:, 1, 3] is NaN.
    ids[1 * d.tokens + 3] = 0;
    Tensor y =
        mulMatIdFunction()({Tensor::borrow(weights.data(), DType::F32, {d.nOut, d.nIn, d.experts}),
                            Tensor::borrow(input.data(), DType::F32, {d.nIn, d.used, d.tokens}),
                            Tensor::borrow(ids.data(), DType::I32, {d.used, d.tokens})},
                           mode)[0];
    const float *out = y.as<float>();
    for (int64_t o = 0; o < d.nOut; ++o)
      for (int64_t e = 0; e < d.used; ++e)
        for (int64_t t = 0; t < d.tokens; ++t)
          EXPECT_EQ(std::isnan(out[(o * d.used + e) * d.tokens + t]), e == 1 && t == 3)
              << "o " << o << " e " << e << " t " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MulMatIdRouting,
                         testing::Values(MoeDims{11, 19, 4, 2, 5}, MoeDims{13, 19, 8, 2, 16}),
                         [](const auto &info) {
                           return fmt::format("x{}_t{}", info.param.experts, info.param.tokens);
                         });

// The tiles that stream several rows of weights (contraction.choices at one token, ranks at 32)
// prefetch each row ahead of their reads, except on AMD's Zen cores other than Zen 4
// (loops::Target), whose own prefetchers follow the rows.
TEST(MulMatIdPrefetch, TheRowsArePrefetchedAheadExceptOnZenOtherThanZen4) {
  for (const char *tokens : {"1", "32"})
    for (const char *cpu : {"skylake-avx512", "x86-64-v3", "znver3", "znver4", "znver5"}) {
      SCOPED_TRACE(fmt::format("{} tokens, {}", tokens, cpu));
      Context ctx(forCpu(cpu));
      const std::string loops =
          ctx.load(componentPath("moe/mul_mat_id.mlir"))
              .function("mul_mat_id")
              .emit(Stage::Loops, {"3584x1024x8xf32", fmt::format("1024x2x{}xf32", tokens),
                                   fmt::format("2x{}xi32", tokens)});
      EXPECT_THAT(loops, testing::HasSubstr(std::string(tokens) == "1" ? "contraction.choices"
                                                                       : "contraction.ranks"));
      const bool prefetches =
          !std::string(cpu).starts_with("znver") || std::string(cpu) == "znver4";
      EXPECT_EQ(loops.find("prefetch weights[") != std::string::npos, prefetches) << loops;
    }
  // On a Zen 3 or Zen 5 host the kernels the other tests run take none, so the prefetching ones
  // (any other AVX2 CPU's) meet the oracle here, where the host can run them.
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return;
  Context avx2(forCpu(kAvx2Cpu));
  Function fn = avx2.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
  for (int64_t tokens : {1, 32}) {
    SCOPED_TRACE(fmt::format("{} tokens", tokens));
    const MoeDims d{24, 1024, 8, 2, tokens};
    const std::string loops =
        fn.emit(Stage::Loops, {fmt::format("{}x{}x{}xf32", d.nOut, d.nIn, d.experts),
                               fmt::format("{}x{}x{}xf32", d.nIn, d.used, tokens),
                               fmt::format("{}x{}xi32", d.used, tokens)});
    ASSERT_NE(loops.find("prefetch weights["), std::string::npos) << loops;
    checkMulMatId(d, Routing::Distinct, Mode::Specialized, fn);
  }
}

// Pairs that would leave contraction.choices' tiles one row (6 pairs with AVX2's 16 registers)
// take one padded rank of contraction.ranks by choice: on the oracle, every routing, where the
// host runs AVX2.
TEST(MulMatIdAvx2, FewPairsTakeAPaddedRankByChoice) {
  Context avx2(forCpu(kAvx2Cpu));
  Function fn = avx2.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
  const MoeDims d{19, 40, 8, 2, 3};
  const std::string loops =
      fn.emit(Stage::Loops, {fmt::format("{}x{}x{}xf32", d.nOut, d.nIn, d.experts),
                             fmt::format("{}x{}x{}xf32", d.nIn, d.used, d.tokens),
                             fmt::format("{}x{}xi32", d.used, d.tokens)});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.ranks")) << loops;
  EXPECT_THAT(loops, testing::HasSubstr("ranks=by-choice")) << loops;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return;
  for (Routing routing : {Routing::Distinct, Routing::Same, Routing::Repeated})
    checkMulMatId(d, routing, Mode::Specialized, fn);
}

// Rows that leave a short tile, with the sums in a temporary: the m blocks round up, the last
// tile reads the last row again for its rows past the end and stores their sums into the
// temporary's padding, and no tile of the rows left over is compiled. 17 rows in tiles of 3
// (AVX2's ranks by choice) and of 4 (contraction.gather's); on the oracle where the host runs
// AVX2 kernels, with the other experts' rows NaN-free but different, so that a read of the
// wrong row would show.
TEST(MulMatIdRowsLeftOver, TheLastTileRunsPastTheRows) {
  const MoeDims d{17, 40, 8, 2, 32};
  const std::vector<std::string> types = {fmt::format("{}x{}x{}xf32", d.nOut, d.nIn, d.experts),
                                          fmt::format("{}x{}x{}xf32", d.nIn, d.used, d.tokens),
                                          fmt::format("{}x{}xi32", d.used, d.tokens)};
  struct Case {
    const char *config;
    int tileRows;
  };
  for (Case c : {Case{"", 3}, Case{"pipeline=contraction.gather,tile=4x1", 4}}) {
    SCOPED_TRACE(c.config);
    Context avx2(forCpu(kAvx2Cpu, c.config));
    Function fn = avx2.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
    const std::string loops = fn.emit(Stage::Loops, types);
    const int64_t tiles = (d.nOut + c.tileRows - 1) / c.tileRows;
    EXPECT_THAT(loops, testing::HasSubstr(fmt::format("for m_block in 0..{} parallel", tiles)));
    for (int r = 1; r < c.tileRows; ++r)
      EXPECT_THAT(loops, testing::HasSubstr(fmt::format("minsi(((m_block * {}) + {}), {})",
                                                        c.tileRows, r, d.nOut - 1)));
    // Every tile's sums go to its m block's rows: there is no tile of constant rows.
    std::istringstream lines(loops);
    int stores = 0;
    for (std::string line; std::getline(lines, line);)
      if (line.find("by_slot[") != std::string::npos && line.find("] = acc") != std::string::npos) {
        ++stores;
        EXPECT_THAT(line, testing::HasSubstr("m_block")) << loops;
      }
    EXPECT_GE(stores, c.tileRows);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      for (Routing routing : {Routing::Distinct, Routing::Same, Routing::Repeated})
        checkMulMatId(d, routing, Mode::Specialized, fn);
  }
}

// The output's fill, when only the contraction reads it: sums read back from slot temporaries
// add to the fill's value and the output is never filled, while tiles that add to the output in
// place (ranks in order, whose slots are the pairs where they are) follow its fill. A fill of
// 0.5 instead of the component's 0, so that a sum read back without it would show.
TEST(MulMatIdFill, SumsReadBackAddToTheFillInsteadOfTheOutput) {
  std::string text = readFile(componentPath("moe/mul_mat_id.mlir"));
  const std::string zero = "%zero = arith.constant 0.0 : f32";
  ASSERT_NE(text.find(zero), std::string::npos);
  text.replace(text.find(zero), zero.size(), "%zero = arith.constant 0.5 : f32");
  const MoeDims d{17, 40, 8, 2, 32};
  const std::vector<std::string> types = {fmt::format("{}x{}x{}xf32", d.nOut, d.nIn, d.experts),
                                          fmt::format("{}x{}x{}xf32", d.nIn, d.used, d.tokens),
                                          fmt::format("{}x{}xi32", d.used, d.tokens)};
  const float bound = 1.0f / std::sqrt(static_cast<float>(d.nIn));
  auto weights = oracle::randomFloats(d.nOut * d.nIn * d.experts, 5, -bound, bound);
  auto input = oracle::randomFloats(d.nIn * d.used * d.tokens, 6);
  auto ids = makeIds(Routing::Repeated, d.experts, d.used, d.tokens, 7);
  auto expected = oracle::mulMatId(weights.data(), input.data(), ids.data(), d.nOut, d.nIn,
                                   d.experts, d.used, d.tokens);
  for (double &e : expected)
    e += 0.5;
  struct Case {
    const char *config;
    bool inPlace;
  };
  for (Case c : {Case{"pipeline=contraction.ranks,ranks=by-choice", false},
                 Case{"pipeline=contraction.gather", false},
                 Case{"pipeline=contraction.ranks,ranks=in-order", true}}) {
    SCOPED_TRACE(c.config);
    Context forced(withConfig(c.config));
    Function fn = forced.loadString(text, "mul_mat_id_half.mlir").function("mul_mat_id");
    const std::string loops = fn.emit(Stage::Loops, types);
    const bool filled = loops.find("] = 0.5f\n") != std::string::npos;
    EXPECT_EQ(filled, c.inPlace) << loops;
    EXPECT_EQ(loops.find("(0.5f + by_slot[") != std::string::npos, !c.inPlace) << loops;
    if (c.inPlace) { // filled before the tiles add to it
      EXPECT_LT(loops.find("] = 0.5f\n"), loops.find(" parallel")) << loops;
    }
    std::vector<Arg> args{Tensor::borrow(weights.data(), DType::F32, {d.nOut, d.nIn, d.experts}),
                          Tensor::borrow(input.data(), DType::F32, {d.nIn, d.used, d.tokens}),
                          Tensor::borrow(ids.data(), DType::I32, {d.used, d.tokens})};
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      Kernel kernel = fn.specialize(args, mode);
      GuardedOutput out({d.nOut, d.used, d.tokens});
      std::vector<Tensor> outputs{out.tensor()};
      kernel.run(args, outputs); // the output holds NaNs before: none may show through
      EXPECT_EQ(out.guardsIntact(), "");
      auto cmp = oracle::compare(out.data(), expected, kRtol, kAtol);
      EXPECT_TRUE(cmp.ok) << modeName(mode) << ": " << cmp.describe();
    }
  }
}

// ---- errors --------------------------------------------------------------------------------

// ids [k, T] must equal input's [k, T], input's n_in the weights' n_in; an expert id outside
// [0, X) is caught by the run-time bounds check (on by default) and never read.
TEST(MulMatIdErrors, MismatchesAndBadIdsAreErrors) {
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    Function fn = mulMatIdFunction();
    EXPECT_THROW(fn({Tensor::zeros(DType::F32, {4, 3, 2}), Tensor::zeros(DType::F32, {3, 2, 5}),
                     Tensor::zeros(DType::I32, {2, 4})},
                    mode),
                 Error);
    EXPECT_THROW(fn({Tensor::zeros(DType::F32, {4, 3, 2}), Tensor::zeros(DType::F32, {3, 1, 4}),
                     Tensor::zeros(DType::I32, {2, 4})},
                    mode),
                 Error);
    EXPECT_THROW(fn({Tensor::zeros(DType::F32, {4, 3, 2}), Tensor::zeros(DType::F32, {5, 2, 4}),
                     Tensor::zeros(DType::I32, {2, 4})},
                    mode),
                 Error);
    for (int32_t bad : {2, -1}) {
      Tensor ids = Tensor::zeros(DType::I32, {2, 4});
      ids.as<int32_t>()[5] = bad;
      EXPECT_THROW(
          fn({Tensor::zeros(DType::F32, {4, 3, 2}), Tensor::zeros(DType::F32, {3, 2, 4}), ids},
             mode),
          Error)
          << "expert id " << bad;
    }
    // X = 8, T = 8: the contraction.gather kernel checks every id before it groups them.
    for (int32_t bad : {8, -1, 1 << 30}) {
      Tensor ids = Tensor::zeros(DType::I32, {2, 8});
      ids.as<int32_t>()[11] = bad;
      try {
        fn({Tensor::zeros(DType::F32, {5, 3, 8}), Tensor::zeros(DType::F32, {3, 2, 8}), ids}, mode);
        ADD_FAILURE() << "expert id " << bad << " was not caught";
      } catch (const Error &e) {
        // Specialized mode reports the folded gather's read of '%weights' (dim 2),
        // generic mode the gather's read of '%weights_x' (dim 0): both at the gather.
        EXPECT_THAT(e.what(), testing::HasSubstr("mul_mat_id.mlir:55:5: error: index"));
        EXPECT_THAT(e.what(), testing::HasSubstr(fmt::format(
                                  "index {} is out of bounds for dim {} of '%{}', which has size 8",
                                  bad, mode == Mode::Specialized ? 2 : 0,
                                  mode == Mode::Specialized ? "weights" : "weights_x")));
      }
    }
  }
}

// ---- long reductions on unit-range data ----------------------------------------------------

// Weights and inputs both uniform in [-1, 1] at n_in = 4099: outputs have a standard deviation
// of sqrt(n_in) / 3 ~ 21, and the f32 sums' largest absolute errors here are 1.6e-5 (specialized,
// blocked sums) and 8.6e-5 (generic, sequential sums), so a per-element 1e-4/1e-5 bound fails on
// outputs that happen to cancel. §10's alternative for large reductions applies: NMSE <= 1e-10
// (measured: 4e-14 specialized, 1e-12 generic).
TEST(MulMatIdLongReduction, UnitRangeDataWithinNmse) {
  const MoeDims d{40, 4099, 8, 2, 6};
  auto weights = oracle::randomFloats(d.nOut * d.nIn * d.experts, 31);
  auto input = oracle::randomFloats(d.nIn * d.used * d.tokens, 32);
  auto ids = makeIds(Routing::Distinct, d.experts, d.used, d.tokens, 33);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    auto cmp = runAndCompare(d, weights, input, ids, mode, kRtol, kAtol);
    EXPECT_LE(cmp.nmse, 1e-10) << cmp.describe();
  }
}

// ---- benchmark shape -----------------------------------------------------------------------

// S9: weights [3584, 1024, 8] (117 MB), input [1024, 2, T], Mixtral-like routing (k = 2 distinct
// experts of 8). One weight tensor serves every case.
class MulMatIdBenchmarkShape : public testing::Test {
protected:
  static constexpr MoeDims kWeights{3584, 1024, 8, 2, 0};
  static std::vector<float> &weights() {
    static std::vector<float> w = oracle::randomFloats(
        kWeights.nOut * kWeights.nIn * kWeights.experts, 9, -1.0f / 32, 1.0f / 32); // 1/sqrt(1024)
    return w;
  }
  static void check(int64_t tokens, Mode mode) {
    MoeDims d = kWeights;
    d.tokens = tokens;
    auto input = oracle::randomFloats(d.nIn * d.used * d.tokens, 10 + tokens);
    auto ids = makeIds(Routing::Distinct, d.experts, d.used, d.tokens, 11 + tokens);
    auto cmp = runAndCompare(d, weights(), input, ids, mode, kRtol, kAtol);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
};

TEST_F(MulMatIdBenchmarkShape, S9DecodeSpecialized) { check(1, Mode::Specialized); }
TEST_F(MulMatIdBenchmarkShape, S9DecodeGeneric) { check(1, Mode::Generic); }
TEST_F(MulMatIdBenchmarkShape, S9PrefillSpecialized) { check(32, Mode::Specialized); }

} // namespace
} // namespace frank::test
