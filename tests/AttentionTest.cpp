// Attention components against their oracles: attention_gqa, attention_gqa_causal and
// attention_gqa_decode (components/attention/attention_gqa.mlir) and attention_block
// (components/attention/attention_block.mlir, linked with rope and attention_gqa), over many
// shapes, in specialized and generic modes, with guard regions around every output.
//
// Tolerance for every comparison here (MLIR-SUBSET.md §10, attention and attention blocks):
// rtol 1e-4, atol 1e-5. The kernels reassociate the QK and PV dot products and the softmax sum
// (vector lanes, online softmax rescaling), and use a polynomial exp; the oracle accumulates in
// double. Outputs are convex combinations of V rows (|v| <= 1), so the f32 error is a few ulp
// times sqrt(D) or sqrt(Skv), ~1e-6 at the largest shapes here; for the block the projections
// add sqrt(E)-sized f32 sums and rope's f32 angle, still well inside 1e-4 relative. The atol
// covers outputs that cancel to near zero.
//
// Benchmark shapes: S5 (prefill, q [1,128,32,128], k/v [1,128,8,128]) and S6 (decode,
// q [1,1,32,128], k/v [1,512,8,128]) are in the lists below; each runs in well under 2 s in
// both modes.
#include "TestSupport.h"
#include "oracles/AttentionMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace frank::test {
namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5; // see the file comment

// ---- attention_gqa, attention_gqa_causal, attention_gqa_decode -----------------------------

struct AttnShape {
  int64_t b, s, skv, h, hkv, d;
};

std::string attnName(const AttnShape &s) {
  return fmt::format("b{}_s{}_skv{}_h{}_hkv{}_d{}", s.b, s.s, s.skv, s.h, s.hkv, s.d);
}

// A context of its own, lowering with `--config=` text `config`, memory cache only.
std::unique_ptr<Context> contextWith(const std::string &config) {
  ContextOptions options = withConfig(config);
  options.diskCache = false;
  return std::make_unique<Context>(options);
}

Module &attentionModule() {
  static Module module = context().load(componentPath("attention/attention_gqa.mlir"));
  return module;
}

// For the tests of the AVX-512 kernels' loop IR, on any host.
Module &avx512AttentionModule() {
  static Module module = avx512Context().load(componentPath("attention/attention_gqa.mlir"));
  return module;
}

// With `cap` > 0, against the oracle of a tanh soft-cap of that cap as the score region (and the
// outputs must differ from plain attention's, so that the cap is seen to act).
void checkAttention(Function fn, const AttnShape &shape, Mode mode, bool causal, double cap = 0) {
  const int64_t nq = shape.b * shape.s * shape.h * shape.d;
  const int64_t nkv = shape.b * shape.skv * shape.hkv * shape.d;
  const uint64_t seed = 1 + shape.b * 7 + shape.s * 131 + shape.skv * 17 + shape.h * 3 + shape.d;
  // Queries wider than keys, so that some softmax rows are peaked and some flat.
  auto q = oracle::randomFloats(nq, seed, -2, 2);
  auto k = oracle::randomFloats(nkv, seed + 1);
  auto v = oracle::randomFloats(nkv, seed + 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
  std::vector<Arg> args{
      Tensor::borrow(q.data(), DType::F32, {shape.b, shape.s, shape.h, shape.d}),
      Tensor::borrow(k.data(), DType::F32, {shape.b, shape.skv, shape.hkv, shape.d}),
      Tensor::borrow(v.data(), DType::F32, {shape.b, shape.skv, shape.hkv, shape.d}),
      Scalar::f32(scale)};
  Kernel kernel = fn.specialize(args, mode);
  GuardedOutput out({shape.b, shape.s, shape.h, shape.d});
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  oracle::AttentionDims dims{shape.b, shape.s, shape.skv, shape.h, shape.hkv, shape.d};
  auto plain = oracle::attentionGqa(q.data(), k.data(), v.data(), scale, dims, causal);
  auto expected = cap > 0 ? oracle::attentionGqaSoftCapped(q.data(), k.data(), v.data(), scale,
                                                           dims, causal, cap)
                          : plain;
  auto cmp = oracle::compare(out.data(), expected, kRtol, kAtol);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
  if (cap > 0)
    EXPECT_FALSE(oracle::compare(out.data(), plain, kRtol, kAtol).ok);
}

class AttentionGqaTest : public testing::TestWithParam<std::tuple<AttnShape, Mode>> {};

TEST_P(AttentionGqaTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  checkAttention(attentionModule().function("attention_gqa"), shape, mode, /*causal=*/false);
}

// GQA ratios H/Hkv of 1, 2, 3, 4 and 8; Skv equal to, above and below S; head dims 64 and 128
// and odd ones; one query; the S5 benchmark shape last.
const AttnShape kAttnShapes[] = {
    {1, 1, 1, 1, 1, 1},      {1, 3, 5, 2, 2, 8},        {2, 7, 7, 4, 2, 16},
    {1, 5, 3, 8, 2, 8},      {1, 9, 13, 8, 1, 32},      {2, 4, 4, 16, 2, 64},
    {1, 17, 17, 4, 1, 64},   {1, 6, 11, 2, 1, 128},     {3, 2, 9, 3, 3, 5},
    {1, 31, 31, 6, 2, 24},   {2, 1, 33, 4, 4, 16},      {1, 13, 40, 8, 4, 128},
    {1, 16, 16, 8, 8, 64},   {1, 33, 17, 4, 2, 17},     {1, 64, 64, 8, 2, 64},
    {1, 1, 1, 8, 1, 128},    {1, 300, 320, 3, 1, 16},   {2, 520, 520, 2, 2, 8},
    {1, 127, 127, 8, 2, 64}, {1, 128, 128, 32, 8, 128},
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGqaTest,
                         testing::Combine(testing::ValuesIn(kAttnShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           return fmt::format("attention_gqa_{}_{}",
                                              attnName(std::get<0>(info.param)),
                                              modeName(std::get<1>(info.param)));
                         });

// At S5, the query's move into grouped order and the output's move back cannot fold into the
// tensor program (each merges the group member with the position); forward-copies removes both
// copies: the Q·Kᵀ tile reads `query` and the P·V tile writes `out0` in place.
TEST(AttentionGqa, PrefillReadsTheQueryAndWritesTheOutputInPlace) {
  Function fn = avx512AttentionModule().function("attention_gqa");
  std::string loops =
      fn.emit(Stage::Loops, {"1x128x32x128xf32", "1x128x8x128xf32", "1x128x8x128xf32", "f32"});
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("linalg.transpose"))) << loops;
  EXPECT_THAT(loops, testing::HasSubstr("let in_1: f32 = query["));
  EXPECT_THAT(loops, testing::HasSubstr("(((m_block_1 % 32) * 4) * 4096)) : 16] = acc_22"));
}

// Over 127 keys, Q·Kᵀ packs K transposed as over 128, in 4x4 tiles: the n block of keys 0-63,
// then one ending at the last key, 63-126, its own panel packed from key 63 on, whose first
// column writes again the score the block before wrote (kAttnShapes checks the results).
TEST(AttentionGqa, OddKeyCountsEndTheLastKeyBlockAtTheLastKey) {
  Function fn = avx512AttentionModule().function("attention_gqa");
  std::string loops =
      fn.emit(Stage::Loops, {"1x127x8x64xf32", "1x127x2x64xf32", "1x127x2x64xf32", "f32"});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.outer m=d1 n=d2 k=d3 tile=4x4 lanes=16 "
                                        "pack=#1^T"));
  EXPECT_THAT(loops, testing::HasSubstr("((63 + (column_block_1 * 8)) * 128)) : 8]"));
  EXPECT_THAT(loops, testing::HasSubstr("t[((63 + ((m_block_1 * 4) * 127)) + (d0_1 * 64516)) : "
                                        "16] = acc_17"));
  EXPECT_THAT(loops, testing::HasSubstr("t[((111 + ((m_block_1 * 4) * 127)) + (d0_1 * 64516)) : "
                                        "16] = acc_20"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("n_left")));
}

class AttentionCausalTest : public testing::TestWithParam<std::tuple<AttnShape, Mode>> {};

TEST_P(AttentionCausalTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  checkAttention(attentionModule().function("attention_gqa_causal"), shape, mode, /*causal=*/true);
}

// Skv >= S throughout (a query with no visible key is undefined); Skv > S is the chunked-prefill
// case where the queries are the last S positions. The tiles skip the keys their rows do not
// see: S = 37 puts tiles of 4 query rows across the end of a group member's positions (the
// grouped rows are g * S + s), and S = 12 with G = 2 has two tiles of 6 rows a member. S5 with
// the causal mask last.
const AttnShape kCausalShapes[] = {
    {1, 1, 1, 1, 1, 4},     {1, 4, 4, 2, 2, 8},        {1, 3, 7, 4, 2, 16},
    {2, 5, 5, 8, 2, 8},     {1, 9, 20, 8, 1, 32},      {1, 16, 16, 4, 4, 64},
    {1, 7, 30, 16, 2, 64},  {2, 12, 12, 2, 1, 128},    {1, 6, 6, 3, 1, 5},
    {1, 10, 17, 6, 3, 24},  {1, 1, 9, 4, 2, 16},       {1, 31, 33, 8, 4, 16},
    {3, 2, 2, 2, 1, 8},     {1, 40, 64, 8, 1, 128},    {1, 37, 41, 8, 2, 64},
    {1, 12, 12, 2, 1, 128}, {1, 70, 200, 4, 2, 32},    {1, 300, 320, 3, 1, 16},
    {1, 260, 300, 4, 1, 8}, {1, 128, 128, 32, 8, 128},
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCausalTest,
                         testing::Combine(testing::ValuesIn(kCausalShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           return fmt::format("attention_gqa_causal_{}_{}",
                                              attnName(std::get<0>(info.param)),
                                              modeName(std::get<1>(info.param)));
                         });

// Prefill whose scores of a KV head pass 1 MiB runs its queries in blocks (generalize-attention),
// each block's scores, softmax and P·V one after another: 300 positions of 3 heads by 320 keys
// (1.1 MiB) in 2 blocks of 450 queries, a block ending inside a head's positions; 512 positions
// of 32 heads in 4 blocks of 512. A causal mask's tiles then find a query's position from its
// block. `query-blocks=N` sets the count.
TEST(AttentionPrefill, ManyQueriesRunInBlocks) {
  auto explain = [](const std::string &function, std::vector<std::string> types,
                    const std::string &config = "") {
    Kernel kernel = contextWith(config)
                        ->load(componentPath("attention/attention_gqa.mlir"))
                        .function(function)
                        .specialize(types);
    for (const std::string &line : kernel.explanation())
      if (line.find("queries in") != std::string::npos)
        return line.substr(line.find("queries in"));
    return std::string("none");
  };
  EXPECT_EQ(explain("attention_gqa", {"1x300x3x16xf32", "1x320x1x16xf32", "1x320x1x16xf32", "f32"}),
            "queries in 2 blocks of 450 queries (prefill; 320 keys)");
  const std::vector<std::string> s512 = {"1x512x32x128xf32", "1x512x8x128xf32", "1x512x8x128xf32",
                                         "f32"};
  EXPECT_EQ(explain("attention_gqa_causal", s512),
            "queries in 4 blocks of 512 queries (prefill; 512 keys)");
  EXPECT_EQ(explain("attention_gqa", s512, "query-blocks=16"),
            "queries in 16 blocks of 128 queries (query-blocks; 512 keys)");
  EXPECT_EQ(explain("attention_gqa", s512, "query-blocks=1"),
            "queries in one piece: query-blocks=1");
  EXPECT_EQ(
      explain("attention_gqa", {"1x128x32x128xf32", "1x128x8x128xf32", "1x128x8x128xf32", "f32"}),
      "queries in one piece: the scores of 512 queries by 128 keys fit in 1024 KiB");
  EXPECT_THAT([&] { explain("attention_gqa", s512, "query-blocks=3"); },
              testing::ThrowsMessage<Error>(
                  testing::HasSubstr("error: --config: query-blocks=3 does not fit this attention: "
                                     "2048 queries do not split into 3 "
                                     "whole blocks")));
  // The blocks are the parallel loop; the causal tiles count a block's rows from its first.
  Function causal = attentionModule().function("attention_gqa_causal");
  std::string specialized = causal.emit(Stage::Specialized, s512);
  EXPECT_EQ(count(specialized, "frank.visible_keys = [2, 3, 512, 0, 0, 512]"), 5) << specialized;
  std::string loops = causal.emit(Stage::Loops, s512);
  EXPECT_THAT(loops, testing::ContainsRegex("  for d0_[0-9]+ in 0[.][.]4 parallel"));
  EXPECT_THAT(loops, testing::ContainsRegex("remui[(][(][(]d0_[0-9]+ [*] 512[)] [+] [(]m_block"));
  checkAttention(causal, {1, 512, 512, 32, 8, 128}, Mode::Specialized, /*causal=*/true);
  // A runtime batch leaves the blocks' views without a size: one piece.
  Function partial = attentionModule()
                         .function("attention_gqa_causal")
                         .withRuntimeDims(parseRuntimeDims("query:0,key:0,value:0"));
  EXPECT_THAT(
      partial.specialize(s512).explanation(),
      testing::Contains(testing::EndsWith("queries in one piece: '%q_3d' has a runtime size")));
  checkAttention(partial, {2, 300, 320, 3, 1, 16}, Mode::Specialized, /*causal=*/true);
  checkAttention(contextWith("query-blocks=16")
                     ->load(componentPath("attention/attention_gqa.mlir"))
                     .function("attention_gqa_causal"),
                 {1, 512, 512, 32, 8, 128}, Mode::Specialized, /*causal=*/true);
}

// The causal prefill's mask is read before anything runs (CausalMask.h): the specialized IR marks
// the scores, the softmax up to its sum (the scaled scores recomputed where the maximum and the
// exponentials read them) and P·V with the keys each query sees, and they skip the rest: a Q·Kᵀ
// tile whose rows see none of its 64 keys, the softmax's loops over a row's keys past the vector
// of 16 that holds its last, and the P·V steps past the last key its rows see. The
// normalization writes every key (0 where the mask hides it), and the softmax stays one pass over
// each block of 4 rows in the one parallel loop over KV heads, its temporaries one block of rows.
TEST(AttentionCausal, TilesSkipTheKeysTheMaskHides) {
  Function fn = avx512AttentionModule().function("attention_gqa_causal");
  const std::vector<std::string> types = {"1x128x32x128xf32", "1x128x8x128xf32", "1x128x8x128xf32",
                                          "f32"};
  std::string specialized = fn.emit(Stage::Specialized, types);
  EXPECT_EQ(count(specialized, "frank.visible_keys = [1, 2, 128, 0]"), 4) << specialized;
  EXPECT_EQ(count(specialized, "frank.visible_keys = [1, 3, 128, 0]"), 1) << specialized;
  std::string loops = fn.emit(Stage::Loops, types);
  EXPECT_THAT(loops, testing::HasSubstr("if cmp.sle((n_block * 64), minsi((remui((m_block * 4), "
                                        "128) + 3), 127)) {"));
  EXPECT_THAT(loops, testing::HasSubstr("in 0..minsi(128, maxsi((minsi((remui((m_block_1 * 4), "
                                        "128) + 3), 127) + 1), 0)) {"));
  // Two bounded loops over a row's keys: the maximum, then the exponentials with their sum.
  EXPECT_EQ(count(loops, "_block * 4) + d1_2), 128), 127) + 16) / 16) * 16), 0)) vectorized {"), 2)
      << loops;
  EXPECT_EQ(count(loops, " parallel("), 1) << loops; // Q·Kᵀ, softmax and P·V
  // The mask is computed where it is read, never stored.
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("mask"))) << loops;
  // The exponentials kept for a block of 4 rows at a time (no term of the block's loop).
  EXPECT_THAT(loops, testing::HasSubstr("t_40[((d2_3 + (d1_2 * 128)) + (d0_1 * 65536))] = "));
  // Without the mask, every tile runs.
  std::string plain = avx512AttentionModule().function("attention_gqa").emit(Stage::Loops, types);
  EXPECT_THAT(plain, testing::Not(testing::HasSubstr("minsi"))) << plain;
}

// Over a runtime query and key count (partial specialization) the mask's period S and offset
// Skv - S are runtime values: the attribute says how to compute them from the extents (the
// query dim's over 4, the group; the key dim's minus the period), and the tiles and the softmax
// skip the same keys, the mask computed where it is read.
TEST(AttentionCausal, RuntimeLengthsSkipTheKeysTheMaskHides) {
  Function fn = avx512AttentionModule().function("attention_gqa_causal");
  const std::vector<std::string> types = {"1x?x32x128xf32", "1x?x8x128xf32", "1x?x8x128xf32",
                                          "f32"};
  std::string specialized = fn.emit(Stage::Specialized, types);
  EXPECT_EQ(count(specialized, "frank.visible_keys = [1, 2, 1, 0, -1, 0, 4, 1, -1]"), 5)
      << specialized;
  EXPECT_EQ(count(specialized, "frank.visible_keys = [1, 3, 1, 0, -1, 0, 4, 1, -1]"), 1)
      << specialized;
  std::string loops = fn.emit(Stage::Loops, types);
  // Q·Kᵀ's tiles (keys as n) and P·V's keys stop after the last key their rows see: the row's
  // index mod S, plus Skv - S.
  EXPECT_THAT(loops, testing::HasSubstr("// unless its rows see none of its keys"));
  EXPECT_THAT(loops,
              testing::HasSubstr("(dims[0] - 1)) + (dims[1] + (dims[0] * -1))), 0) + 1), 0)) {"))
      << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("mask"))) << loops;
  // The softmax's nests fuse with Q·Kᵀ and P·V into one parallel loop over the KV heads,
  // though their key loops' extents are minima; the query's and the output's transposes are
  // forwarded into the tiles' reads and writes (row r of a KV head's [group member, position]
  // order is position r % S of member r / S, S a runtime value), so that loop is the only one.
  EXPECT_EQ(count(loops, " parallel("), 1) << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("q_t_init["))) << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("o_init["))) << loops;
  EXPECT_THAT(loops, testing::HasSubstr(" % dims[0]) * 4096)")) << loops;
  // Its 4 S rows a KV head come in whole tiles whatever S is: no loop of rows left over.
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("m_left"))) << loops;
}

// A causal mask of indices with fewer keys than queries (keep = j <= i + Skv - S) hides every
// key from the first S - Skv rows. Their softmax is NaN, as with the same mask given as data
// (§4.6); the causal path, which skips hidden keys, had made them 0. The other rows agree.
TEST(AttentionCausal, RowsThatSeeNoKeyAreNaNAsWithTheMaskAsData) {
  const char *maps = R"(
    #q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
    #k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
    #v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
    #s = affine_map<(d0, d1, d2, d3, d4) -> ()>
    #mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>
    #o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
    #id3 = affine_map<(b, i, j) -> (b, i, j)>)";
  const char *attention = R"(
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %b = tensor.dim %q, %c0 : tensor<?x?x?xf32>
      %m = tensor.dim %q, %c1 : tensor<?x?x?xf32>
      %j = tensor.dim %k, %c1 : tensor<?x?x?xf32>
      %n = tensor.dim %v, %c2 : tensor<?x?x?xf32>
      %e = tensor.empty(%b, %m, %n) : tensor<?x?x?xf32>
      %r = iree_linalg_ext.attention {indexing_maps = [#q, #k, #v, #s, #mk, #o]}
          ins(%q, %k, %v, %scale, %mask : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32, tensor<?x?x?xi1>)
          outs(%e : tensor<?x?x?xf32>) {
      ^bb0(%score: f32):
        iree_linalg_ext.yield %score : f32
      } -> tensor<?x?x?xf32>
      util.return %r : tensor<?x?x?xf32>
    })";
  const std::string computed = std::string(maps) + R"(
    util.func public @f(%q: tensor<?x?x?xf32>, %k: tensor<?x?x?xf32>, %v: tensor<?x?x?xf32>, %scale: f32) -> tensor<?x?x?xf32> {
      %cq = arith.constant 1 : index
      %ck = arith.constant 1 : index
      %queries = tensor.dim %q, %cq : tensor<?x?x?xf32>
      %keys = tensor.dim %k, %ck : tensor<?x?x?xf32>
      %batch0 = arith.constant 0 : index
      %batch = tensor.dim %q, %batch0 : tensor<?x?x?xf32>
      %off = arith.subi %keys, %queries : index
      %me = tensor.empty(%batch, %queries, %keys) : tensor<?x?x?xi1>
      %mask = linalg.generic {indexing_maps = [#id3], iterator_types = ["parallel", "parallel", "parallel"]}
          outs(%me : tensor<?x?x?xi1>) {
      ^bb0(%u: i1):
        %i = linalg.index 1 : index
        %jj = linalg.index 2 : index
        %last = arith.addi %i, %off : index
        %keep = arith.cmpi sle, %jj, %last : index
        linalg.yield %keep : i1
      } -> tensor<?x?x?xi1>)" + attention;
  const std::string given = std::string(maps) + R"(
    util.func public @f(%q: tensor<?x?x?xf32>, %k: tensor<?x?x?xf32>, %v: tensor<?x?x?xf32>, %scale: f32, %mask: tensor<?x?x?xi1>) -> tensor<?x?x?xf32> {)" +
                            attention;
  const int64_t queries = 8, keys = 3, d = 16;
  std::vector<float> q = oracle::randomFloats(queries * d, 31),
                     k = oracle::randomFloats(keys * d, 32), v = oracle::randomFloats(keys * d, 33);
  std::vector<uint8_t> mask(queries * keys);
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j)
      mask[i * keys + j] = j <= i + keys - queries;
  std::vector<Arg> args = {Tensor::borrow(q.data(), DType::F32, {1, queries, d}),
                           Tensor::borrow(k.data(), DType::F32, {1, keys, d}),
                           Tensor::borrow(v.data(), DType::F32, {1, keys, d}), Scalar::f32(0.3f)};
  std::vector<Arg> withMask = args;
  withMask.push_back(Tensor::borrow(mask.data(), DType::I1, {1, queries, keys}));
  Function byIndex = context().loadString(computed, "computed.mlir").function("f");
  Function byData = context().loadString(given, "given.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    for (Function fn : {byIndex, byIndex.withRuntimeDims({{"q", 1}, {"k", 1}, {"v", 1}})}) {
      Tensor a = fn(args, mode)[0], b = byData(withMask, mode)[0];
      for (int64_t i = 0; i < queries; ++i)
        for (int64_t c = 0; c < d; ++c) {
          const float x = a.as<float>()[i * d + c], y = b.as<float>()[i * d + c];
          if (i < queries - keys)
            EXPECT_TRUE(std::isnan(x) && std::isnan(y)) << "row " << i << ": " << x << ", " << y;
          else
            EXPECT_NEAR(x, y, 1e-5) << "row " << i;
        }
    }
  }
}

class AttentionDecodeTest : public testing::TestWithParam<std::tuple<AttnShape, Mode>> {};

TEST_P(AttentionDecodeTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  checkAttention(attentionModule().function("attention_gqa_decode"), shape, mode, /*causal=*/false);
}

// One query position against 1 to 2048 keys. Keys split into chunks (generalize-attention)
// when 256 or more fall to each of 2, 4 or 8 chunks and a KV head has at most 16 queries:
// 512 and 768 keys in 2 chunks, 1024 in 4, 2048 in 8, 16 queries a KV head split and 17 do
// not; 513 and 255 keys do not split. The S6 benchmark shape last.
const AttnShape kDecodeShapes[] = {
    {1, 1, 1, 1, 1, 1},    {1, 1, 7, 2, 2, 8},     {2, 1, 5, 4, 2, 16},   {1, 1, 33, 8, 2, 8},
    {1, 1, 64, 8, 1, 32},  {1, 1, 100, 16, 2, 64}, {3, 1, 17, 4, 4, 128}, {1, 1, 2, 6, 3, 24},
    {1, 1, 513, 8, 8, 64}, {2, 1, 31, 32, 8, 128}, {1, 1, 1, 8, 1, 128},  {4, 1, 9, 2, 1, 5},
    {1, 1, 255, 4, 1, 64}, {1, 1, 47, 12, 4, 16},  {1, 1, 768, 8, 2, 32}, {1, 1, 1024, 4, 2, 16},
    {2, 1, 2048, 4, 1, 8}, {1, 1, 512, 16, 1, 16}, {1, 1, 512, 17, 1, 8}, {1, 1, 512, 32, 8, 128},
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDecodeTest,
                         testing::Combine(testing::ValuesIn(kDecodeShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           return fmt::format("attention_gqa_decode_{}_{}",
                                              attnName(std::get<0>(info.param)),
                                              modeName(std::get<1>(info.param)));
                         });

// The decode form views [B, S, H, D] as [B*S*Hkv, G, D] against key's [B*Hkv, Skv, D]; with
// S != 1 those batch extents differ and the attention op's extent check must report it rather
// than read out of bounds.
TEST(AttentionDecode, SeveralQueriesAreAnError) {
  Function fn = attentionModule().function("attention_gqa_decode");
  EXPECT_THROW(fn.specialize({"1x2x4x8xf32", "1x5x2x8xf32", "1x5x2x8xf32", "f32"}), Error);
}

// The specialized decode kernel at S6 is one parallel loop over two chunks of 256 keys, each
// reading all heads of its keys (fuse-loops joins the chunk's nests), and a serial combine. Its
// softmax computes each exponential once: exp(s - chunk max) is kept for the chunk's sum and
// P·V (the combine's own exponentials, two a chunk and query row, are outside the loop). K and V
// are read in place: no temporary holds a chunk of them.
TEST(AttentionDecode, OneParallelLoopOverChunksOfKeysAndOneExpPerScore) {
  Function fn = avx512AttentionModule().function("attention_gqa_decode");
  std::string loops =
      fn.emit(Stage::Loops, {"1x1x32x128xf32", "1x512x8x128xf32", "1x512x8x128xf32", "f32"});
  auto count = [](const std::string &text, const std::string &what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count(loops, "parallel"), 1u) << loops;
  size_t chunks = loops.find("\n  for d0 in 0..2 parallel");
  ASSERT_NE(chunks, std::string::npos) << loops;
  std::string chunkLoop = loops.substr(chunks, loops.find("\n  }\n", chunks) - chunks);
  EXPECT_EQ(count(chunkLoop, "exp("), 1u) << chunkLoop;
  EXPECT_THAT(chunkLoop, testing::HasSubstr("key["));
  EXPECT_THAT(chunkLoop, testing::HasSubstr("value["));
  for (size_t at = loops.find("  temp "); at != std::string::npos;
       at = loops.find("  temp ", at + 1)) {
    size_t open = loops.find('[', at), close = loops.find(']', at);
    EXPECT_LT(std::stoll(loops.substr(open + 1, close - open - 1)), 256 * 8 * 128)
        << loops.substr(at, loops.find('\n', at) - at);
  }
}

// How many chunks of keys generalize-attention makes, as the specialized IR shows them (the
// chunks' unnormalized P·V, `chunk_out`, leads with their count): at least 256 keys a chunk, at
// most 8 chunks, at most 16 queries a KV head, no mask, and the key count known.
TEST(AttentionDecode, KeysSplitIntoChunksOfAtLeast256WhenFewQueriesReadThem) {
  auto chunkOut = [](const std::string &function, std::vector<std::string> types,
                     const std::string &runtime = "") {
    Function fn = attentionModule().function(function);
    if (!runtime.empty())
      fn = fn.withRuntimeDims(parseRuntimeDims(runtime));
    std::string ir = fn.emit(Stage::Specialized, types);
    size_t at = ir.find("%chunk_out = ");
    if (at == std::string::npos)
      return std::string("none");
    size_t outs = ir.find("outs(", at);
    return ir.substr(ir.find(": tensor<", outs) + 2,
                     ir.find('>', outs) - ir.find(": tensor<", outs) - 1);
  };
  auto decode = [&](int64_t keys, int64_t heads, int64_t kvHeads) {
    std::string kv = fmt::format("1x{}x{}x16xf32", keys, kvHeads);
    return chunkOut("attention_gqa_decode", {fmt::format("1x1x{}x16xf32", heads), kv, kv, "f32"});
  };
  EXPECT_EQ(decode(512, 32, 8), "tensor<2x8x4x16xf32>");
  EXPECT_EQ(decode(768, 8, 2), "tensor<2x2x4x16xf32>");
  EXPECT_EQ(decode(1024, 8, 2), "tensor<4x2x4x16xf32>");
  EXPECT_EQ(decode(4096, 8, 2), "tensor<8x2x4x16xf32>");
  EXPECT_EQ(decode(512, 16, 1), "tensor<2x1x16x16xf32>");
  EXPECT_EQ(decode(512, 17, 1), "none"); // 17 queries a KV head
  EXPECT_EQ(decode(511, 8, 2), "none");  // no whole chunks
  EXPECT_EQ(decode(510, 8, 2), "none");  // 2 chunks of 255
  EXPECT_EQ(decode(256, 8, 2), "none");  // one chunk
  // Prefill: 128 positions of 4 heads a KV head.
  EXPECT_EQ(
      chunkOut("attention_gqa", {"1x128x32x16xf32", "1x512x8x16xf32", "1x512x8x16xf32", "f32"}),
      "none");
  // The causal form's mask could hide a whole chunk from a query.
  EXPECT_EQ(chunkOut("attention_gqa_causal",
                     {"1x1x32x16xf32", "1x512x8x16xf32", "1x512x8x16xf32", "f32"}),
            "none");
  // A runtime key count: how many chunks is not known when the kernel is compiled.
  EXPECT_EQ(chunkOut("attention_gqa_decode",
                     {"1x1x32x16xf32", "1x512x8x16xf32", "1x512x8x16xf32", "f32"}, "key:1,value:1"),
            "none");
}

// `key-chunks=N` sets the count, from the function's config or the op's `frank.config` (which
// wins), wherever the keys split into N whole chunks: 8 chunks of 64 keys or one piece (the loop
// over the KV heads) at S6's shape, each matching the oracle; 3 chunks of 512 keys or chunks of
// a masked attention are errors at the op (CliTest checks what `--explain` says of each).
TEST(AttentionDecode, KeyChunksOverrideSetsTheCountWhereTheKeysSplit) {
  const AttnShape s6{1, 1, 512, 32, 8, 128};
  const std::vector<std::string> types{"1x1x32x128xf32", "1x512x8x128xf32", "1x512x8x128xf32",
                                       "f32"};
  // In one piece, Q K^T's blocks of keys run on the threads, outside the heads (unless
  // `blocks-outside=0`), and the softmax and P V over the heads.
  for (auto [config, loop] :
       {std::pair{"key-chunks=8", "\n  for d0 in 0\\.\\.8 parallel"},
        std::pair{"key-chunks=1", "\n  for n_block in 0\\.\\.[0-9]+ parallel"},
        std::pair{"key-chunks=1,blocks-outside=0", "\n  for d0 in 0\\.\\.8 parallel"}}) {
    auto ctx = contextWith(config);
    Function fn =
        ctx->load(componentPath("attention/attention_gqa.mlir")).function("attention_gqa_decode");
    std::string specialized = fn.emit(Stage::Specialized, types);
    EXPECT_EQ(specialized.find("%chunk_out") != std::string::npos,
              std::string_view(config) == "key-chunks=8")
        << config;
    EXPECT_THAT(fn.emit(Stage::Loops, types), testing::ContainsRegex(loop)) << config;
    checkAttention(fn, s6, Mode::Specialized, /*causal=*/false);
  }
  // The op's attribute wins over the function's config.
  std::string text = componentTextWith("attention/attention_gqa.mlir", "#att_out]}",
                                       "#att_out], frank.config = \"key-chunks=4\"}");
  auto ctx = contextWith("key-chunks=1");
  Function fn = ctx->loadString(text, "attention_chunks.mlir").function("attention_gqa_decode");
  EXPECT_THAT(fn.emit(Stage::Loops, types), testing::HasSubstr("\n  for d0 in 0..4 parallel"));
  checkAttention(fn, s6, Mode::Specialized, /*causal=*/false);

  auto error = [&](const std::string &config, const std::string &function) {
    try {
      contextWith(config)
          ->load(componentPath("attention/attention_gqa.mlir"))
          .function(function)
          .emit(Stage::Loops, types);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error("key-chunks=3", "attention_gqa_decode"),
              testing::MatchesRegex(
                  ".*attention_gqa.mlir:[0-9]+:[0-9]+: error: --config: key-chunks=3 does "
                  "not fit this attention: 512 keys do not split into 3 whole "
                  "chunks.*"));
  EXPECT_THAT(
      error("key-chunks=2", "attention_gqa_causal"),
      testing::HasSubstr("--config: key-chunks=2 does not fit this attention: it has a mask"));
  EXPECT_EQ(error("key-chunks=1", "attention_gqa_causal"), "no error");
  // Set on the op, the error names the attribute.
  std::string threeChunks = componentTextWith("attention/attention_gqa.mlir", "#att_out]}",
                                              "#att_out], frank.config = \"key-chunks=3\"}");
  EXPECT_THAT(
      [&] {
        context()
            .loadString(threeChunks, "attention_three_chunks.mlir")
            .function("attention_gqa_decode")
            .emit(Stage::Loops, types);
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr(
          "error: frank.config: key-chunks=3 does not fit this attention: 512 keys")));
}

// An attention op without batch dims (Q [M, D], K [J, D], V [J, D]) splits its keys too: the
// chunks' rows are then [chunks, M] with no heads to flatten. 1024 keys, 3 queries: 4 chunks.
// The GQA oracle computes it as one KV head whose group is the 3 queries.
TEST(AttentionDecode, AttentionWithoutBatchDimsSplitsItsKeysToo) {
  const char *text = R"(
    #q = affine_map<(m, k, j, n) -> (m, k)>
    #k = affine_map<(m, k, j, n) -> (j, k)>
    #v = affine_map<(m, k, j, n) -> (j, n)>
    #s = affine_map<(m, k, j, n) -> ()>
    #o = affine_map<(m, k, j, n) -> (m, n)>
    func.func @att(%q: tensor<3x16xf32>, %k: tensor<1024x16xf32>, %v: tensor<1024x16xf32>,
                   %scale: f32) -> tensor<3x16xf32> {
      %init = tensor.empty() : tensor<3x16xf32>
      %o = iree_linalg_ext.attention {indexing_maps = [#q, #k, #v, #s, #o]}
          ins(%q, %k, %v, %scale : tensor<3x16xf32>, tensor<1024x16xf32>, tensor<1024x16xf32>, f32)
          outs(%init : tensor<3x16xf32>) {
      ^bb0(%score: f32):
        iree_linalg_ext.yield %score : f32
      } -> tensor<3x16xf32>
      return %o : tensor<3x16xf32>
    })";
  const int64_t m = 3, d = 16, keys = 1024, n = 16;
  Function fn = context().loadString(text, "attention_2d.mlir").function("att");
  auto q = oracle::randomFloats(m * d, 11, -2, 2), k = oracle::randomFloats(keys * d, 12),
       v = oracle::randomFloats(keys * n, 13);
  std::vector<Arg> args{Tensor::borrow(q.data(), DType::F32, {m, d}),
                        Tensor::borrow(k.data(), DType::F32, {keys, d}),
                        Tensor::borrow(v.data(), DType::F32, {keys, n}), Scalar::f32(0.25f)};
  Kernel kernel = fn.specialize(args);
  EXPECT_THAT(kernel.explanation().back(),
              testing::EndsWith(": keys in 4 chunks of 256 keys (decode; 3 queries a KV head)"));
  std::vector<Tensor> out = kernel(args);
  oracle::AttentionDims dims{1, 1, keys, m, 1, d};
  auto expected = oracle::attentionGqa(q.data(), k.data(), v.data(), 0.25f, dims, false);
  auto cmp = oracle::compare(out[0].as<float>(), expected, kRtol, kAtol);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// The combine rescales each chunk by exp(chunk max - max): with the two chunks' logits 90 apart
// (q = 1, k = +-3 over 16 dims at scale 1: logits +-48), the lower chunk's weight underflows to
// zero and the result is the mean of the higher chunk's values, whichever chunk holds it. The
// oracle computes in double.
TEST(AttentionDecode, ChunksWithFarApartMaximaCombineToTheOracle) {
  Function fn = attentionModule().function("attention_gqa_decode");
  const int64_t keys = 512, kvHeads = 2, heads = 4, d = 16;
  for (bool highFirst : {true, false}) {
    std::vector<float> q(heads * d, 1.0f), k(keys * kvHeads * d);
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t i = 0; i < kvHeads * d; ++i)
        k[j * kvHeads * d + i] = (j < keys / 2) == highFirst ? 3.0f : -3.0f;
    std::vector<float> v = oracle::randomFloats(keys * kvHeads * d, highFirst ? 7 : 8);
    std::vector<Arg> args{Tensor::borrow(q.data(), DType::F32, {1, 1, heads, d}),
                          Tensor::borrow(k.data(), DType::F32, {1, keys, kvHeads, d}),
                          Tensor::borrow(v.data(), DType::F32, {1, keys, kvHeads, d}),
                          Scalar::f32(1.0f)};
    std::vector<Tensor> out = fn.specialize(args)(args);
    oracle::AttentionDims dims{1, 1, keys, heads, kvHeads, d};
    auto expected = oracle::attentionGqa(q.data(), k.data(), v.data(), 1.0f, dims, false);
    auto cmp = oracle::compare(out[0].as<float>(), expected, kRtol, kAtol);
    EXPECT_TRUE(cmp.ok) << (highFirst ? "high first: " : "high last: ") << cmp.describe();
  }
}

// `frank.config` on the attention op holds for the contractions it becomes: prefetch=8 sets
// the decode Q·Kᵀ nest's distance (the selection picks 4), P·V and the chunks' weighted sum
// (contraction.outer) have no prefetch to set, and the results are the oracle's.
TEST(AttentionDecode, ConfigAttributeSetsItsContractions) {
  std::string text = componentTextWith("attention/attention_gqa.mlir", "#att_out]}",
                                       "#att_out], frank.config = \"prefetch=8\"}");
  Function fn =
      context().loadString(text, "attention_prefetch.mlir").function("attention_gqa_decode");
  std::string loops =
      fn.emit(Stage::Loops, {"1x1x32x128xf32", "1x512x8x128xf32", "1x512x8x128xf32", "f32"});
  EXPECT_THAT(loops, testing::HasSubstr("contraction.dot"));
  EXPECT_THAT(loops, testing::HasSubstr(" prefetch=8"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr(" prefetch=4"))) << loops;
  // The loop IR names the attribute on the three contractions only, not on the softmax nests.
  size_t named = 0;
  for (size_t at = loops.find("(frank.config"); at != std::string::npos;
       at = loops.find("(frank.config", at + 1))
    ++named;
  EXPECT_EQ(named, 3u) << loops;
  checkAttention(fn, {1, 1, 512, 32, 8, 128}, Mode::Specialized, /*causal=*/false);
}

// ---- Score regions ---------------------------------------------------------------------------

// attention_gqa.mlir with a tanh soft-cap (Gemma 2's) as every attention's score region. The
// region sees logits in log2 units (MLIR-SUBSET.md §4.6).
Module &softCappedModule() {
  static Module module = context().loadString(
      componentTextWith("attention/attention_gqa.mlir",
                        "^bb0(%score: f32):\n      iree_linalg_ext.yield %score : f32",
                        "^bb0(%score: f32):\n"
                        "      %cap = arith.constant 2.5 : f32\n"
                        "      %t = arith.divf %score, %cap : f32\n"
                        "      %th = math.tanh %t : f32\n"
                        "      %capped = arith.mulf %th, %cap : f32\n"
                        "      iree_linalg_ext.yield %capped : f32"),
      "attention_soft_capped.mlir");
  return module;
}

// Prefill in blocks of queries (S5's shape), causal prefill, decode in chunks of keys (S6's), and
// odd sizes, in both modes: every way attention is generalized applies the region. Queries in
// [-2, 2] and keys in [-1, 1] make logits of about 1 in log2 units, where a cap of 2.5 moves
// them by several percent.
TEST(AttentionScoreRegion, TanhSoftCapMatchesTheOracle) {
  struct Case {
    const char *function;
    AttnShape shape;
    bool causal;
  };
  const Case cases[] = {{"attention_gqa", {1, 128, 128, 32, 8, 128}, false},
                        {"attention_gqa", {2, 3, 7, 4, 2, 5}, false},
                        {"attention_gqa_causal", {1, 64, 64, 4, 2, 32}, true},
                        {"attention_gqa_decode", {1, 1, 512, 32, 8, 128}, false},
                        {"attention_gqa_decode", {1, 1, 33, 4, 1, 16}, false}};
  for (const Case &c : cases)
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      SCOPED_TRACE(fmt::format("{} {} {}", c.function, attnName(c.shape),
                               mode == Mode::Generic ? "generic" : "specialized"));
      checkAttention(softCappedModule().function(c.function), c.shape, mode, c.causal, 2.5);
    }
}

// f16 attention takes an f32 scale and an f32 score region (§4.6): the scale multiplied f16
// scores in LLVM IR that did not verify. Against double on the f16-rounded inputs, rtol and atol
// 1e-2: the scores sum 16 products in f16 (unit roundoff 4.9e-4, about 8e-3 of error at most
// before the 0.5 scale) and the output is a convex combination of V's rows (|v| <= 1) rounded
// to f16; a soft-cap in the wrong units moves outputs by more (checked below).
TEST(AttentionScoreRegion, HalfPrecisionAttentionTakesAnF32ScaleAndRegion) {
  const std::string head =
      R"(util.func @f(%q: tensor<?x?x?xf16>, %k: tensor<?x?x?xf16>, %v: tensor<?x?x?xf16>, %scale: f32) -> tensor<?x?x?xf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %b = tensor.dim %q, %c0 : tensor<?x?x?xf16>
  %m = tensor.dim %q, %c1 : tensor<?x?x?xf16>
  %n = tensor.dim %v, %c2 : tensor<?x?x?xf16>
  %e = tensor.empty(%b, %m, %n) : tensor<?x?x?xf16>
  %r = iree_linalg_ext.attention {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>]}
      ins(%q, %k, %v, %scale : tensor<?x?x?xf16>, tensor<?x?x?xf16>, tensor<?x?x?xf16>, f32) outs(%e : tensor<?x?x?xf16>) {
  ^bb0(%t: f32):
)";
  const std::string tail = R"(  } -> tensor<?x?x?xf16>
  util.return %r : tensor<?x?x?xf16>
}
)";
  const int64_t batch = 2, queries = 3, keys = 20, d = 16;
  auto half = [](std::vector<float> x) {
    std::vector<_Float16> h(x.begin(), x.end());
    return h;
  };
  auto q = half(oracle::randomFloats(batch * queries * d, 61, -3, 3));
  auto k = half(oracle::randomFloats(batch * keys * d, 62));
  auto v = half(oracle::randomFloats(batch * keys * d, 63));
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
  const float scale = 0.5f;
  std::vector<Arg> args{Tensor::borrow(q.data(), DType::F16, {batch, queries, d}),
                        Tensor::borrow(k.data(), DType::F16, {batch, keys, d}),
                        Tensor::borrow(v.data(), DType::F16, {batch, keys, d}), Scalar::f32(scale)};
  // The 3-D layout is attentionGqa's with one head and D = N.
  oracle::AttentionDims dims{batch, queries, keys, 1, 1, d};
  for (double cap : {0.0, 2.5}) {
    const std::string region =
        cap == 0 ? "    iree_linalg_ext.yield %t : f32\n"
                 : "    %cap = arith.constant 2.5 : f32\n    %s = arith.divf %t, %cap : f32\n"
                   "    %th = math.tanh %s : f32\n    %c = arith.mulf %th, %cap : f32\n"
                   "    iree_linalg_ext.yield %c : f32\n";
    Function fn = context().loadString(head + region + tail, "attention_f16.mlir").function("f");
    auto expected = cap == 0
                        ? oracle::attentionGqa(qf.data(), kf.data(), vf.data(), scale, dims, false)
                        : oracle::attentionGqaSoftCapped(qf.data(), kf.data(), vf.data(), scale,
                                                         dims, false, cap);
    auto other = cap != 0
                     ? oracle::attentionGqa(qf.data(), kf.data(), vf.data(), scale, dims, false)
                     : oracle::attentionGqaSoftCapped(qf.data(), kf.data(), vf.data(), scale, dims,
                                                      false, 2.5);
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      SCOPED_TRACE(
          fmt::format("cap {} {}", cap, mode == Mode::Generic ? "generic" : "specialized"));
      Tensor out = fn(args, mode)[0];
      const _Float16 *o = static_cast<const _Float16 *>(out.data());
      std::vector<float> widened(o, o + out.numel());
      auto cmp = oracle::compare(widened.data(), expected, 1e-2, 1e-2);
      EXPECT_TRUE(cmp.ok) << cmp.describe();
      EXPECT_FALSE(oracle::compare(widened.data(), other, 1e-2, 1e-2).ok);
    }
  }
}

// ---- attention_block -----------------------------------------------------------------------

struct BlockShape {
  int64_t b, s, e, h, hkv; // D = E / H; Ekv = Hkv * D
  bool bias = true;        // use_bias
};

std::string blockName(const BlockShape &s) {
  return fmt::format("b{}_s{}_e{}_h{}_hkv{}_{}", s.b, s.s, s.e, s.h, s.hkv,
                     s.bias ? "bias" : "nobias");
}

Module &blockModule() {
  static Module module = context().load(componentPath("attention/attention_block.mlir"));
  return module;
}

struct BlockData {
  BlockShape shape;
  int64_t ekv;
  std::vector<float> x, wq, wk, wv, wo, bq, bk, bv, bo;
  std::vector<int64_t> positions;
  float freqBase = 10000.0f, freqScale = 1.0f;

  explicit BlockData(const BlockShape &s, bool useBias) : shape(s) {
    ekv = s.hkv * (s.e / s.h);
    const uint64_t seed = 3 + s.b * 5 + s.s * 101 + s.e * 7 + s.h * 13 + s.hkv;
    // Weights ~ U(-1.5/sqrt(E), 1.5/sqrt(E)) keep the projections O(0.5) at every E.
    const float a = 1.5f / std::sqrt(static_cast<float>(s.e));
    x = oracle::randomFloats(s.b * s.s * s.e, seed);
    wq = oracle::randomFloats(s.e * s.e, seed + 1, -a, a);
    wk = oracle::randomFloats(s.e * ekv, seed + 2, -a, a);
    wv = oracle::randomFloats(s.e * ekv, seed + 3, -a, a);
    wo = oracle::randomFloats(s.e * s.e, seed + 4, -a, a);
    if (useBias) {
      bq = oracle::randomFloats(s.e, seed + 5, -0.5f, 0.5f);
      bk = oracle::randomFloats(ekv, seed + 6, -0.5f, 0.5f);
      bv = oracle::randomFloats(ekv, seed + 7, -0.5f, 0.5f);
      bo = oracle::randomFloats(s.e, seed + 8, -0.5f, 0.5f);
    } else {
      // Right-sized but NaN: without use_bias the block must not read them.
      const float nan = std::numeric_limits<float>::quiet_NaN();
      bq.assign(s.e, nan), bk.assign(ekv, nan), bv.assign(ekv, nan), bo.assign(s.e, nan);
    }
    // Positions differ per sequence and are not contiguous from 0: rope sees real angles.
    positions.resize(s.b * s.s);
    for (int64_t bi = 0; bi < s.b; ++bi)
      for (int64_t si = 0; si < s.s; ++si)
        positions[bi * s.s + si] = 11 * bi + 3 * si;
    if (s.e % 3 == 0)
      freqScale = 0.5f; // exercise freq_scale on some shapes
  }

  std::vector<Arg> args(bool useBias) {
    const BlockShape &s = shape;
    return {Tensor::borrow(x.data(), DType::F32, {s.b, s.s, s.e}),
            Tensor::borrow(positions.data(), DType::I64, {s.b, s.s}),
            Tensor::borrow(wq.data(), DType::F32, {s.e, s.e}),
            Tensor::borrow(wk.data(), DType::F32, {s.e, ekv}),
            Tensor::borrow(wv.data(), DType::F32, {s.e, ekv}),
            Tensor::borrow(wo.data(), DType::F32, {s.e, s.e}),
            Tensor::borrow(bq.data(), DType::F32, {static_cast<int64_t>(bq.size())}),
            Tensor::borrow(bk.data(), DType::F32, {static_cast<int64_t>(bk.size())}),
            Tensor::borrow(bv.data(), DType::F32, {static_cast<int64_t>(bv.size())}),
            Tensor::borrow(bo.data(), DType::F32, {static_cast<int64_t>(bo.size())}),
            Scalar::i1(useBias),
            Scalar::index(s.h),
            Scalar::index(s.hkv),
            Scalar::index(s.e),
            Scalar::f32(freqBase),
            Scalar::f32(freqScale)};
  }

  std::vector<double> expected(bool useBias) const {
    oracle::AttentionBlockDims dims{shape.b, shape.s, shape.e, ekv, shape.h, shape.hkv};
    return oracle::attentionBlock(x.data(), positions.data(), wq.data(), wk.data(), wv.data(),
                                  wo.data(), bq.data(), bk.data(), bv.data(), bo.data(), useBias,
                                  dims, freqBase, freqScale);
  }
};

class AttentionBlockTest : public testing::TestWithParam<std::tuple<BlockShape, Mode>> {};

TEST_P(AttentionBlockTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  const bool useBias = shape.bias;
  Function fn = blockModule().function("attention_block");
  BlockData data(shape, useBias);
  std::vector<Arg> args = data.args(useBias);
  Kernel kernel = fn.specialize(args, mode);
  GuardedOutput out({shape.b, shape.s, shape.e});
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  auto cmp = oracle::compare(out.data(), data.expected(useBias), kRtol, kAtol);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// Head dims (E / H) 4 to 128, GQA ratios 1, 2, 3, 4 and 8, one token, several sequences; half
// with biases, half without (bias and no-bias are not crossed with every shape, to keep the
// binary's compile time down: each specialized block kernel takes about a second to compile).
const BlockShape kBlockShapes[] = {
    {1, 1, 8, 2, 1, true},    {1, 1, 8, 2, 1, false},     {1, 3, 16, 4, 2, true},
    {2, 5, 32, 4, 4, false},  {1, 7, 64, 8, 2, true},     {1, 4, 128, 2, 1, false},
    {1, 6, 256, 2, 1, true},  {2, 3, 48, 3, 1, false},    {1, 9, 96, 4, 2, true},
    {1, 2, 20, 2, 2, false},  {3, 4, 64, 8, 8, true},     {1, 11, 192, 12, 4, false},
    {1, 1, 256, 4, 4, true},  {1, 16, 128, 16, 2, false}, {2, 8, 128, 1, 1, true},
    {1, 13, 72, 6, 3, false},
};

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBlockTest,
                         testing::Combine(testing::ValuesIn(kBlockShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           return fmt::format("attention_block_{}_{}",
                                              blockName(std::get<0>(info.param)),
                                              modeName(std::get<1>(info.param)));
                         });

// Without use_bias the biases' extents are not checked either (§8.6): any tensors will do.
TEST(AttentionBlock, BiasExtentsIgnoredWithoutBias) {
  Function fn = blockModule().function("attention_block");
  BlockShape shape{1, 5, 32, 4, 2};
  BlockData data(shape, /*useBias=*/false);
  std::vector<Arg> args = data.args(false);
  std::vector<float> wrong(3, std::numeric_limits<float>::quiet_NaN());
  for (int i = 6; i < 10; ++i)
    args[i] = Tensor::borrow(wrong.data(), DType::F32, {3});
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    std::vector<Tensor> result = fn(args, mode);
    ASSERT_EQ(result.size(), 1u);
    auto cmp = oracle::compare(result[0].as<float>(), data.expected(false), kRtol, kAtol);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

// n_head must split E: 16 = 3 * 5 + 1 is reported by the head split's expand_shape check.
TEST(AttentionBlock, HeadCountNotDividingEmbeddingIsAnError) {
  Function fn = blockModule().function("attention_block");
  BlockShape shape{1, 2, 16, 4, 2};
  BlockData data(shape, /*useBias=*/true);
  std::vector<Arg> args = data.args(true);
  args[11] = Scalar::index(3);
  EXPECT_THROW(fn.specialize(args), Error);
}

// n_embd restates the block's width (§8): a disagreement is reported.
TEST(AttentionBlock, EmbeddingArgumentMustAgreeWithWidth) {
  Function fn = blockModule().function("attention_block");
  BlockShape shape{1, 2, 16, 4, 2};
  BlockData data(shape, /*useBias=*/true);
  std::vector<Arg> args = data.args(true);
  args[13] =
      Scalar::index(17); // n_embd; 17 / 4 * 4 still splits q, so only the width check sees it
  EXPECT_THROW(fn.specialize(args), Error);
}

} // namespace
} // namespace frank::test
