// embedding_lookup and embedding_lookup_1d (components/embedding/embedding_lookup.mlir) against
// their oracle, over many shapes, in specialized and generic modes, with guard regions around
// every output.
//
// Tolerance (MLIR-SUBSET.md §10, exact ops): none. An embedding lookup is a copy of table rows;
// no arithmetic touches the values, so every output element must equal its table element bit
// for bit (NaN payloads, signed zeros, infinities and subnormals included). The comparison is
// on the bit patterns, not on float values.
//
// Benchmark shape S3 (weight [32000, 2048], indices [1, 128]) runs in specialized mode below:
// the lookup itself copies 128 rows; filling the 262 MB table dominates, and the whole test stays
// well under 2 s.
#include "TestSupport.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace frank::test {
namespace {

Module &embeddingModule() {
  static Module module = context().load(componentPath("embedding/embedding_lookup.mlir"));
  return module;
}

/// Token ids in [0, V): uniform, with the first and last rows of the table always present and
/// repeats whenever count > 1 and V is small.
std::vector<int64_t> randomIds(int64_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t &id : ids)
    id = dist(rng);
  if (count > 0)
    ids[0] = vocab - 1;
  if (count > 1)
    ids[count - 1] = 0;
  return ids;
}

/// Empty when `actual` equals `expected` bit for bit; otherwise the first differing element.
std::string bitDifference(const float *actual, const std::vector<float> &expected) {
  for (size_t n = 0; n < expected.size(); ++n) {
    uint32_t a, e;
    std::memcpy(&a, actual + n, 4);
    std::memcpy(&e, expected.data() + n, 4);
    if (a != e)
      return fmt::format("element {} is 0x{:08x} ({}), expected 0x{:08x} ({})", n, a, actual[n], e,
                         expected[n]);
  }
  return {};
}

/// Runs one of the two functions on `ids` (shape `idShape`) and checks the output bit for bit.
void checkLookup(const char *function, const std::vector<float> &weight, int64_t vocab,
                 int64_t embd, std::vector<int64_t> &ids, const std::vector<int64_t> &idShape,
                 Mode mode) {
  Function fn = embeddingModule().function(function);
  std::vector<Arg> args{
      Tensor::borrow(const_cast<float *>(weight.data()), DType::F32, {vocab, embd}),
      Tensor::borrow(ids.data(), DType::I64, idShape)};
  Kernel kernel = fn.specialize(args, mode);
  std::vector<int64_t> outShape = idShape;
  outShape.push_back(embd);
  ASSERT_EQ(kernel.outputShapes(args), std::vector<std::vector<int64_t>>{outShape});
  GuardedOutput out(outShape);
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  auto expected = oracle::embeddingLookup(weight.data(), vocab, embd, ids.data(),
                                          static_cast<int64_t>(ids.size()));
  EXPECT_EQ(bitDifference(out.data(), expected), "");
}

// ---- embedding_lookup: weight [V, E], indices [B, S] ---------------------------------------

struct LookupShape {
  int64_t vocab, embd, batch, seq;
};

class EmbeddingLookupTest : public testing::TestWithParam<std::tuple<LookupShape, Mode>> {};

TEST_P(EmbeddingLookupTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  const uint64_t seed = 1 + shape.vocab * 3 + shape.embd * 5 + shape.batch * 7 + shape.seq * 11;
  auto weight = oracle::randomFloats(shape.vocab * shape.embd, seed, -3, 3);
  auto ids = randomIds(shape.batch * shape.seq, shape.vocab, seed + 1);
  checkLookup("embedding_lookup", weight, shape.vocab, shape.embd, ids, {shape.batch, shape.seq},
              mode);
}

// Ones everywhere, primes, sizes that are not multiples of 8 or 16, one token and many tokens,
// a vocabulary of one row (every id 0) and small vocabularies (many repeats), wide rows.
const LookupShape kLookupShapes[] = {
    {1, 1, 1, 1},      {1, 5, 2, 3},      {2, 1, 1, 7},     {7, 3, 2, 5},      {13, 8, 1, 1},
    {31, 17, 3, 7},    {100, 64, 2, 16},  {50, 127, 1, 33}, {257, 128, 4, 9},  {1000, 15, 5, 3},
    {11, 4096, 1, 2},  {1024, 33, 8, 64}, {3, 1000, 2, 11}, {97, 255, 1, 128}, {500, 2048, 1, 32},
    {4099, 7, 3, 100}, {61, 129, 7, 1},   {8, 16, 16, 8},
};

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingLookupTest,
                         testing::Combine(testing::ValuesIn(kLookupShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const LookupShape &s = std::get<0>(info.param);
                           return fmt::format("embedding_lookup_v{}_e{}_b{}_s{}_{}", s.vocab,
                                              s.embd, s.batch, s.seq,
                                              modeName(std::get<1>(info.param)));
                         });

// ---- embedding_lookup_1d: weight [V, E], indices [B] ---------------------------------------

struct Lookup1dShape {
  int64_t vocab, embd, batch;
};

class EmbeddingLookup1dTest : public testing::TestWithParam<std::tuple<Lookup1dShape, Mode>> {};

TEST_P(EmbeddingLookup1dTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  const uint64_t seed = 3 + shape.vocab * 13 + shape.embd * 7 + shape.batch * 5;
  auto weight = oracle::randomFloats(shape.vocab * shape.embd, seed, -3, 3);
  auto ids = randomIds(shape.batch, shape.vocab, seed + 1);
  checkLookup("embedding_lookup_1d", weight, shape.vocab, shape.embd, ids, {shape.batch}, mode);
}

const Lookup1dShape kLookup1dShapes[] = {
    {1, 1, 1},       {2, 3, 1},      {7, 5, 3},     {13, 16, 17}, {31, 64, 2},    {100, 127, 31},
    {257, 128, 64},  {1000, 1, 9},   {17, 4096, 3}, {3, 1023, 5}, {4099, 8, 128}, {64, 129, 1},
    {500, 255, 256}, {11, 2048, 33}, {5, 9, 1000},  {1, 24, 4},
};

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingLookup1dTest,
                         testing::Combine(testing::ValuesIn(kLookup1dShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const Lookup1dShape &s = std::get<0>(info.param);
                           return fmt::format("embedding_lookup_1d_v{}_e{}_b{}_{}", s.vocab, s.embd,
                                              s.batch, modeName(std::get<1>(info.param)));
                         });

// ---- special values and the benchmark shape ------------------------------------------------

float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rows full of values that an arithmetic path would change: NaNs with payloads (quiet and
// signalling), -0, infinities, subnormals, the extremes. A copy keeps every bit.
TEST(EmbeddingSpecialValues, CopiedBitForBit) {
  const std::vector<uint32_t> patterns{
      0x80000000u, // -0
      0x7f800000u, // +inf
      0xff800000u, // -inf
      0x7fc00001u, // quiet NaN with a payload
      0xffc12345u, // negative quiet NaN with a payload
      0x7f800001u, // signalling NaN
      0x00000001u, // smallest subnormal
      0x807fffffu, // largest negative subnormal
      0x7f7fffffu, // FLT_MAX
      0x00800000u, // FLT_MIN
      0x3f800000u, // 1
      0x00000000u, // +0
  };
  const int64_t vocab = 5, embd = static_cast<int64_t>(patterns.size()) + 5;
  std::vector<float> weight(static_cast<size_t>(vocab * embd));
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t e = 0; e < embd; ++e)
      weight[v * embd + e] = fromBits(patterns[(v * 7 + e) % patterns.size()]);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    std::vector<int64_t> ids2{4, 0, 2, 2, 1, 3};
    checkLookup("embedding_lookup", weight, vocab, embd, ids2, {2, 3}, mode);
    std::vector<int64_t> ids1{3, 1, 4, 0, 0};
    checkLookup("embedding_lookup_1d", weight, vocab, embd, ids1, {5}, mode);
  }
}

// A tall, narrow table (2^20 rows of 3): the first, middle and last rows, each row holding
// distinct exact integers, so a wrong row offset shows in the copied values.
TEST(EmbeddingIndices, LastRowsOfATallTable) {
  const int64_t vocab = 1 << 20, embd = 3;
  std::vector<float> weight(static_cast<size_t>(vocab * embd));
  for (int64_t n = 0; n < vocab * embd; ++n)
    weight[n] = static_cast<float>(n % 16777216); // exact integers, distinct per row
  std::vector<int64_t> ids{vocab - 1, vocab - 2, 0, vocab / 2, 1, vocab - 1};
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    checkLookup("embedding_lookup", weight, vocab, embd, ids, {3, 2}, mode);
    checkLookup("embedding_lookup_1d", weight, vocab, embd, ids, {6}, mode);
  }
}

// Indices outside [0, V) are caught by the run-time bounds check (on by default) in both modes,
// and reported as an error naming the gather, never read.
TEST(EmbeddingIndices, OutOfRangeIsAnError) {
  std::vector<float> weight(3 * 4, 1.0f);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    for (int64_t bad : {int64_t{3}, int64_t{-1}, int64_t{1} << 40}) {
      std::vector<int64_t> ids{0, bad};
      Tensor w = Tensor::borrow(weight.data(), DType::F32, {3, 4});
      EXPECT_THROW(embeddingModule().function("embedding_lookup_1d")(
                       {w, Tensor::borrow(ids.data(), DType::I64, {2})}, mode),
                   Error)
          << "index " << bad;
      EXPECT_THROW(embeddingModule().function("embedding_lookup")(
                       {w, Tensor::borrow(ids.data(), DType::I64, {1, 2})}, mode),
                   Error)
          << "index " << bad;
    }
  }
}

// S3: weight [32000, 2048] (Llama vocabulary, 262 MB), indices [1, 128]; specialized mode.
// The table is filled with a cheap hash (distinct, finite bit patterns) rather than the
// Mersenne twister, which would take most of a second for 65M values.
TEST(EmbeddingBenchmarkShape, S3Specialized) {
  const int64_t vocab = 32000, embd = 2048;
  std::vector<float> weight(static_cast<size_t>(vocab * embd));
  for (int64_t n = 0; n < vocab * embd; ++n) {
    uint32_t h = static_cast<uint32_t>(n) * 2654435761u;
    h ^= h >> 15;
    // Keep the exponent field away from all-ones: finite values only.
    weight[n] = fromBits((h & 0x3fffffffu) | (h & 0x80000000u));
  }
  auto ids = randomIds(128, vocab, 2024);
  checkLookup("embedding_lookup", weight, vocab, embd, ids, {1, 128}, Mode::Specialized);
}

} // namespace
} // namespace frank::test
