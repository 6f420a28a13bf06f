// Partial specialization: kernels that keep chosen dims (a decode loop's KV length, a prefill's
// token count) as runtime values and bake in every other. Each component runs through one
// partly specialized kernel at several sizes of its runtime dims, checked against its oracle,
// and the kernel must be compiled exactly once for all of them. Also: `?` type strings, runtime
// sizes that disagree, and every bad runtime-dim request (DiskCacheTest covers the disk cache).
//
// Tolerances are the components' own (see their tests): rms_norm rtol 1e-5 / atol 1e-6 (f32 row
// sums), attention and matmul rtol 1e-4 / atol 1e-5 (reassociated f32 dot products against a
// double oracle), rope rtol 1e-5 / atol 1e-5 (f32 angle, double oracle), mul_mat_id and the MoE
// block rtol 1e-4 / atol 1e-4 (f32 sums of up to 256 products of magnitude ~1..10).
#include "TestSupport.h"
#include "oracles/AttentionMoe.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>

namespace frank::test {
namespace {

// A context of its own, with no disk cache: its statistics count this test's kernels only.
ContextOptions memoryOnly() {
  ContextOptions options;
  options.diskCache = false;
  return options;
}

// One component function, its runtime dims, and a case per size: the arguments and the
// expected result for that size, compared with the tolerances given.
struct PartialCase {
  std::string component, function, runtimeDims;
  std::vector<int64_t> sizes;
  double rtol, atol;
  // Makes the arguments for runtime size n and returns the oracle's result for them; the
  // vectors it fills own the data the arguments borrow.
  std::function<std::vector<double>(int64_t n, std::vector<std::vector<float>> &floats,
                                    std::vector<std::vector<int64_t>> &ints,
                                    std::vector<std::vector<int32_t>> &ids, std::vector<Arg> &args)>
      make;
  std::string name;
  std::string config = ""; // --config for the kernel, if any
};

std::vector<PartialCase> partialCases() {
  std::vector<PartialCase> cases;
  const std::vector<int64_t> tokens{1, 5, 16, 37};

  for (const char *fn : {"rms_norm_linalg", "rms_norm_fused"})
    cases.push_back({"normalization/rms_norm.mlir", fn, "input:0", tokens, 1e-5, 1e-6,
                     [](int64_t n, auto &f, auto &, auto &, auto &args) {
                       const int64_t cols = 300;
                       f = {oracle::randomFloats(n * cols, 3 + n, -2, 2),
                            oracle::randomFloats(cols, 5, 0.5f, 1.5f)};
                       args = {Tensor::borrow(f[0].data(), DType::F32, {n, cols}),
                               Tensor::borrow(f[1].data(), DType::F32, {cols}), Scalar::f32(1e-6f)};
                       return oracle::rmsNorm(f[0].data(), f[1].data(), 1e-6f, n, cols);
                     },
                     fn});

  // Decode: one query against a growing cache (the S6 shape at 512).
  cases.push_back(
      {"attention/attention_gqa.mlir",
       "attention_gqa_decode",
       "key:1,value:1",
       {1, 3, 16, 17, 100, 512},
       1e-4,
       1e-5,
       [](int64_t n, auto &f, auto &, auto &, auto &args) {
         oracle::AttentionDims d{1, 1, n, 32, 8, 128};
         f = {oracle::randomFloats(32 * 128, 11, -2, 2), oracle::randomFloats(n * 8 * 128, 12 + n),
              oracle::randomFloats(n * 8 * 128, 13 + n)};
         const float scale = 1.0f / std::sqrt(128.0f);
         args = {Tensor::borrow(f[0].data(), DType::F32, {1, 1, 32, 128}),
                 Tensor::borrow(f[1].data(), DType::F32, {1, n, 8, 128}),
                 Tensor::borrow(f[2].data(), DType::F32, {1, n, 8, 128}), Scalar::f32(scale)};
         return oracle::attentionGqa(f[0].data(), f[1].data(), f[2].data(), scale, d, false);
       },
       "attention_gqa_decode"});

  // Causal prefill of n tokens: queries and keys both runtime.
  cases.push_back(
      {"attention/attention_gqa.mlir", "attention_gqa_causal", "query:1,key:1,value:1", tokens,
       1e-4, 1e-5,
       [](int64_t n, auto &f, auto &, auto &, auto &args) {
         oracle::AttentionDims d{1, n, n, 8, 2, 64};
         f = {oracle::randomFloats(n * 8 * 64, 21 + n, -2, 2),
              oracle::randomFloats(n * 2 * 64, 22 + n), oracle::randomFloats(n * 2 * 64, 23 + n)};
         args = {Tensor::borrow(f[0].data(), DType::F32, {1, n, 8, 64}),
                 Tensor::borrow(f[1].data(), DType::F32, {1, n, 2, 64}),
                 Tensor::borrow(f[2].data(), DType::F32, {1, n, 2, 64}), Scalar::f32(0.125f)};
         return oracle::attentionGqa(f[0].data(), f[1].data(), f[2].data(), 0.125, d, true);
       },
       "attention_gqa_causal"});

  // Prefill of n tokens after 13 in the cache (chunked prefill): the mask's offset, Skv - S, is
  // a runtime value too, and each query sees its 13 + s + 1 first keys.
  cases.push_back(
      {"attention/attention_gqa.mlir", "attention_gqa_causal", "query:1,key:1,value:1", tokens,
       1e-4, 1e-5,
       [](int64_t n, auto &f, auto &, auto &, auto &args) {
         const int64_t keys = n + 13;
         oracle::AttentionDims d{1, n, keys, 8, 2, 64};
         f = {oracle::randomFloats(n * 8 * 64, 51 + n, -2, 2),
              oracle::randomFloats(keys * 2 * 64, 52 + n),
              oracle::randomFloats(keys * 2 * 64, 53 + n)};
         args = {Tensor::borrow(f[0].data(), DType::F32, {1, n, 8, 64}),
                 Tensor::borrow(f[1].data(), DType::F32, {1, keys, 2, 64}),
                 Tensor::borrow(f[2].data(), DType::F32, {1, keys, 2, 64}), Scalar::f32(0.125f)};
         return oracle::attentionGqa(f[0].data(), f[1].data(), f[2].data(), 0.125, d, true);
       },
       "attention_gqa_causal_after_cache"});

  // Prefill of n tokens, 3 query heads per KV head: Q K^T's 3n rows and n columns leave 1 to 3
  // rows and columns over after its 4x4 or 4x2 register tiles.
  cases.push_back(
      {"attention/attention_gqa.mlir",
       "attention_gqa",
       "query:1,key:1,value:1",
       {1, 3, 6, 17, 39},
       1e-4,
       1e-5,
       [](int64_t n, auto &f, auto &, auto &, auto &args) {
         oracle::AttentionDims d{1, n, n, 6, 2, 32};
         f = {oracle::randomFloats(n * 6 * 32, 41 + n, -2, 2),
              oracle::randomFloats(n * 2 * 32, 42 + n), oracle::randomFloats(n * 2 * 32, 43 + n)};
         const float scale = 1.0f / std::sqrt(32.0f);
         args = {Tensor::borrow(f[0].data(), DType::F32, {1, n, 6, 32}),
                 Tensor::borrow(f[1].data(), DType::F32, {1, n, 2, 32}),
                 Tensor::borrow(f[2].data(), DType::F32, {1, n, 2, 32}), Scalar::f32(scale)};
         return oracle::attentionGqa(f[0].data(), f[1].data(), f[2].data(), scale, d, false);
       },
       "attention_gqa_group3"});

  cases.push_back({"position/rope.mlir", "rope", "input:1,positions:1", tokens, 1e-5, 1e-5,
                   [](int64_t n, auto &f, auto &ints, auto &, auto &args) {
                     f = {oracle::randomFloats(n * 4 * 64, 31 + n)};
                     ints = {std::vector<int64_t>(n)};
                     for (int64_t i = 0; i < n; ++i)
                       ints[0][i] = 3 * i + 1;
                     args = {Tensor::borrow(f[0].data(), DType::F32, {1, n, 4, 64}),
                             Tensor::borrow(ints[0].data(), DType::I64, {1, n}),
                             Scalar::f32(10000.0f), Scalar::f32(1.0f)};
                     return oracle::rope(f[0].data(), ints[0].data(), 1, n, 4, 64, 10000.0f, 1.0f);
                   },
                   "rope"});

  // Token count as matmul's M, with K and N baked in: contraction.outer with a runtime number
  // of m blocks and one-row tiles for the rows left over (fewer rows than a tile, too), and
  // contraction.stream when the call has one row.
  auto matmulCase = [](int64_t k, int64_t cols, std::vector<int64_t> sizes, uint64_t seed,
                       std::string name) {
    return PartialCase{
        "linear/matmul.mlir",
        "matmul",
        "x:0",
        std::move(sizes),
        1e-4,
        1e-5,
        [=](int64_t n, auto &f, auto &, auto &, auto &args) {
          f = {oracle::randomFloats(n * k, seed + n), oracle::randomFloats(k * cols, seed + 1)};
          args = {Tensor::borrow(f[0].data(), DType::F32, {n, k}),
                  Tensor::borrow(f[1].data(), DType::F32, {k, cols})};
          return oracle::matmul(f[0].data(), f[1].data(), n, k, cols, false);
        },
        std::move(name)};
  };
  cases.push_back(matmulCase(96, 208, {1, 5, 16, 37, 100}, 41, "matmul"));
  // With a B of 1 MiB, 2 to 8 rows take the stream in tiers of 4 rows (up to 8 with AVX-512, 4
  // with AVX2), the rows past the runtime ones repeating the last (2, 5 and 6 rows).
  cases.push_back(matmulCase(1024, 256, {1, 2, 4, 5, 6, 8, 9, 37}, 53, "matmul_few_rows"));
  // With k blocks (768 rows of W in three panels of 256 x 128): the m blocks pack the next
  // panel 8 rows after each of their first 32 tiles, and the rows fewer m blocks leave are
  // packed after them (all of them with one row, none with 300).
  cases.push_back(matmulCase(768, 128, {1, 5, 37, 300}, 43, "matmul_k_blocks"));
  // The same with 256 columns: the n blocks in groups (2 of 2 with AVX-512, 2 of 4 with AVX2),
  // each group's (k block, n block) pairs packing the next pair's panel the same way.
  cases.push_back(matmulCase(768, 256, {1, 5, 37, 300}, 47, "matmul_n_groups"));
  // 1001 columns: 125 vectors of 8 in n blocks of 3 or 4, the vectors they leave over and then
  // the last column, each down the runtime number of m blocks and the one-row tiles after them.
  cases.push_back(matmulCase(96, 1001, {1, 5, 37}, 59, "matmul_vectors_left_over"));

  // A matmul whose [rows, k] by [k, cols] (W stored [cols, k] when transposed) runtime size n
  // sets, through `shape`.
  using MatmulShape = std::array<int64_t, 3>(int64_t n);
  auto matmulOfSizes = [](const char *function, const char *runtimeDims, bool transposed,
                          MatmulShape *shape, std::vector<int64_t> sizes, uint64_t seed,
                          std::string name) {
    return PartialCase{"linear/matmul.mlir",
                       function,
                       runtimeDims,
                       std::move(sizes),
                       1e-4,
                       1e-5,
                       [=](int64_t n, auto &f, auto &, auto &, auto &args) {
                         const auto [rows, k, cols] = shape(n);
                         f = {oracle::randomFloats(rows * k, seed + n),
                              oracle::randomFloats(k * cols, seed + 1 + n)};
                         args = {Tensor::borrow(f[0].data(), DType::F32, {rows, k}),
                                 Tensor::borrow(f[1].data(), DType::F32,
                                                transposed ? std::vector<int64_t>{cols, k}
                                                           : std::vector<int64_t>{k, cols})};
                         return oracle::matmul(f[0].data(), f[1].data(), rows, k, cols, transposed);
                       },
                       std::move(name)};
  };
  // x W with N a runtime value: contraction.outer over a runtime number of n blocks, B read in
  // place, then columns one lane wide (no n block at 5 and 31 columns, one at 32, and 33).
  cases.push_back(matmulOfSizes(
      "matmul", "w:1", false,
      [](int64_t n) {
        return std::array<int64_t, 3>{24, 80, n};
      },
      {1, 5, 31, 32, 33, 70}, 61, "matmul_runtime_n"));
  // x Wᵀ with M and N both runtime values (K = 64): contraction.outer packs W's whole blocks of
  // rows transposed over a runtime number of n blocks, then takes one-column tiles, one lane
  // wide; a runtime number of m blocks, then one-row tiles.
  cases.push_back(matmulOfSizes(
      "matmul_transpose_b", "x:0,w:0", true,
      [](int64_t n) {
        return std::array<int64_t, 3>{n, 64, n + 2};
      },
      {1, 3, 6, 17, 39}, 51, "matmul_transpose_b"));

  // Token count as mul_mat_id's pairs: contraction.ranks counts its ranks and sizes its
  // temporaries at run time, in k blocks: by choice (the default with 16 registers) 32 of 64 k
  // in each tile, in order 4 of 512 outside the m blocks. Spread
  // routing, and every pair on one expert (one rank per pair, up to 600 of them: more than the
  // 256 tokens the k blocks were sized for).
  auto mulMatIdCase = [](std::vector<int64_t> sizes, int32_t (*expertOf)(int64_t, int64_t),
                         std::string name, std::string config = "") {
    return PartialCase{
        "moe/mul_mat_id.mlir",
        "mul_mat_id",
        "input:2,ids:1",
        std::move(sizes),
        1e-4,
        1e-4,
        [=](int64_t n, auto &f, auto &, auto &ids, auto &args) {
          const int64_t out = 64, in = 2048, experts = 8, used = 2;
          f = {oracle::randomFloats(out * in * experts, 51),
               oracle::randomFloats(in * used * n, 52 + n)};
          ids = {std::vector<int32_t>(used * n)};
          for (int64_t i = 0; i < used * n; ++i)
            ids[0][i] = expertOf(i, n);
          args = {Tensor::borrow(f[0].data(), DType::F32, {out, in, experts}),
                  Tensor::borrow(f[1].data(), DType::F32, {in, used, n}),
                  Tensor::borrow(ids[0].data(), DType::I32, {used, n})};
          return oracle::mulMatId(f[0].data(), f[1].data(), ids[0].data(), out, in, experts,
                                  used, n);
        },
        std::move(name),
        std::move(config)};
  };
  cases.push_back(mulMatIdCase(
      {1, 5, 16, 37, 64, 65, 130},
      [](int64_t i, int64_t n) { return static_cast<int32_t>((i * 5 + n) % 8); }, "mul_mat_id"));
  cases.push_back(mulMatIdCase(
      {1, 5, 64, 300}, [](int64_t, int64_t) { return int32_t{3}; }, "mul_mat_id_one_expert"));
  // The ranks by choice: the slots per row counted from the busiest expert at run time, the
  // temporaries sized for every pair on one expert by the token count.
  cases.push_back(mulMatIdCase(
      {1, 5, 16, 37, 64, 65, 130},
      [](int64_t i, int64_t n) { return static_cast<int32_t>((i * 5 + n) % 8); },
      "mul_mat_id_by_choice", "ranks=by-choice"));
  cases.push_back(mulMatIdCase(
      {1, 5, 64, 300}, [](int64_t, int64_t) { return int32_t{3}; },
      "mul_mat_id_one_expert_by_choice", "ranks=by-choice"));

  cases.push_back({"moe/moe_ffn_block.mlir", "moe_ffn_block", "input:0", tokens, 1e-4, 1e-4,
                   [](int64_t n, auto &f, auto &, auto &, auto &args) {
                     const int64_t e = 64, ff = 96, x = 8, k = 2;
                     // Token t leans on features t % 8 and (t + 3) % 8, and the router's expert j
                     // reads feature j: every token's top 2 are far apart from the rest (a
                     // well-posed top-k).
                     f = {oracle::randomFloats(n * e, 61 + n, -0.1f, 0.1f),
                          oracle::randomFloats(x * e, 62, -0.05f, 0.05f),
                          oracle::randomFloats(ff * e * x, 63, -0.2f, 0.2f),
                          oracle::randomFloats(ff * e * x, 64, -0.2f, 0.2f),
                          oracle::randomFloats(e * ff * x, 65, -0.2f, 0.2f)};
                     for (int64_t t = 0; t < n; ++t) {
                       f[0][t * e + t % x] = 3.0f;
                       f[0][t * e + (t + 3) % x] = 2.0f;
                     }
                     for (int64_t j = 0; j < x; ++j)
                       f[1][j * e + j] += 1.0f;
                     args = {Tensor::borrow(f[0].data(), DType::F32, {n, e}),
                             Tensor::borrow(f[1].data(), DType::F32, {x, e}),
                             Tensor::borrow(f[2].data(), DType::F32, {ff, e, x}),
                             Tensor::borrow(f[3].data(), DType::F32, {ff, e, x}),
                             Tensor::borrow(f[4].data(), DType::F32, {e, ff, x}),
                             Scalar::index(x),
                             Scalar::index(k),
                             Scalar::index(e),
                             Scalar::index(ff),
                             Scalar::i1(true)};
                     oracle::MoeResult r =
                         oracle::moeFfnBlock(f[0].data(), f[1].data(), f[2].data(), f[3].data(),
                                             f[4].data(), {n, e, ff, x, k}, true);
                     EXPECT_GT(r.minSelectionGap, 1e-5) << "test data: ill-conditioned top-k";
                     return r.out;
                   },
                   "moe_ffn_block"});
  return cases;
}

class PartialTest : public testing::TestWithParam<PartialCase> {};

TEST_P(PartialTest, OneKernelServesEverySizeOfItsRuntimeDims) {
  const PartialCase &c = GetParam();
  ContextOptions options = memoryOnly();
  options.loweringConfig = c.config;
  Context ctx(options);
  Function fn = ctx.load(componentPath(c.component))
                    .function(c.function)
                    .withRuntimeDims(parseRuntimeDims(c.runtimeDims));
  std::string signature;
  for (int64_t n : c.sizes) {
    SCOPED_TRACE(fmt::format("runtime size {}", n));
    std::vector<std::vector<float>> floats;
    std::vector<std::vector<int64_t>> ints;
    std::vector<std::vector<int32_t>> ids;
    std::vector<Arg> args;
    std::vector<double> expected = c.make(n, floats, ints, ids, args);
    Kernel kernel = fn.specialize(args);
    EXPECT_EQ(kernel.mode(), Mode::Specialized);
    if (signature.empty())
      signature = kernel.signature();
    EXPECT_EQ(kernel.signature(), signature);
    ASSERT_EQ(kernel.outputShapes(args).size(), 1u);
    GuardedOutput out(kernel.outputShapes(args)[0]);
    std::vector<Tensor> outputs{out.tensor()};
    kernel.run(args, outputs);
    EXPECT_EQ(out.guardsIntact(), "");
    auto cmp = oracle::compare(out.data(), expected, c.rtol, c.atol);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
  EXPECT_NE(signature.find('?'), std::string::npos) << signature;
  CacheStats stats = ctx.cacheStats();
  EXPECT_EQ(stats.misses, 1u) << "compiled more than one kernel for " << signature;
  EXPECT_EQ(stats.hits, c.sizes.size() - 1);
}

INSTANTIATE_TEST_SUITE_P(Components, PartialTest, testing::ValuesIn(partialCases()),
                         [](const auto &info) { return info.param.name; });

// ---- What the kernel says, and what it is keyed by ------------------------------------------

Module &attention() {
  static Module module = context().load(componentPath("attention/attention_gqa.mlir"));
  return module;
}

TEST(Partial, SignatureAndExplanationNameTheRuntimeDims) {
  Function fn =
      attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}, {"%value", 1}});
  Kernel k = fn.specialize({"1x1x32x128xf32", "1x9x8x128xf32", "1x9x8x128xf32", "f32"});
  EXPECT_EQ(k.signature(), "1x1x32x128xf32, 1x?x8x128xf32, 1x?x8x128xf32, f32");
  ASSERT_EQ(k.explanation().size(), 6u);
  EXPECT_EQ(k.explanation()[1],
            "argument #1 (%key): tensor<?x?x?x?xf32> -> tensor<1x?x8x128xf32>, baked in: dim 0 "
            "= 1, dim 2 = 8, dim 3 = 128, runtime: dim 1");
  // The attention keeps its queries and its keys in one piece: with a runtime count of keys,
  // neither a block's scores nor the chunks of keys have a known size.
  EXPECT_THAT(k.explanation()[4],
              testing::EndsWith(": queries in one piece: the key count is a runtime value"));
  EXPECT_THAT(k.explanation()[5],
              testing::EndsWith(": keys in one piece: the key count is a runtime value"));
}

// Runtime dims set again replace the earlier ones (they had added up), and none bake in all.
TEST(Partial, RuntimeDimsSetAgainReplaceTheEarlierOnes) {
  const std::vector<std::string> types{"1x1x32x128xf32", "1x9x8x128xf32", "1x9x8x128xf32", "f32"};
  Function keys = attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}});
  EXPECT_EQ(keys.withRuntimeDims({{"value", 1}}).specialize(types).signature(),
            "1x1x32x128xf32, 1x9x8x128xf32, 1x?x8x128xf32, f32");
  EXPECT_EQ(keys.withRuntimeDims({}).specialize(types).signature(),
            "1x1x32x128xf32, 1x9x8x128xf32, 1x9x8x128xf32, f32");
  EXPECT_EQ(keys.specialize(types).signature(),
            "1x1x32x128xf32, 1x?x8x128xf32, 1x9x8x128xf32, f32");
}

// Only V's keys a runtime dim, K's baked in: the keys stay in one piece, since V's chunks would
// have a size its keys need not have (1024 keys failed to compile, splitting V into 4 x 256).
TEST(Partial, KeysRuntimeInVAloneStayInOnePiece) {
  const char *text = R"(
    util.func public @att(%q: tensor<?x?x?xf32>, %k: tensor<?x?x?xf32>, %v: tensor<?x?x?xf32>, %scale: f32) -> tensor<?x?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %b = tensor.dim %q, %c0 : tensor<?x?x?xf32>
      %m = tensor.dim %q, %c1 : tensor<?x?x?xf32>
      %n = tensor.dim %v, %c2 : tensor<?x?x?xf32>
      %e = tensor.empty(%b, %m, %n) : tensor<?x?x?xf32>
      %r = iree_linalg_ext.attention {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>]}
          ins(%q, %k, %v, %scale : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32)
          outs(%e : tensor<?x?x?xf32>) {
      ^bb0(%score: f32):
        iree_linalg_ext.yield %score : f32
      } -> tensor<?x?x?xf32>
      util.return %r : tensor<?x?x?xf32>
    })";
  const int64_t n = 1024, dh = 64;
  std::vector<float> q = oracle::randomFloats(dh, 21, -2, 2), k = oracle::randomFloats(n * dh, 22),
                     v = oracle::randomFloats(n * dh, 23);
  const float scale = 0.125f;
  // One query: softmax over the keys of its scaled scores, then the mix of V's rows.
  std::vector<double> scores(n), expected(dh, 0.0);
  double top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t c = 0; c < dh; ++c)
      s += double(q[c]) * k[j * dh + c];
    scores[j] = s * scale;
    top = std::max(top, scores[j]);
  }
  for (int64_t j = 0; j < n; ++j)
    sum += scores[j] = std::exp(scores[j] - top);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < dh; ++c)
      expected[c] += scores[j] / sum * v[j * dh + c];
  Function fn = context().loadString(text, "att.mlir").function("att").withRuntimeDims({{"v", 1}});
  Tensor out = fn({Tensor::borrow(q.data(), DType::F32, {1, 1, dh}),
                   Tensor::borrow(k.data(), DType::F32, {1, n, dh}),
                   Tensor::borrow(v.data(), DType::F32, {1, n, dh}), Scalar::f32(scale)})[0];
  auto cmp = oracle::compare(out.as<float>(), expected, 1e-4, 1e-5);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

TEST(Partial, QuestionMarksInTypeStringsAreRuntimeDims) {
  Context ctx(memoryOnly());
  Module module = ctx.load(componentPath("normalization/rms_norm.mlir"));
  Function fn = module.function("rms_norm_linalg");
  Kernel byType = fn.specialize({"?x4096xf32", "4096xf32", "f32"});
  EXPECT_EQ(byType.signature(), "?x4096xf32, 4096xf32, f32");
  // The same kernel as a runtime dim on real tensors gives.
  std::vector<float> x(3 * 4096, 1.0f), w(4096, 2.0f);
  Kernel byDims =
      fn.withRuntimeDims({{"input", 0}})
          .specialize({Tensor::borrow(x.data(), DType::F32, {3, 4096}),
                       Tensor::borrow(w.data(), DType::F32, {4096}), Scalar::f32(1e-6f)});
  EXPECT_EQ(byDims.signature(), byType.signature());
  EXPECT_EQ(ctx.cacheStats().misses, 1u);
  // The loop IR reads the row count from the call; the columns stay constants.
  std::string loops = fn.emit(Stage::Loops, {"?x4096xf32", "4096xf32", "f32"});
  EXPECT_NE(loops.find("in 0..dims[0]"), std::string::npos) << loops;
  EXPECT_NE(loops.find("in 0..4096"), std::string::npos) << loops;
  EXPECT_EQ(loops.find("dims[1]"), std::string::npos) << loops;
}

// The smallest chunk of a parallel loop over runtime rows is a number when the rows' own points
// are constants: 16384 points a chunk over rows of 2048 is 8 rows.
TEST(Partial, ChunksOfConstantRowsAreANumber) {
  std::string loops = context()
                          .load(componentPath("embedding/embedding_lookup.mlir"))
                          .function("embedding_lookup")
                          .emit(Stage::Loops, {"32000x2048xf32", "1x?xi64"});
  EXPECT_NE(loops.find("in 0..dims[0] parallel(chunks of at least 8) {"), std::string::npos)
      << loops;
}

TEST(Partial, ContractionsKeepTheirRegisterTiles) {
  Function matmul = context().load(componentPath("linear/matmul.mlir")).function("matmul");
  // Runtime M: the outer tile runs a runtime number of m blocks, then one-row tiles.
  std::string loops = matmul.emit(Stage::Loops, {"?x512xf32", "512x512xf32"});
  EXPECT_NE(loops.find("contraction.outer m=d0 n=d1 k=d2"), std::string::npos) << loops;
  EXPECT_NE(loops.find("for m_block in 0..(dims[0] / "), std::string::npos) << loops;
  EXPECT_NE(loops.find("for m_left in 0..(dims[0] - ((dims[0] / "), std::string::npos) << loops;
  // K and N are constants: the panels of W are packed once for every m block and leftover row.
  EXPECT_NE(loops.find("pack this block's"), std::string::npos) << loops;
  // With 256 columns and 2048 rows of W the n blocks run in groups, the k blocks outside each
  // group's n blocks, and the rows of the next pair's panel the m blocks left are packed after.
  std::string grouped = matmul.emit(Stage::Loops, {"?x2048xf32", "2048x256xf32"});
  EXPECT_NE(grouped.find(" n-group="), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("for kn_pair in 0.."), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("// pack the rest of the next pair's panel"), std::string::npos)
      << grouped;
  // One row (a decode step) streams W row after row instead: the kernel branches on M, the
  // stream first (the matmul cases above run both branches of one kernel against the oracle).
  const size_t branch = loops.find("if cmp.eq(dims[0], 1) {");
  ASSERT_NE(branch, std::string::npos) << loops;
  EXPECT_LT(branch, loops.find("contraction.stream m=- n=d1 k=d2")) << loops;
  EXPECT_LT(loops.find("contraction.stream"), loops.find("} else {", branch)) << loops;
  EXPECT_LT(loops.find("} else {", branch), loops.find("contraction.outer m=d0 n=d1 k=d2"))
      << loops;
  // A few rows stream too, in tiers of 4 rows, each reading its last row of x past the runtime
  // ones; then the tiles.
  const size_t tier = loops.find("if cmp.sle(dims[0], 4) {", branch);
  ASSERT_NE(tier, std::string::npos) << loops;
  EXPECT_LT(tier, loops.find("contraction.stream m=d0 n=d1 k=d2", tier)) << loops;
  EXPECT_NE(loops.find("minsi(3, (dims[0] - 1))", tier), std::string::npos) << loops;
  EXPECT_LT(loops.find("contraction.stream m=d0 n=d1 k=d2", tier),
            loops.find("contraction.outer m=d0 n=d1 k=d2"))
      << loops;
  // Decode attention over a runtime KV length: Q K^T takes the keys as n, in a runtime number
  // of n blocks and then one-column tiles; P V reduces over them.
  std::string attn =
      attention()
          .function("attention_gqa_decode")
          .emit(Stage::Loops, {"1x1x32x128xf32", "1x?x8x128xf32", "1x?x8x128xf32", "f32"});
  EXPECT_NE(attn.find("contraction.dot m=d1 n=d2 k=d3"), std::string::npos) << attn;
  EXPECT_NE(attn.find("for n_block in 0..(dims[0] / "), std::string::npos) << attn;
  EXPECT_NE(attn.find("for n_left in 0..(dims[0] - ((dims[0] / "), std::string::npos) << attn;
  // The n blocks outside the KV heads (K read in order, as specialized), and so the columns
  // left over after them in a loop over the heads of their own.
  EXPECT_NE(attn.find(" blocks-outside=d0\n  for n_block in 0..(dims[0] / "), std::string::npos)
      << attn;
  EXPECT_NE(attn.find("  for d0 in 0..8 {\n    for n_left in 0..("), std::string::npos) << attn;
  EXPECT_NE(attn.find("contraction.outer m=d1 n=d2 k=d3"), std::string::npos) << attn;
  // Prefill over a runtime length: Q K^T packs the keys' whole blocks of 32 transposed, as
  // specialized, then takes the keys they leave over one lane at a time, K read in place. The
  // AVX2 kernel, on any host.
  Context avx2(forCpu(kAvx2Cpu));
  std::string prefill =
      avx2.load(componentPath("attention/attention_gqa.mlir"))
          .function("attention_gqa")
          .emit(Stage::Loops, {"1x?x32x128xf32", "1x?x8x128xf32", "1x?x8x128xf32", "f32"});
  // The query's transpose into [KV head, group member, position] order is forwarded into the
  // tiles' reads, as specialized: the nest starts with the loop over the KV heads.
  const size_t qk = prefill.find("contraction.outer m=d1 n=d2 k=d3 tile=2x4 lanes=8 pack=#1^T\n"
                                 "  for d0_1 in 0..8 parallel(");
  ASSERT_NE(qk, std::string::npos) << prefill;
  EXPECT_NE(prefill.find("\n    for n_block in 0..(dims[1] / 32) {\n"
                         "      // pack this block's 128x32 panel of '%key_collapsed', transposed",
                         qk),
            std::string::npos)
      << prefill;
  const size_t left = prefill.find("for n_left in 0..(dims[1] - ((dims[1] / 32) * 32)) {", qk);
  ASSERT_NE(left, std::string::npos) << prefill;
  // One lane: scalar accumulators and keys, before P V's nest.
  const size_t leftEnd = prefill.find("contraction.outer m=d1 n=d2 k=d3", left);
  EXPECT_LT(prefill.find(": f32 = 0f", left), leftEnd) << prefill;
  EXPECT_LT(prefill.find(": f32 = key[", left), leftEnd) << prefill;
  // P V's m blocks (every query row) reuse V's panels, packed as long as the runtime key
  // count, read contiguously instead of rows 4 KiB apart.
  const size_t pv = prefill.find("contraction.outer m=d1 n=d2 k=d3", left);
  ASSERT_NE(pv, std::string::npos) << prefill;
  EXPECT_THAT(prefill.substr(pv, prefill.find('\n', pv) - pv), testing::EndsWith(" pack=#1"));
  EXPECT_NE(prefill.find("temp packed_value_collapsed: f32[(dims["), std::string::npos) << prefill;
  const size_t pack = prefill.find("// pack this block's kx", pv);
  ASSERT_NE(pack, std::string::npos) << prefill;
  EXPECT_NE(prefill.find(" panel of '%value_collapsed'\n      for row_1 in 0..dims[", pack),
            std::string::npos)
      << prefill;
  // mul_mat_id over a runtime token count: contraction.ranks, its temporaries sized by it;
  // and for one token (a decode step) the choices of each row as lanes, as the specialized
  // kernel does: the kernel branches on the token count, each branch checking the ids. The
  // AVX-512 kernel, on any host.
  std::string moe = avx512Context()
                        .load(componentPath("moe/mul_mat_id.mlir"))
                        .function("mul_mat_id")
                        .emit(Stage::Loops, {"64x2048x8xf32", "2048x2x?xf32", "2x?xi32"});
  EXPECT_NE(moe.find("contraction.ranks m=d0 n=- k=d3"), std::string::npos) << moe;
  EXPECT_NE(moe.find("temp slot_choice: i32[((((2 * dims["), std::string::npos) << moe;
  const size_t oneToken = moe.find("if cmp.eq(dims[0], 1) {");
  ASSERT_NE(oneToken, std::string::npos) << moe;
  const size_t otherwise = moe.find("} else {", oneToken);
  ASSERT_NE(otherwise, std::string::npos) << moe;
  const size_t choices = moe.find("contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8");
  EXPECT_GT(choices, oneToken) << moe;
  EXPECT_LT(choices, otherwise) << moe;
  EXPECT_GT(moe.find("contraction.ranks"), otherwise) << moe;
  EXPECT_LT(moe.find("check cmp.ult("), choices) << moe;
  EXPECT_NE(moe.find("check cmp.ult(", otherwise), std::string::npos) << moe;
  // Up to 64 tokens the k blocks the specialized kernel takes for 64 (1024 of k, 512 KiB of
  // the packed input), past them those for 256 (512 of k, 1 MiB); each branch checks the ids.
  const size_t few = moe.find("if cmp.sle(dims[0], 64) {", otherwise);
  ASSERT_NE(few, std::string::npos) << moe;
  const size_t many = moe.find("} else {", few);
  ASSERT_NE(many, std::string::npos) << moe;
  const size_t fewRanks =
      moe.find("contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 k-block=1024");
  EXPECT_GT(fewRanks, few) << moe;
  EXPECT_LT(fewRanks, many) << moe;
  EXPECT_LT(moe.find("for k_block", few), many) << moe;
  EXPECT_GT(moe.find("contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 k-block=512"), many) << moe;
  EXPECT_NE(moe.find("for k_block", many), std::string::npos) << moe;
  EXPECT_LT(moe.find("check cmp.ult(", few), many) << moe;
  EXPECT_NE(moe.find("check cmp.ult(", many), std::string::npos) << moe;
}

// An expert id out of range fails the call whichever branch of the token count takes it.
TEST(Partial, BothBranchesOfMulMatIdCheckTheIds) {
  Function fn = context()
                    .load(componentPath("moe/mul_mat_id.mlir"))
                    .function("mul_mat_id")
                    .withRuntimeDims({{"input", 2}, {"ids", 1}});
  for (int64_t tokens : {1, 3}) {
    for (int32_t bad : {8, -1}) {
      SCOPED_TRACE(fmt::format("{} tokens, expert id {}", tokens, bad));
      Tensor ids = Tensor::zeros(DType::I32, {2, tokens});
      ids.as<int32_t>()[2 * tokens - 1] = bad;
      try {
        fn({Tensor::zeros(DType::F32, {16, 32, 8}), Tensor::zeros(DType::F32, {32, 2, tokens}),
            ids});
        ADD_FAILURE() << "not caught";
      } catch (const Error &e) {
        EXPECT_THAT(e.what(), testing::HasSubstr(fmt::format(
                                  "index {} is out of bounds for dim 2 of '%weights'", bad)));
      }
    }
  }
}

// A lowering override that the tiles take but the one-row stream does not (a k block) leaves
// the kernel without the branch, and it still serves one row and several.
TEST(Partial, AnOverrideTheStreamRejectsKeepsTheTilesAlone) {
  Context ctx(withConfig("k-block=128"));
  Function fn =
      ctx.load(componentPath("linear/matmul.mlir")).function("matmul").withRuntimeDims({{"x", 0}});
  std::string loops = fn.emit(Stage::Loops, {"?x512xf32", "512x512xf32"});
  EXPECT_EQ(loops.find("contraction.stream"), std::string::npos) << loops;
  EXPECT_NE(loops.find("contraction.outer m=d0 n=d1 k=d2 tile="), std::string::npos) << loops;
  EXPECT_NE(loops.find(" k-block=128"), std::string::npos) << loops;
  const int64_t k = 512, n = 512;
  std::vector<float> w = oracle::randomFloats(k * n, 61, -0.1f, 0.1f);
  for (int64_t m : {1, 7}) {
    SCOPED_TRACE(fmt::format("m = {}", m));
    std::vector<float> x = oracle::randomFloats(m * k, 62 + m);
    std::vector<double> expected(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
          expected[i * n + j] += double(x[i * k + p]) * w[p * n + j];
    std::vector<Arg> args = {Tensor::borrow(x.data(), DType::F32, {m, k}),
                             Tensor::borrow(w.data(), DType::F32, {k, n})};
    GuardedOutput out({m, n});
    std::vector<Tensor> outputs{out.tensor()};
    fn.specialize(args).run(args, outputs);
    EXPECT_EQ(out.guardsIntact(), "");
    auto cmp = oracle::compare(out.data(), expected, 1e-4, 1e-5);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

TEST(Partial, BakedInDimsAreStillChecked) {
  Function fn =
      attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}, {"value", 1}});
  std::vector<float> q(32 * 128), kv(4 * 8 * 128), wide(4 * 8 * 64);
  auto args = [&](int64_t d) {
    return std::vector<Arg>{
        Tensor::borrow(q.data(), DType::F32, {1, 1, 32, 128}),
        Tensor::borrow(d == 128 ? kv.data() : wide.data(), DType::F32, {1, 4, 8, d}),
        Tensor::borrow(kv.data(), DType::F32, {1, 4, 8, 128}), Scalar::f32(1.0f)};
  };
  Kernel kernel = fn.specialize(args(128));
  try {
    kernel(args(64));
    FAIL() << "a kernel ran on a head dim it was not compiled for";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "error: kernel for '@attention_gqa_decode' was compiled for argument #1 as "
              "1x?x8x128xf32 but was given 1x4x8x64xf32");
  }
}

// A cast to a static dim over a runtime dim: the kernel checks it at each call, and the ops
// after the cast see the constant (here the 4 rows the reduction sums).
TEST(Partial, ACastToAStaticDimChecksItsRuntimeDim) {
  Context ctx(memoryOnly());
  Module m = ctx.loadString(R"(util.func @column_sums(%x: tensor<?x?xf32>) -> tensor<?xf32> {
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %y = tensor.cast %x : tensor<?x?xf32> to tensor<4x?xf32>
  %n = tensor.dim %y, %c1 : tensor<4x?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  %r = linalg.reduce ins(%y : tensor<4x?xf32>) outs(%f : tensor<?xf32>) dimensions = [0]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  util.return %r : tensor<?xf32>
}
)",
                            "cast.mlir");
  Function fn = m.function("column_sums").withRuntimeDims({{"x", 0}});
  std::vector<float> x(4 * 3);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i);
  std::vector<Tensor> out = fn({Tensor::borrow(x.data(), DType::F32, {4, 3})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{3}));
  EXPECT_THAT(std::vector<float>(out[0].as<float>(), out[0].as<float>() + 3),
              testing::ElementsAre(18.0f, 22.0f, 26.0f));
  try {
    fn({Tensor::borrow(x.data(), DType::F32, {3, 3})});
    FAIL() << "a cast to 4 rows took 3";
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("cast.mlir:4:3: error: 'tensor.cast' to "
                                             "'tensor<4x3xf32>' finds 3 where dim 0 is 4"));
  }
  EXPECT_EQ(ctx.cacheStats().misses, 1u) << "one kernel serves both calls";
}

TEST(Partial, RuntimeSizesThatMustAgreeAreCheckedAtTheCall) {
  Function fn =
      attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}, {"value", 1}});
  std::vector<float> q(32 * 128), k(5 * 8 * 128), v(6 * 8 * 128);
  std::vector<Arg> args{Tensor::borrow(q.data(), DType::F32, {1, 1, 32, 128}),
                        Tensor::borrow(k.data(), DType::F32, {1, 5, 8, 128}),
                        Tensor::borrow(v.data(), DType::F32, {1, 6, 8, 128}), Scalar::f32(1.0f)};
  try {
    fn(args);
    FAIL() << "keys and values of different lengths were accepted";
  } catch (const Error &e) {
    std::string message = e.what();
    EXPECT_NE(message.find("attention_gqa.mlir:"), std::string::npos) << message;
    // The attention reads V in place (a view of it), and the check names that view.
    EXPECT_NE(message.find("has extent 5 from operand #0 (%probs) dim 2 but 6 from operand #1 "
                           "(%value_collapsed) dim 0"),
              std::string::npos)
        << message;
  }
}

// A call takes the last call's shapes only when its runtime sizes are the same: back to an
// earlier size, the shapes are that size's again, and a call whose sizes break a check fails
// every time, between calls that pass.
TEST(Partial, EachCallChecksAndShapesItsOwnRuntimeSizes) {
  Function fn =
      attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}, {"value", 1}});
  std::vector<float> q = oracle::randomFloats(32 * 128, 1),
                     kv = oracle::randomFloats(9 * 8 * 128, 2);
  auto args = [&](int64_t keys, int64_t values) {
    return std::vector<Arg>{Tensor::borrow(q.data(), DType::F32, {1, 1, 32, 128}),
                            Tensor::borrow(kv.data(), DType::F32, {1, keys, 8, 128}),
                            Tensor::borrow(kv.data(), DType::F32, {1, values, 8, 128}),
                            Scalar::f32(0.088f)};
  };
  Kernel kernel = fn.specialize(args(5, 5));
  auto agree = [&](int64_t n) {
    SCOPED_TRACE(fmt::format("{} keys and values", n));
    std::vector<Tensor> out = kernel(args(n, n));
    EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 1, 32, 128}));
    std::vector<double> expected =
        oracle::attentionGqa(q.data(), kv.data(), kv.data(), 0.088f, {1, 1, n, 32, 8, 128}, false);
    auto cmp = oracle::compare(out[0].as<float>(), expected, 1e-4, 1e-5);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  };
  auto disagree = [&] {
    EXPECT_THROW(kernel(args(5, 6)), Error) << "5 keys and 6 values were accepted";
  };
  agree(5);
  disagree();
  agree(5);
  disagree();
  disagree();
  agree(9);
  agree(5);
}

// A runtime batch of queries keeps specialization from equating the keys' batch (0) with the
// values' (3); with no query, both meet as constants in one op, where they are an error like
// any other mismatch (this was an internal error). Had they met the runtime batch instead, the
// call would check them (above).
TEST(Partial, ConstantsThatDisagreeBesideARuntimeDimAreAnError) {
  Function fn = attention().function("attention_gqa_decode");
  try {
    fn.specialize({"?x0x8x128xf32", "0x4x1x128xf32", "3x4x1x128xf32", "f32"});
    FAIL() << "keys and values of different batches were accepted";
  } catch (const InternalError &e) {
    FAIL() << e.what();
  } catch (const Error &e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("attention_gqa.mlir:"), std::string::npos) << message;
    EXPECT_NE(message.find("error: loop dim d0 of 'iree_linalg_ext.attention' has extent 0 from "
                           "operand #0 (%probs) dim 0 but 3 from operand #1 (%value_collapsed) "
                           "dim 0"),
              std::string::npos)
        << message;
  }
}

TEST(Partial, GenericModeIgnoresRuntimeDims) {
  Function fn =
      attention().function("attention_gqa_decode").withRuntimeDims({{"key", 1}, {"value", 1}});
  Kernel k = fn.specialize({"1x1x4x8xf32", "1x3x2x8xf32", "1x3x2x8xf32", "f32"}, Mode::Generic);
  EXPECT_EQ(k.signature(), "?x?x?x?xf32, ?x?x?x?xf32, ?x?x?x?xf32, f32");
}

// ---- Bad requests ---------------------------------------------------------------------------

struct BadRuntimeDim {
  std::string name, text, message;
};

TEST(Partial, BadRuntimeDimsAreClearErrors) {
  const char *source = R"(
module @m {
  util.func public @f(%x: tensor<?x8xf32>, %s: f32) -> tensor<?x8xf32> {
    util.return %x : tensor<?x8xf32>
  }
})";
  Context ctx(memoryOnly());
  Function fn = ctx.loadString(source, "m.mlir").function("f");
  const BadRuntimeDim cases[] = {
      {"unknown argument", "y:0", "error: runtime dim y:0: '@f' has no argument 'y' (it has x, s)"},
      {"position past the arguments", "#5:0",
       "error: runtime dim #5:0: '@f' has no argument '#5' (it has x, s)"},
      {"a static dim", "x:1",
       "error: runtime dim x:1: dim 1 of argument #0 (%x) of '@f' is 8 in the signature "
       "('tensor<?x8xf32>'); only a dynamic dim can stay a runtime value"},
      {"a dim past the rank", "#0:2",
       "error: runtime dim #0:2: argument #0 (%x) of '@f' is 'tensor<?x8xf32>', which has no "
       "dim 2"},
      {"a scalar", "s:0",
       "error: runtime dim s:0: argument #1 (%s) of '@f' is 'f32', which has no dim 0"},
  };
  for (const BadRuntimeDim &c : cases) {
    SCOPED_TRACE(c.name);
    try {
      fn.withRuntimeDims(parseRuntimeDims(c.text));
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()), c.message);
    }
  }
  for (const char *text : {"x", "x:", ":0", "x:-1", "x:one", "x:0,,"}) {
    SCOPED_TRACE(text);
    try {
      parseRuntimeDims(text);
      ADD_FAILURE() << "parsed " << text;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()).rfind("error: bad runtime dim '", 0), 0u) << e.what();
    }
  }
  // Through the API a dim may be negative; it is refused like one past the rank.
  try {
    fn.withRuntimeDims({{"x", -1}});
    ADD_FAILURE() << "accepted dim -1";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "error: runtime dim x:-1: argument #0 (%x) of '@f' is "
                                     "'tensor<?x8xf32>', which has no dim -1");
  }
  // A `?` type string for a static dim of the signature.
  try {
    fn.specialize(std::vector<std::string>{"?x?xf32", "f32"});
    ADD_FAILURE() << "a static dim became a runtime dim";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "error: in call to '@f': argument #0 (%x) dim 1 is 8 in the signature "
              "('tensor<?x8xf32>'); only a dynamic dim can stay a runtime value");
  }
}

} // namespace
} // namespace frank::test
