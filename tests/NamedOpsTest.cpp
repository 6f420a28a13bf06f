// The named ops (generalized to linalg.generic), views, slices, dense constants, scf.if on
// flags and topk: each against plain loops, in both modes, at odd sizes.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace frank::test {
namespace {

using testing::HasSubstr;

std::vector<float> values(int64_t n, uint64_t seed) { return oracle::randomFloats(n, seed, -2, 2); }

Tensor borrow(std::vector<float> &v, std::vector<int64_t> shape) {
  return Tensor::borrow(v.data(), DType::F32, std::move(shape));
}

// Runs @f in both modes; checks result 0 against `expected` (f32, matmul-like tolerance:
// MLIR-SUBSET.md §10 gives rtol 1e-4 / atol 1e-5 for contractions and attention).
void expectBoth(const std::string &text, const std::vector<Arg> &args,
                const std::vector<double> &expected, double rtol = 1e-5, double atol = 1e-6) {
  Function fn = context().loadString(text, "ops.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(mode == Mode::Specialized ? "specialized" : "generic");
    Tensor y = fn(args, mode)[0];
    ASSERT_EQ(y.numel(), static_cast<int64_t>(expected.size()));
    auto cmp = oracle::compare(y.as<float>(), expected, rtol, atol);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

// c + a·b over [m, k] x [k, n], in double; a stored [k, m] with `transposeA`, b [n, k] with
// `transposeB`.
std::vector<double> matmulOracle(const std::vector<float> &a, const std::vector<float> &b,
                                 const std::vector<float> &c, int64_t m, int64_t k, int64_t n,
                                 bool transposeA = false, bool transposeB = false) {
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = c[i * n + j];
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(transposeA ? a[p * m + i] : a[i * k + p]) *
               (transposeB ? b[j * k + p] : b[p * n + j]);
      out[i * n + j] = sum;
    }
  return out;
}

TEST(NamedOps, MatmulAccumulatesIntoOuts) {
  const char *text = R"(
    func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t m = 7, k = 13, n = 5;
  auto a = values(m * k, 1), b = values(k * n, 2), c = values(m * n, 3);
  expectBoth(text, {borrow(a, {m, k}), borrow(b, {k, n}), borrow(c, {m, n})},
             matmulOracle(a, b, c, m, k, n), 1e-4, 1e-5);
}

// Upstream's explicit maps on the named contractions: B transposed ([n, k], as a linear layer
// stores it), A transposed, and a batch matmul with B transposed, each at odd sizes.
TEST(NamedOps, MatmulIndexingMapsTransposeTheOperands) {
  const int64_t m = 7, k = 13, n = 5, batch = 3;
  struct Case {
    const char *name, *maps;
    bool transposeA, transposeB;
  };
  const Case cases[] = {
      {"b transposed",
       "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, "
       "affine_map<(d0, d1, d2) -> (d0, d1)>]",
       false, true},
      {"a transposed",
       "[affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, "
       "affine_map<(d0, d1, d2) -> (d0, d1)>]",
       true, false}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::string text = fmt::format(R"(
    func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {{
      %r = linalg.matmul indexing_maps = {} ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    }})",
                                   c.maps);
    auto a = values(m * k, 4), b = values(k * n, 5), acc = values(m * n, 6);
    std::vector<double> expected = matmulOracle(a, b, acc, m, k, n, c.transposeA, c.transposeB);
    expectBoth(text,
               {borrow(a, c.transposeA ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}),
                borrow(b, c.transposeB ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}),
                borrow(acc, {m, n})},
               expected, 1e-4, 1e-5);
    // The maps print back as they were written.
    std::string printed = context().loadString(text, "mm_maps.mlir").print();
    EXPECT_THAT(printed, HasSubstr(fmt::format("linalg.matmul indexing_maps = {} ins(", c.maps)));
  }
  const char *batched = R"(
    func.func @f(%a: tensor<?x?x?xf32>, %b: tensor<?x?x?xf32>, %c: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
      %r = linalg.batch_matmul indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]
          ins(%a, %b : tensor<?x?x?xf32>, tensor<?x?x?xf32>) outs(%c : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
      return %r : tensor<?x?x?xf32>
    })";
  auto a = values(batch * m * k, 7), b = values(batch * n * k, 8), acc = values(batch * m * n, 9);
  std::vector<double> expected(batch * m * n);
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = acc[(q * m + i) * n + j];
        for (int64_t p = 0; p < k; ++p)
          sum += static_cast<double>(a[(q * m + i) * k + p]) * b[(q * n + j) * k + p];
        expected[(q * m + i) * n + j] = sum;
      }
  expectBoth(batched,
             {Tensor::borrow(a.data(), DType::F32, {batch, m, k}),
              Tensor::borrow(b.data(), DType::F32, {batch, n, k}),
              Tensor::borrow(acc.data(), DType::F32, {batch, m, n})},
             expected, 1e-4, 1e-5);
}

// A and B both transposed: contraction.dot cannot read A along k, and plain loops took 2.55 s at
// 128x4096x4096; B packs transposed for the outer tile instead, in both modes' results, for 3
// rows or more (one row is a dot product along k, and two run as fast in plain loops).
TEST(NamedOps, BothOperandsTransposedTakeThePackedTile) {
  const int64_t k = 300, n = 48;
  const std::string text = R"(
    func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  for (int64_t m : {1, 2, 3, 7, 48}) {
    SCOPED_TRACE(m);
    auto a = values(k * m, 10), b = values(n * k, 11), acc = values(m * n, 12);
    expectBoth(text, {borrow(a, {k, m}), borrow(b, {n, k}), borrow(acc, {m, n})},
               matmulOracle(a, b, acc, m, k, n, true, true), 1e-4, 1e-5);
    if (m < 3)
      continue;
    std::string loops =
        context()
            .loadString(text, "both_transposed.mlir")
            .function("f")
            .emit(Stage::Loops, {fmt::format("{}x{}xf32", k, m), fmt::format("{}x{}xf32", n, k),
                                 fmt::format("{}x{}xf32", m, n)});
    EXPECT_THAT(loops, HasSubstr("pack=#1^T")) << loops;
  }
}

// `%name = 2 * %x`, elementwise over a 2-D %x, in place: an intermediate tensor.
std::string doubled(const char *name) {
  return fmt::format(R"(
      %{} = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                           iterator_types = ["parallel", "parallel"]}}
          ins(%x : tensor<?x?xf32>) outs(%x : tensor<?x?xf32>) {{
      ^bb0(%a: f32, %o: f32):
        %t = arith.addf %a, %a : f32
        linalg.yield %t : f32
      }} -> tensor<?x?xf32>)",
                     name);
}

// h + h·W with h computed in the function: the matmul accumulates into the tensor it also
// reads as its left operand, so it cannot write there in place (it had read rows it had
// already overwritten: 28 for 16 at 3x3).
TEST(NamedOps, MatmulIntoItsOwnOperandKeepsTheOperand) {
  const std::string text =
      "func.func @f(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>) -> tensor<?x?xf32> {" + doubled("h") +
      R"(
      %r = linalg.matmul ins(%h, %w : tensor<?x?xf32>, tensor<?x?xf32>) outs(%h : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  for (int64_t n : {3, 17, 33}) {
    SCOPED_TRACE(n);
    auto x = values(n * n, 4), w = values(n * n, 5);
    std::vector<double> expected(n * n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 2.0 * x[i * n + j];
        for (int64_t p = 0; p < n; ++p)
          s += 2.0 * x[i * n + p] * w[p * n + j];
        expected[i * n + j] = s;
      }
    expectBoth(text, {borrow(x, {n, n}), borrow(w, {n, n})}, expected, 1e-4, 1e-5);
  }
}

// y + yᵀ and a transpose of y into y itself: reads through another map than the write's.
TEST(NamedOps, TransposedReadsOfTheOutputsOwnTensor) {
  const std::string text =
      "func.func @f(%x: tensor<?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {" + doubled("y") +
      R"(
      %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%y, %y : tensor<?x?xf32>, tensor<?x?xf32>) outs(%y : tensor<?x?xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %t = arith.addf %a, %b : f32
        linalg.yield %t : f32
      } -> tensor<?x?xf32>)" +
      doubled("z") + R"(
      %t = linalg.transpose ins(%z : tensor<?x?xf32>) outs(%z : tensor<?x?xf32>) permutation = [1, 0]
      return %s, %t : tensor<?x?xf32>, tensor<?x?xf32>
    })";
  const int64_t n = 17;
  auto x = values(n * n, 6);
  Function fn = context().loadString(text, "ops.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(mode == Mode::Specialized ? "specialized" : "generic");
    std::vector<Tensor> r = fn({borrow(x, {n, n})}, mode);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(r[0].as<float>()[i * n + j], 2 * x[i * n + j] + 2 * x[j * n + i])
            << i << "," << j;
        ASSERT_EQ(r[1].as<float>()[i * n + j], 2 * x[j * n + i]) << i << "," << j;
      }
  }
}

// tensor.concat along a middle and an outer dim, of operands with static and runtime extents,
// in both modes and with the joined extent a runtime dim.
TEST(NamedOps, ConcatJoinsAlongAnyDim) {
  const char *text = R"(
    func.func @f(%a: tensor<?x?x3xf32>, %b: tensor<?x2x3xf32>, %c: tensor<?x?x?xf32>) -> (tensor<?x?x3xf32>, tensor<?x?x3xf32>) {
      %mid = tensor.concat dim(1) %a, %b, %c : (tensor<?x?x3xf32>, tensor<?x2x3xf32>, tensor<?x?x?xf32>) -> tensor<?x?x3xf32>
      %outer = tensor.concat dim(0) %mid, %mid : (tensor<?x?x3xf32>, tensor<?x?x3xf32>) -> tensor<?x?x3xf32>
      return %mid, %outer : tensor<?x?x3xf32>, tensor<?x?x3xf32>
    })";
  const int64_t n = 2, la = 5, lb = 2, lc = 4, l = la + lb + lc;
  auto a = values(n * la * 3, 7), b = values(n * lb * 3, 8), c = values(n * lc * 3, 9);
  std::vector<float> mid(n * l * 3);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < l; ++j)
      for (int64_t k = 0; k < 3; ++k)
        mid[(i * l + j) * 3 + k] = j < la        ? a[(i * la + j) * 3 + k]
                                   : j < la + lb ? b[(i * lb + j - la) * 3 + k]
                                                 : c[(i * lc + j - la - lb) * 3 + k];
  Function fn = context().loadString(text, "ops.mlir").function("f");
  std::vector<Arg> args{borrow(a, {n, la, 3}), borrow(b, {n, lb, 3}), borrow(c, {n, lc, 3})};
  for (Function f : {fn, fn.withRuntimeDims({{"a", 1}, {"c", 1}})})
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      SCOPED_TRACE(mode == Mode::Specialized ? "specialized" : "generic");
      std::vector<Tensor> r = f(args, mode);
      ASSERT_EQ(r[0].shape(), (std::vector<int64_t>{n, l, 3}));
      ASSERT_EQ(r[1].shape(), (std::vector<int64_t>{2 * n, l, 3}));
      for (size_t i = 0; i < mid.size(); ++i) {
        ASSERT_EQ(r[0].as<float>()[i], mid[i]) << i;
        ASSERT_EQ(r[1].as<float>()[i], mid[i]) << i;
        ASSERT_EQ(r[1].as<float>()[mid.size() + i], mid[i]) << i;
      }
    }
}

TEST(NamedOps, BatchMatmulAsBatchedMatVec) {
  const char *text = R"(
    func.func @f(%a: tensor<?x?x?xf32>, %b: tensor<?x?x1xf32>) -> tensor<?x?x1xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %t = tensor.dim %a, %c0 : tensor<?x?x?xf32>
      %m = tensor.dim %a, %c1 : tensor<?x?x?xf32>
      %z = arith.constant 0.0 : f32
      %e = tensor.empty(%t, %m) : tensor<?x?x1xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
      %r = linalg.batch_matmul ins(%a, %b : tensor<?x?x?xf32>, tensor<?x?x1xf32>) outs(%f : tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
      return %r : tensor<?x?x1xf32>
    })";
  const int64_t t = 3, m = 11, k = 17;
  auto a = values(t * m * k, 4), b = values(t * k, 5);
  std::vector<double> expected(t * m, 0);
  for (int64_t bt = 0; bt < t; ++bt)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        expected[bt * m + i] += static_cast<double>(a[(bt * m + i) * k + p]) * b[bt * k + p];
  expectBoth(text, {borrow(a, {t, m, k}), borrow(b, {t, k, 1})}, expected, 1e-4, 1e-5);
}

TEST(NamedOps, TransposeBroadcastReduce) {
  // r[j] = sum_i transpose(x)[j, i] + broadcast(w)[j, i], for x [m, n] and w [n].
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %w: tensor<?xf32>) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xf32>
      %n = tensor.dim %x, %c1 : tensor<?x?xf32>
      %te = tensor.empty(%n, %m) : tensor<?x?xf32>
      %t = linalg.transpose ins(%x : tensor<?x?xf32>) outs(%te : tensor<?x?xf32>) permutation = [1, 0]
      %be = tensor.empty(%n, %m) : tensor<?x?xf32>
      %b = linalg.broadcast ins(%w : tensor<?xf32>) outs(%be : tensor<?x?xf32>) dimensions = [1]
      %se = tensor.empty(%n, %m) : tensor<?x?xf32>
      %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%t, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%se : tensor<?x?xf32>) {
      ^bb0(%p: f32, %q: f32, %o: f32):
        %v = arith.addf %p, %q : f32
        linalg.yield %v : f32
      } -> tensor<?x?xf32>
      %z = arith.constant 0.0 : f32
      %re = tensor.empty(%n) : tensor<?xf32>
      %ri = linalg.fill ins(%z : f32) outs(%re : tensor<?xf32>) -> tensor<?xf32>
      %r = linalg.reduce ins(%s : tensor<?x?xf32>) outs(%ri : tensor<?xf32>) dimensions = [1] (%in: f32, %acc: f32) {
        %v = arith.addf %acc, %in : f32
        linalg.yield %v : f32
      }
      return %r : tensor<?xf32>
    })";
  const int64_t m = 9, n = 14;
  auto x = values(m * n, 6), w = values(n, 7);
  std::vector<double> expected(n, 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i)
      expected[j] += static_cast<double>(x[i * n + j]) + w[j];
  expectBoth(text, {borrow(x, {m, n}), borrow(w, {n})}, expected);
}

class SoftmaxTest : public testing::TestWithParam<int> {};

TEST_P(SoftmaxTest, AlongEveryDim) {
  int dim = GetParam();
  std::string text = fmt::format(R"(
    func.func @f(%x: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %a = tensor.dim %x, %c0 : tensor<?x?x?xf32>
      %b = tensor.dim %x, %c1 : tensor<?x?x?xf32>
      %c = tensor.dim %x, %c2 : tensor<?x?x?xf32>
      %e = tensor.empty(%a, %b, %c) : tensor<?x?x?xf32>
      %r = linalg.softmax dimension({}) ins(%x : tensor<?x?x?xf32>) outs(%e : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
      return %r : tensor<?x?x?xf32>
    }})",
                                 dim);
  const int64_t shape[3] = {3, 5, 7};
  auto x = oracle::randomFloats(3 * 5 * 7, 8, -20, 20);
  std::vector<double> expected(x.size());
  int64_t strides[3] = {35, 7, 1};
  for (int64_t i = 0; i < 105; ++i) {
    int64_t pos = (i / strides[dim]) % shape[dim];
    int64_t base = i - pos * strides[dim];
    double mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < shape[dim]; ++k)
      mx = std::max(mx, static_cast<double>(x[base + k * strides[dim]]));
    for (int64_t k = 0; k < shape[dim]; ++k)
      sum += std::exp(x[base + k * strides[dim]] - mx);
    expected[i] = std::exp(x[i] - mx) / sum;
  }
  expectBoth(text, {borrow(x, {3, 5, 7})}, expected, 1e-5, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Dims, SoftmaxTest, testing::Values(0, 1, 2));

TEST(NamedOps, GatherRowsWithI32AndI64Indices) {
  for (const char *type : {"i32", "i64"}) {
    SCOPED_TRACE(type);
    std::string text = fmt::format(R"(
      func.func @f(%w: tensor<?x?xf32>, %idx: tensor<?x{0}>) -> tensor<?x?xf32> {{
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %n = tensor.dim %idx, %c0 : tensor<?x{0}>
        %e = tensor.dim %w, %c1 : tensor<?x?xf32>
        %init = tensor.empty(%n, %e) : tensor<?x?xf32>
        %g = iree_linalg_ext.gather dimension_map = [0] ins(%w, %idx : tensor<?x?xf32>, tensor<?x{0}>) outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
        return %g : tensor<?x?xf32>
      }})",
                                   type);
    const int64_t v = 11, e = 9;
    auto w = values(v * e, 9);
    std::vector<int64_t> rows{3, 0, 10, 3, 7};
    std::vector<int32_t> rows32(rows.begin(), rows.end());
    Tensor idx = std::string(type) == "i32" ? Tensor::borrow(rows32.data(), DType::I32, {5})
                                            : Tensor::borrow(rows.data(), DType::I64, {5});
    std::vector<double> expected;
    for (int64_t r : rows)
      for (int64_t c = 0; c < e; ++c)
        expected.push_back(w[r * e + c]);
    expectBoth(text, {borrow(w, {v, e}), idx}, expected, 0, 0); // an exact copy
  }
}

struct TopKCase {
  const char *predicate;
  int64_t k;
};

class TopKTest : public testing::TestWithParam<TopKCase> {};

TEST_P(TopKTest, BestFirstTiesToLowerIndex) {
  auto [pred, k] = GetParam();
  std::string text = fmt::format(R"(
    func.func @f(%x: tensor<?x?xf32>) -> (tensor<{0}x?xf32>, tensor<{0}x?xi32>) {{
      %c1 = arith.constant 1 : index
      %t = tensor.dim %x, %c1 : tensor<?x?xf32>
      %v0 = tensor.empty(%t) : tensor<{0}x?xf32>
      %i0 = tensor.empty(%t) : tensor<{0}x?xi32>
      %v, %i = iree_linalg_ext.topk dimension(0) ins(%x : tensor<?x?xf32>) outs(%v0, %i0 : tensor<{0}x?xf32>, tensor<{0}x?xi32>) {{
      ^bb0(%l: f32, %r: f32):
        %c = arith.cmpf {1}, %l, %r : f32
        iree_linalg_ext.yield %c : i1
      }} -> tensor<{0}x?xf32>, tensor<{0}x?xi32>
      return %v, %i : tensor<{0}x?xf32>, tensor<{0}x?xi32>
    }})",
                                 k, pred);
  const int64_t n = 8, t = 13;
  // Values on a coarse grid so that ties are common.
  std::vector<float> x(n * t);
  for (int64_t i = 0; i < n * t; ++i)
    x[i] = static_cast<float>((i * 7919) % 5) - 2.f;
  bool largest = std::string(pred) == "ogt";
  Function fn = context().loadString(text, "topk.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    auto r = fn({borrow(x, {n, t})}, mode);
    for (int64_t col = 0; col < t; ++col) {
      std::vector<int64_t> order(n);
      for (int64_t i = 0; i < n; ++i)
        order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? x[a * t + col] > x[b * t + col] : x[a * t + col] < x[b * t + col];
      });
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(r[1].as<int32_t>()[j * t + col], order[j]) << "column " << col << " rank " << j;
        EXPECT_EQ(r[0].as<float>()[j * t + col], x[order[j] * t + col]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, TopKTest,
                         testing::Values(TopKCase{"ogt", 1}, TopKCase{"ogt", 2}, TopKCase{"ogt", 4},
                                         TopKCase{"olt", 3}, TopKCase{"ogt", 8}),
                         [](const auto &info) {
                           return fmt::format("{}_k{}", info.param.predicate, info.param.k);
                         });

// Any pure body is an order (§4.6): the swapped `olt`, a comparison of magnitudes, `ugt`, and
// a comparison of negations (each had been `unsupported`). Ties, which the body now decides
// (neither ranks before the other), go to the lower index.
TEST(NamedOps, TopKTakesAnyComparatorBody) {
  struct Order {
    const char *body;
    std::function<bool(float, float)> before;
  };
  const std::vector<Order> orders = {
      {"%c = arith.cmpf olt, %r, %l : f32", [](float l, float r) { return r < l; }},
      {"%a = math.absf %l : f32\n %b = math.absf %r : f32\n %c = arith.cmpf ogt, %a, %b : f32",
       [](float l, float r) { return std::fabs(l) > std::fabs(r); }},
      {"%c = arith.cmpf ugt, %l, %r : f32", [](float l, float r) { return l > r; }},
      {"%a = arith.negf %l : f32\n %b = arith.negf %r : f32\n %c = arith.cmpf olt, %a, %b : f32",
       [](float l, float r) { return -l < -r; }},
      // Non-strict: a ranks before b where b does not rank before a (it had picked one element K
      // times).
      {"%c = arith.cmpf oge, %l, %r : f32", [](float l, float r) { return l > r; }},
  };
  const int64_t rows = 5, n = 11, k = 4;
  // Values on a coarse grid of both signs, so that ties (of magnitude too) are common.
  std::vector<float> x(rows * n);
  for (int64_t i = 0; i < rows * n; ++i)
    x[i] = static_cast<float>((i * 7919) % 7) - 3.f;
  for (const Order &order : orders) {
    SCOPED_TRACE(order.body);
    std::string text = fmt::format(R"(
      func.func @f(%x: tensor<?x?xf32>) -> (tensor<?x{0}xf32>, tensor<?x{0}xi32>) {{
        %c0 = arith.constant 0 : index
        %rows = tensor.dim %x, %c0 : tensor<?x?xf32>
        %v0 = tensor.empty(%rows) : tensor<?x{0}xf32>
        %i0 = tensor.empty(%rows) : tensor<?x{0}xi32>
        %v, %i = iree_linalg_ext.topk dimension(1) ins(%x : tensor<?x?xf32>) outs(%v0, %i0 : tensor<?x{0}xf32>, tensor<?x{0}xi32>) {{
        ^bb0(%l: f32, %r: f32):
          {1}
          iree_linalg_ext.yield %c : i1
        }} -> tensor<?x{0}xf32>, tensor<?x{0}xi32>
        return %v, %i : tensor<?x{0}xf32>, tensor<?x{0}xi32>
      }})",
                                   k, order.body);
    Function fn = context().loadString(text, "topk.mlir").function("f");
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      SCOPED_TRACE(modeName(mode));
      auto r = fn({borrow(x, {rows, n})}, mode);
      for (int64_t row = 0; row < rows; ++row) {
        std::vector<int64_t> ranked(n);
        for (int64_t i = 0; i < n; ++i)
          ranked[i] = i;
        std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) {
          return order.before(x[row * n + a], x[row * n + b]);
        });
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(r[1].as<int32_t>()[row * k + j], ranked[j]) << "row " << row << " rank " << j;
          EXPECT_EQ(r[0].as<float>()[row * k + j], x[row * n + ranked[j]]);
        }
      }
    }
  }
}

// Integer inputs with `cmpi` (their starting values had been float infinities, which crashed
// the code generator), and NaN with the plain `ogt`: it ranks after every number, so all K
// picks are input elements (a NaN had never been picked, leaving index -1 and -inf).
TEST(NamedOps, TopKOfIntegersAndOfNaN) {
  const char *text = R"(
    func.func @f(%x: tensor<?xi32>, %y: tensor<?xf32>, %k: index) -> (tensor<?xi32>, tensor<?xi32>, tensor<?xf32>, tensor<?xi32>) {
      %v0 = tensor.empty(%k) : tensor<?xi32>
      %i0 = tensor.empty(%k) : tensor<?xi32>
      %v, %i = iree_linalg_ext.topk dimension(0) ins(%x : tensor<?xi32>) outs(%v0, %i0 : tensor<?xi32>, tensor<?xi32>) {
      ^bb0(%l: i32, %r: i32):
        %c = arith.cmpi sgt, %l, %r : i32
        iree_linalg_ext.yield %c : i1
      } -> tensor<?xi32>, tensor<?xi32>
      %w0 = tensor.empty(%k) : tensor<?xf32>
      %j0 = tensor.empty(%k) : tensor<?xi32>
      %w, %j = iree_linalg_ext.topk dimension(0) ins(%y : tensor<?xf32>) outs(%w0, %j0 : tensor<?xf32>, tensor<?xi32>) {
      ^bb0(%l: f32, %r: f32):
        %c = arith.cmpf ogt, %l, %r : f32
        iree_linalg_ext.yield %c : i1
      } -> tensor<?xf32>, tensor<?xi32>
      return %v, %i, %w, %j : tensor<?xi32>, tensor<?xi32>, tensor<?xf32>, tensor<?xi32>
    })";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> x = {3, -1, 4, -1, 5, -9, 2, 6, 5, 3};
  std::vector<float> y = {1, nan, 2, nan, -3, 0, 0, 0, 0, 0};
  Function fn = context().loadString(text, "topk.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    auto r =
        fn({Tensor::borrow(x.data(), DType::I32, {10}), borrow(y, {10}), Scalar::index(10)}, mode);
    auto ints = [](const Tensor &t) {
      return std::vector<int32_t>(t.as<int32_t>(), t.as<int32_t>() + t.numel());
    };
    EXPECT_EQ(ints(r[0]), (std::vector<int32_t>{6, 5, 5, 4, 3, 3, 2, -1, -1, -9}));
    EXPECT_EQ(ints(r[1]), (std::vector<int32_t>{7, 4, 8, 2, 0, 9, 6, 1, 3, 5}));
    // Numbers best first, then the NaNs by index.
    EXPECT_EQ(ints(r[3]), (std::vector<int32_t>{2, 0, 5, 6, 7, 8, 9, 4, 1, 3}));
    for (int64_t i = 0; i < 10; ++i) {
      const float got = r[2].as<float>()[i], want = y[size_t(r[3].as<int32_t>()[i])];
      EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << i;
    }
  }
}

// A comparator body runs on input elements only: one dividing by its arguments had divided by
// a placeholder 0 (an error no input causes).
TEST(NamedOps, TopKBodiesRunOnElementsOnly) {
  const char *text = R"(
    func.func @f(%x: tensor<?xi32>, %k: index) -> (tensor<?xi32>, tensor<?xi32>) {
      %v0 = tensor.empty(%k) : tensor<?xi32>
      %i0 = tensor.empty(%k) : tensor<?xi32>
      %v, %i = iree_linalg_ext.topk dimension(0) ins(%x : tensor<?xi32>) outs(%v0, %i0 : tensor<?xi32>, tensor<?xi32>) {
      ^bb0(%l: i32, %r: i32):
        %hundred = arith.constant 100 : i32
        %a = arith.divsi %hundred, %l : i32
        %b = arith.divsi %hundred, %r : i32
        %c = arith.cmpi sgt, %a, %b : i32
        iree_linalg_ext.yield %c : i1
      } -> tensor<?xi32>, tensor<?xi32>
      return %v, %i : tensor<?xi32>, tensor<?xi32>
    })";
  std::vector<int32_t> x = {3, 1, 7, -2, 50};
  Function fn = context().loadString(text, "topk.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    auto r = fn({Tensor::borrow(x.data(), DType::I32, {5}), Scalar::index(3)}, mode);
    EXPECT_EQ(std::vector<int32_t>(r[0].as<int32_t>(), r[0].as<int32_t>() + 3),
              (std::vector<int32_t>{1, 3, 7}));
    EXPECT_EQ(std::vector<int32_t>(r[1].as<int32_t>(), r[1].as<int32_t>() + 3),
              (std::vector<int32_t>{1, 0, 2}));
  }
}

TEST(NamedOps, TopKLargerThanTheSliceIsAnError) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>) -> (tensor<4xf32>, tensor<4xi32>) {
      %v0 = tensor.empty() : tensor<4xf32>
      %i0 = tensor.empty() : tensor<4xi32>
      %v, %i = iree_linalg_ext.topk dimension(0) ins(%x : tensor<?xf32>) outs(%v0, %i0 : tensor<4xf32>, tensor<4xi32>) {
      ^bb0(%l: f32, %r: f32):
        %c = arith.cmpf ogt, %l, %r : f32
        iree_linalg_ext.yield %c : i1
      } -> tensor<4xf32>, tensor<4xi32>
      return %v, %i : tensor<4xf32>, tensor<4xi32>
    })";
  std::vector<float> x(3);
  Function fn = context().loadString(text, "topk.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    EXPECT_THAT([&] { fn({borrow(x, {3})}, mode); },
                testing::ThrowsMessage<Error>(HasSubstr("topk selects 4 of only 3 elements")));
}

// The value and index outputs must select the same K, and span the input's other dims: index
// outputs one wider had been filled with indices of nothing.
TEST(NamedOps, TopKOutputsMustAgree) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %kv: index, %ki: index, %rows: index) -> (tensor<?x?xf32>, tensor<?x?xi32>) {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?x?xf32>
      %v0 = tensor.empty(%n, %kv) : tensor<?x?xf32>
      %i0 = tensor.empty(%rows, %ki) : tensor<?x?xi32>
      %v, %i = iree_linalg_ext.topk dimension(1) ins(%x : tensor<?x?xf32>) outs(%v0, %i0 : tensor<?x?xf32>, tensor<?x?xi32>) {
      ^bb0(%l: f32, %r: f32):
        %c = arith.cmpf ogt, %l, %r : f32
        iree_linalg_ext.yield %c : i1
      } -> tensor<?x?xf32>, tensor<?x?xi32>
      return %v, %i : tensor<?x?xf32>, tensor<?x?xi32>
    })";
  std::vector<float> x = {1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0, 9, 0, 9, 0};
  Function fn = context().loadString(text, "topk.mlir").function("f");
  auto call = [&](int64_t kv, int64_t ki, int64_t rows, Mode mode) {
    return fn({borrow(x, {3, 5}), Scalar::index(kv), Scalar::index(ki), Scalar::index(rows)}, mode);
  };
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    EXPECT_THAT([&] { call(3, 4, 3, mode); },
                testing::ThrowsMessage<Error>(
                    HasSubstr("topk.mlir:7:7: error: topk's index output has 4 elements along "
                              "dim 1 but its value output has 3")));
    EXPECT_THAT([&] { call(3, 3, 2, mode); }, testing::ThrowsMessage<Error>(HasSubstr(
                                                  "topk output dim 0 is 2 but the input's is 3")));
    std::vector<Tensor> r = call(2, 2, 3, mode);
    EXPECT_EQ(std::vector<int32_t>(r[1].as<int32_t>(), r[1].as<int32_t>() + 6),
              (std::vector<int32_t>{4, 3, 0, 1, 1, 3}));
  }
}

struct AttentionCase {
  const char *mask; // "", "i1" or "f32"
};

class AttentionOpTest : public testing::TestWithParam<std::string> {};

TEST_P(AttentionOpTest, MatchesSoftmaxOfScaledScores) {
  std::string mask = GetParam();
  std::string maskArg = mask.empty() ? "" : fmt::format(", %mask: tensor<?x?x?x{}>", mask);
  std::string maskIn = mask.empty() ? "" : ", %mask";
  std::string maskType = mask.empty() ? "" : fmt::format(", tensor<?x?x?x{}>", mask);
  std::string maskMap = mask.empty() ? "" : "affine_map<(b, m, k, j, n) -> (b, m, j)>, ";
  std::string text = fmt::format(R"(
    func.func @f(%q: tensor<?x?x?xf32>, %k: tensor<?x?x?xf32>, %v: tensor<?x?x?xf32>, %scale: f32{0}) -> tensor<?x?x?xf32> {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %b = tensor.dim %q, %c0 : tensor<?x?x?xf32>
      %m = tensor.dim %q, %c1 : tensor<?x?x?xf32>
      %n = tensor.dim %v, %c2 : tensor<?x?x?xf32>
      %e = tensor.empty(%b, %m, %n) : tensor<?x?x?xf32>
      %o = iree_linalg_ext.attention {{indexing_maps = [
             affine_map<(b, m, k, j, n) -> (b, m, k)>, affine_map<(b, m, k, j, n) -> (b, j, k)>,
             affine_map<(b, m, k, j, n) -> (b, j, n)>, affine_map<(b, m, k, j, n) -> ()>,
             {3}affine_map<(b, m, k, j, n) -> (b, m, n)>]}}
          ins(%q, %k, %v, %scale{1} : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32{2})
          outs(%e : tensor<?x?x?xf32>) {{
      ^bb0(%s: f32):
        iree_linalg_ext.yield %s : f32
      }} -> tensor<?x?x?xf32>
      return %o : tensor<?x?x?xf32>
    }})",
                                 maskArg, maskIn, maskType, maskMap);
  const int64_t B = 2, M = 5, K = 16, J = 7, N = 9;
  auto q = values(B * M * K, 10), k = values(B * J * K, 11), v = values(B * J * N, 12);
  const float scale = 0.25f;
  std::vector<uint8_t> keep(B * M * J);
  std::vector<float> add(B * M * J);
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = (i % 3) != 1 || (i % J) == 0; // every row keeps key 0
    add[i] = static_cast<float>(i % 4) - 1.5f;
  }
  std::vector<double> expected(B * M * N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m) {
      std::vector<double> s(J);
      double mx = -INFINITY;
      for (int64_t j = 0; j < J; ++j) {
        double dot = 0;
        for (int64_t p = 0; p < K; ++p)
          dot += static_cast<double>(q[(b * M + m) * K + p]) * k[(b * J + j) * K + p];
        s[j] = dot * scale;
        int64_t at = (b * M + m) * J + j;
        if (mask == "i1" && !keep[at])
          s[j] = -INFINITY;
        if (mask == "f32")
          s[j] += add[at];
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double &x : s)
        sum += (x = std::exp(x - mx));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < J; ++j)
          expected[(b * M + m) * N + n] += s[j] / sum * v[(b * J + j) * N + n];
    }
  std::vector<Arg> args{borrow(q, {B, M, K}), borrow(k, {B, J, K}), borrow(v, {B, J, N}),
                        Scalar::f32(scale)};
  if (mask == "i1")
    args.push_back(Tensor::borrow(keep.data(), DType::I1, {B, M, J}));
  if (mask == "f32")
    args.push_back(borrow(add, {B, M, J}));
  expectBoth(text, args, expected, 1e-4, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionOpTest, testing::Values("", "i1", "f32"),
                         [](const auto &info) {
                           return info.param.empty() ? std::string("none") : info.param;
                         });

// Masks computed from the indices of query m and key j: the comparisons that say "j <= m + c"
// in any of their spellings mark the kernel's scores and P·V with the keys each query sees
// (CausalMask.h), which their tiles skip; the others do not, and run every key. Every form
// against plain loops, in both modes. 70 queries by 90 keys: every row sees a key.
struct IndexMask {
  const char *name;
  const char *body; // computes %keep from %m and %j
  bool recognized;
  bool (*keep)(int64_t m, int64_t j);
  // Sized by the query's extent along both dims (70 keys), which the body also reads.
  bool squareMask = false;
};

// V as [B, N, J] (`keysInner`) as well as [B, J, N]: P·V then packs V transposed.
class IndexMaskTest : public testing::TestWithParam<std::tuple<IndexMask, bool>> {};

TEST_P(IndexMaskTest, MatchesPlainLoops) {
  const auto &[mask, keysInner] = GetParam();
  std::string text =
      fmt::format(R"(
    func.func @f(%q: tensor<?x?x?xf32>, %k: tensor<?x?x?xf32>, %v: tensor<?x?x?xf32>, %scale: f32) -> tensor<?x?x?xf32> {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c20 = arith.constant 20 : index
      %c21 = arith.constant 21 : index
      %c50 = arith.constant 50 : index
      %b = tensor.dim %q, %c0 : tensor<?x?x?xf32>
      %rows = tensor.dim %q, %c1 : tensor<?x?x?xf32>
      %keys = tensor.dim %k, %c1 : tensor<?x?x?xf32>
      %n = tensor.dim %v, {1} : tensor<?x?x?xf32>
      %mi = tensor.empty(%b, %rows, {3}) : tensor<?x?x?xi1>
      %mask = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                               iterator_types = ["parallel", "parallel", "parallel"]}}
          outs(%mi : tensor<?x?x?xi1>) {{
      ^bb0(%unused: i1):
        %m = linalg.index 1 : index
        %j = linalg.index 2 : index
        {0}
        linalg.yield %keep : i1
      }} -> tensor<?x?x?xi1>
      %e = tensor.empty(%b, %rows, %n) : tensor<?x?x?xf32>
      %o = iree_linalg_ext.attention {{indexing_maps = [
             affine_map<(b, m, k, j, n) -> (b, m, k)>, affine_map<(b, m, k, j, n) -> (b, j, k)>,
             affine_map<(b, m, k, j, n) -> {2}>, affine_map<(b, m, k, j, n) -> ()>,
             affine_map<(b, m, k, j, n) -> (b, m, j)>, affine_map<(b, m, k, j, n) -> (b, m, n)>]}}
          ins(%q, %k, %v, %scale, %mask : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32, tensor<?x?x?xi1>)
          outs(%e : tensor<?x?x?xf32>) {{
      ^bb0(%s: f32):
        iree_linalg_ext.yield %s : f32
      }} -> tensor<?x?x?xf32>
      return %o : tensor<?x?x?xf32>
    }})",
                  mask.body, keysInner ? "%c1" : "%c2", keysInner ? "(b, n, j)" : "(b, j, n)",
                  mask.squareMask ? "%rows" : "%keys");
  const int64_t B = 2, M = 70, K = 32, J = mask.squareMask ? M : 90, N = 48;
  auto valueAt = [&](int64_t b, int64_t j, int64_t n) {
    return keysInner ? (b * N + n) * J + j : (b * J + j) * N + n;
  };
  auto q = values(B * M * K, 20), k = values(B * J * K, 21), v = values(B * J * N, 22);
  const float scale = 0.2f;
  std::vector<double> expected(B * M * N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m) {
      std::vector<double> s(J, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < J; ++j) {
        if (!mask.keep(m, j))
          continue;
        double dot = 0;
        for (int64_t p = 0; p < K; ++p)
          dot += static_cast<double>(q[(b * M + m) * K + p]) * k[(b * J + j) * K + p];
        mx = std::max(mx, s[j] = dot * scale);
      }
      double sum = 0;
      for (double &x : s)
        sum += (x = std::exp(x - mx));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < J; ++j)
          expected[(b * M + m) * N + n] += s[j] / sum * v[valueAt(b, j, n)];
    }
  std::vector<int64_t> valueShape =
      keysInner ? std::vector<int64_t>{B, N, J} : std::vector<int64_t>{B, J, N};
  std::vector<Arg> args{borrow(q, {B, M, K}), borrow(k, {B, J, K}), borrow(v, valueShape),
                        Scalar::f32(scale)};
  expectBoth(text, args, expected, 1e-4, 1e-5);
  const std::string keys = std::to_string(J);
  const std::vector<std::string> types{
      "2x70x32xf32", "2x" + keys + "x32xf32",
      keysInner ? "2x48x" + keys + "xf32" : "2x" + keys + "x48xf32", "f32"};
  // The loop IR's packs depend on the vector width: the checks below are AVX-512's, whatever the
  // host.
  Function fn = avx512Context().loadString(text, "ops.mlir").function("f");
  // Q·Kᵀ, the softmax's maximum (the scaled scores recomputed in it), exponentials and sum,
  // and P·V.
  EXPECT_EQ(count(fn.emit(Stage::Specialized, types), "frank.visible_keys"),
            mask.recognized ? 5 : 0);
  std::string loops = fn.emit(Stage::Loops, types);
  EXPECT_EQ(count(loops, "unless its rows see none of its keys") > 0, mask.recognized) << loops;
  // Q·Kᵀ packs K transposed over 90 keys, its last n block of 3 vectors ending at the 90th key
  // (70 keys, 5 vectors, would take tiles one vector wide: contraction.dot takes them); P·V
  // packs V where its keys are inner.
  EXPECT_EQ(count(loops, "pack=#1^T"), (keysInner ? 1 : 0) + (J == 90 ? 1 : 0)) << loops;
}

const IndexMask kIndexMasks[] = {
    {"sle", "%last = arith.addi %m, %c20 : index\n %keep = arith.cmpi sle, %j, %last : index", true,
     [](int64_t m, int64_t j) { return j <= m + 20; }},
    {"sgt_swapped", "%end = arith.addi %c21, %m : index\n %keep = arith.cmpi sgt, %end, %j : index",
     true, [](int64_t m, int64_t j) { return j < m + 21; }},
    {"ult", "%end = arith.addi %m, %c21 : index\n %keep = arith.cmpi ult, %j, %end : index", true,
     [](int64_t m, int64_t j) { return j < m + 21; }},
    {"sge_minus",
     "%a = arith.addi %m, %c20 : index\n %last = arith.subi %a, %c3 : index\n"
     " %keep = arith.cmpi sge, %last, %j : index",
     true, [](int64_t m, int64_t j) { return j <= m + 17; }},
    // A bound from the one extent that sizes both dims: counted twice, it had let every query
    // see every key in generic mode.
    {"extent_sizing_both_dims",
     "%a = arith.addi %m, %rows : index\n %last = arith.subi %a, %c50 : index\n"
     " %keep = arith.cmpi sle, %j, %last : index",
     true, [](int64_t m, int64_t j) { return j <= m + 20; }, true},
    // The keys from the query's on: a bound below, not above.
    {"from_query_on", "%keep = arith.cmpi sge, %j, %m : index", false,
     [](int64_t m, int64_t j) { return j >= m; }},
    // Two conditions: a window of keys.
    {"window",
     "%last = arith.addi %m, %c20 : index\n %a = arith.cmpi sle, %j, %last : index\n"
     " %first = arith.subi %m, %c3 : index\n %b2 = arith.cmpi sge, %j, %first : index\n"
     " %keep = arith.andi %a, %b2 : i1",
     false, [](int64_t m, int64_t j) { return j <= m + 20 && j >= m - 3; }},
};

INSTANTIATE_TEST_SUITE_P(Forms, IndexMaskTest,
                         testing::Combine(testing::ValuesIn(kIndexMasks), testing::Bool()),
                         [](const auto &info) {
                           return fmt::format("{}{}", std::get<0>(info.param).name,
                                              std::get<1>(info.param) ? "_keys_inner" : "");
                         });

TEST(NamedOps, SlicesViewsAndDenseConstants) {
  // A rank-reducing slice of a reshaped tensor, added to a dense constant, inserted into a copy
  // of the input.
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %rows = tensor.dim %x, %c0 : tensor<?x?xf32>
      %cols = tensor.dim %x, %c1 : tensor<?x?xf32>
      %half = arith.divui %cols, %c2 : index
      %x3 = tensor.expand_shape %x [[0], [1, 2]] output_shape [%rows, 2, %half] : tensor<?x?xf32> into tensor<?x2x?xf32>
      %s = tensor.extract_slice %x3[1, 1, 0] [1, 1, 3] [1, 1, 1] : tensor<?x2x?xf32> to tensor<3xf32>
      %k = arith.constant dense<[10.0, 20.0, 30.0]> : tensor<3xf32>
      %e = tensor.empty() : tensor<3xf32>
      %sum = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
          ins(%s, %k : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %v = arith.addf %a, %b : f32
        linalg.yield %v : f32
      } -> tensor<3xf32>
      %r = tensor.insert_slice %sum into %x[0, 1] [1, 3] [1, 2] : tensor<3xf32> into tensor<?x?xf32>
      %flat = tensor.collapse_shape %r [[0, 1]] : tensor<?x?xf32> into tensor<?xf32>
      %back = tensor.expand_shape %flat [[0, 1]] output_shape [%rows, %cols] : tensor<?xf32> into tensor<?x?xf32>
      return %back : tensor<?x?xf32>
    })";
  const int64_t rows = 3, cols = 8;
  auto x = values(rows * cols, 13);
  std::vector<double> expected(x.begin(), x.end());
  // x3[1, 1, c] is x[1, 4 + c]; it lands at x[0, 1 + 2c].
  for (int c = 0; c < 3; ++c)
    expected[1 + 2 * c] = static_cast<double>(x[1 * cols + 4 + c]) + 10.0 * (c + 1);
  auto copy = x;
  expectBoth(text, {borrow(x, {rows, cols})}, expected);
  EXPECT_EQ(x, copy) << "insert_slice into an argument copies it";
}

TEST(NamedOps, SliceOutOfBoundsIsReported) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>) -> tensor<4xf32> {
      %s = tensor.extract_slice %x[2] [4] [1] : tensor<?xf32> to tensor<4xf32>
      return %s : tensor<4xf32>
    })";
  std::vector<float> x(5);
  EXPECT_THAT([&] { context().loadString(text, "s.mlir").function("f")({borrow(x, {5})}); },
              testing::ThrowsMessage<Error>(HasSubstr("slice dim 0 (offset 2, size 4, stride 1) is "
                                                      "out of bounds for 'tensor<5xf32>'")));
}

TEST(NamedOps, FlagsPickBranchesInBothModes) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>, %b: tensor<?xf32>, %use: i1) -> tensor<?xf32> {
      %r = scf.if %use -> (tensor<?xf32>) {
        %c0 = arith.constant 0 : index
        %n = tensor.dim %x, %c0 : tensor<?xf32>
        %e = tensor.empty(%n) : tensor<?xf32>
        %s = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
            ins(%x, %b : tensor<?xf32>, tensor<?xf32>) outs(%e : tensor<?xf32>) {
        ^bb0(%a: f32, %c: f32, %o: f32):
          %v = arith.addf %a, %c : f32
          linalg.yield %v : f32
        } -> tensor<?xf32>
        scf.yield %s : tensor<?xf32>
      } else {
        scf.yield %x : tensor<?xf32>
      }
      return %r : tensor<?xf32>
    })";
  std::vector<float> x{1, 2, 3}, b{10, 20, 30};
  Function fn = context().loadString(text, "if.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    Tensor with = fn({borrow(x, {3}), borrow(b, {3}), Scalar::i1(true)}, mode)[0];
    Tensor without = fn({borrow(x, {3}), borrow(b, {3}), Scalar::i1(false)}, mode)[0];
    EXPECT_EQ(std::vector<float>(with.as<float>(), with.as<float>() + 3),
              (std::vector<float>{11, 22, 33}));
    EXPECT_EQ(std::vector<float>(without.as<float>(), without.as<float>() + 3), x);
  }
  // A bias argument the false branch never reads may have any extent.
  std::vector<float> shortBias{1};
  EXPECT_NO_THROW(fn({borrow(x, {3}), borrow(shortBias, {1}), Scalar::i1(false)}));
}

TEST(NamedOps, ScalarIfInBodyAndAssumeInt) {
  // Pick element 0 or 1 of each pair by linalg.index, as rope does.
  const char *text = R"(
    func.func @f(%x: tensor<?x2xf32>, %n: index) -> tensor<?x2xf32> {
      %m = util.assume.int %n<umin = 1, umax = 64> : index
      %e = tensor.empty(%m) : tensor<?x2xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, 0)>, affine_map<(i, j) -> (i, 1)>, affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%x, %x : tensor<?x2xf32>, tensor<?x2xf32>) outs(%e : tensor<?x2xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %j = linalg.index 1 : index
        %c0 = arith.constant 0 : index
        %first = arith.cmpi eq, %j, %c0 : index
        %v = scf.if %first -> (f32) {
          %d = arith.subf %a, %b : f32
          scf.yield %d : f32
        } else {
          %s = arith.addf %a, %b : f32
          scf.yield %s : f32
        }
        linalg.yield %v : f32
      } -> tensor<?x2xf32>
      return %r : tensor<?x2xf32>
    })";
  std::vector<float> x{1, 2, 3, 5, 10, 20};
  std::vector<double> expected{-1, 3, -2, 8, -10, 30};
  expectBoth(text, {borrow(x, {3, 2}), Scalar::index(3)}, expected);
  EXPECT_THAT(
      [&] {
        context().loadString(text, "a.mlir").function("f")({borrow(x, {3, 2}), Scalar::index(100)});
      },
      testing::ThrowsMessage<Error>(HasSubstr("%n = 100 violates its 'util.assume.int' range")));
}

} // namespace
} // namespace frank::test

namespace frank::test {
namespace {

TEST(BoundsChecks, GatherIndexOutOfRangeIsALocatedError) {
  const char *text = R"(func.func @f(%w: tensor<?x?xf32>, %idx: tensor<?xi64>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %idx, %c0 : tensor<?xi64>
  %e = tensor.dim %w, %c1 : tensor<?x?xf32>
  %init = tensor.empty(%n, %e) : tensor<?x?xf32>
  %g = iree_linalg_ext.gather dimension_map = [0] ins(%w, %idx : tensor<?x?xf32>, tensor<?xi64>) outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %g : tensor<?x?xf32>
})";
  std::vector<float> w(6, 1.f);
  for (int64_t bad : {int64_t{3}, int64_t{-1}, int64_t{1} << 40}) {
    std::vector<int64_t> idx{0, bad};
    std::vector<Arg> args{Tensor::borrow(w.data(), DType::F32, {3, 2}),
                          Tensor::borrow(idx.data(), DType::I64, {2})};
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      Context ctx;
      EXPECT_THAT(
          [&] { ctx.loadString(text, "g.mlir").function("f")(args, mode); },
          testing::ThrowsMessage<Error>(testing::StartsWith(fmt::format(
              "g.mlir:7:3: error: index {} is out of bounds for dim 0 of '%w', which has size 3",
              bad))));
    }
  }
  // Switched off, the kernel has no check (and in-range indices still gather correctly).
  ContextOptions options;
  options.boundsChecks = false;
  Context unchecked(options);
  Function fn = unchecked.loadString(text, "g.mlir").function("f");
  EXPECT_THAT(fn.emit(Stage::Loops, {"3x2xf32", "2xi64"}), testing::Not(HasSubstr("check ")));
  EXPECT_THAT(
      context().loadString(text, "g.mlir").function("f").emit(Stage::Loops, {"3x2xf32", "2xi64"}),
      HasSubstr("check cmp.ult("));
  std::vector<int64_t> idx{2, 0};
  Tensor y = fn({Tensor::borrow(w.data(), DType::F32, {3, 2}),
                 Tensor::borrow(idx.data(), DType::I64, {2})})[0];
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 2}));
}

} // namespace
} // namespace frank::test

namespace frank::test {
namespace {

TEST(ScfFor, CarriesTensorsAndScalarsAndUpdatesInPlace) {
  Function fn = context().load(std::string(FRANK_TESTS_DIR) + "/data/scf_for.mlir").function("f");
  std::vector<float> x(5 * 4);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    auto r = fn({borrow(x, {5, 4}), Scalar::index(0)}, mode);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(r[0].as<float>()[i * 4 + j], x[i * 4 + j] + static_cast<float>(i));
    EXPECT_TRUE(r[1].shape().empty()) << "a scalar result is a rank-0 tensor";
    EXPECT_EQ(r[1].as<float>()[0], 0.f + 1 + 2 + 3 + 4);
  }
  // The row update writes into the carried tensor: no temporary of the whole tensor.
  std::string loops = fn.emit(Stage::Loops, {"5x4xf32", "index=0"});
  EXPECT_THAT(loops, testing::Not(HasSubstr("f32[20] at workspace")));
}

// A rank-reducing slice may drop a trailing unit dim: sizes [1, n, 1] as 1xn keep the leading
// 1, as MLIR matches them (the first unit dim had always been dropped, an error here), with n
// known or a runtime value, out of and into the tensor.
TEST(Slices, RankReducingSlicesDropTrailingUnitDims) {
  const char *text = R"(
    func.func @f(%t: tensor<?x?x?xf32>, %n: index) -> (tensor<1x?xf32>, tensor<?x?x?xf32>) {
      %s = tensor.extract_slice %t[1, 0, 1] [1, %n, 1] [1, 1, 1] : tensor<?x?x?xf32> to tensor<1x?xf32>
      %u = tensor.insert_slice %s into %t[2, 0, 0] [1, %n, 1] [1, 1, 1] : tensor<1x?xf32> into tensor<?x?x?xf32>
      return %s, %u : tensor<1x?xf32>, tensor<?x?x?xf32>
    })";
  std::vector<float> t(3 * 5 * 2);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(i);
  Function fn = context().loadString(text, "slices.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (int64_t n : {1, 5}) {
      SCOPED_TRACE(fmt::format("{}, n = {}", modeName(mode), n));
      auto r = fn({borrow(t, {3, 5, 2}), Scalar::index(n)}, mode);
      ASSERT_EQ(r[0].shape(), (std::vector<int64_t>{1, n}));
      std::vector<float> updated = t;
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(r[0].as<float>()[j], t[size_t(10 + 2 * j + 1)]) << j;
        updated[size_t(20 + 2 * j)] = t[size_t(10 + 2 * j + 1)];
      }
      EXPECT_EQ(std::vector<float>(r[1].as<float>(), r[1].as<float>() + 30), updated);
    }
}

// Which unit dims a slice drops follows from the types as written, in both modes: sizes that
// are runtime values are never dropped (a runtime 1 had let specialization accept a slice that
// generic mode refused), and an inserted tensor refined to another shape does not move the
// dropped dim.
TEST(Slices, TheTypesAsWrittenDecideTheDroppedDims) {
  EXPECT_THAT(
      [] {
        context().loadString(R"(
          func.func @f(%t: tensor<?x?xf32>, %a: index, %b: index) -> tensor<?xf32> {
            %s = tensor.extract_slice %t[0, 0] [%a, %b] [1, 1] : tensor<?x?xf32> to tensor<?xf32>
            return %s : tensor<?xf32>
          })",
                             "slices.mlir");
      },
      testing::ThrowsMessage<Error>(
          HasSubstr("slices.mlir:3:85: error: sizes [?, ?] cannot be rank-reduced to "
                    "'tensor<?xf32>'")));
  const char *insert = R"(
    func.func @f(%t: tensor<3x4x5xf32>, %u: tensor<?x?xf32>, %n: index) -> tensor<3x4x5xf32> {
      %r = tensor.insert_slice %u into %t[0, 1, 2] [1, %n, 1] [1, 1, 1] : tensor<?x?xf32> into tensor<3x4x5xf32>
      return %r : tensor<3x4x5xf32>
    })";
  Function fn = context().loadString(insert, "slices.mlir").function("f");
  std::vector<float> t(60), u(3, -1.f);
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    EXPECT_THAT(
        [&] {
          fn({borrow(t, {3, 4, 5}), borrow(u, {3, 1}), Scalar::index(3)}, mode);
        },
        testing::ThrowsMessage<Error>(HasSubstr("is 3 but the slice size is 1")))
        << modeName(mode);
}

// scf.yield hands its values to the next iteration at once: a swap of two tensors, (p, q) ->
// (q, p + q) on integers, and a reset of one carry while the other keeps an in-place update of
// it. Each had read a carry that an earlier slot of the same yield had overwritten (the swap
// gave [3 4] twice, fib(5) gave 16).
TEST(ScfFor, YieldIsAParallelAssignment) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>, %y: tensor<?xf32>, %row: tensor<1xf32>, %n: index) -> (tensor<?xf32>, tensor<?xf32>, index, tensor<?xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %swapped:2 = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x, %b = %y) -> (tensor<?xf32>, tensor<?xf32>) {
        scf.yield %b, %a : tensor<?xf32>, tensor<?xf32>
      }
      %fib:2 = scf.for %i = %c0 to %n step %c1 iter_args(%p = %c0, %q = %c1) -> (index, index) {
        %s = arith.addi %p, %q : index
        scf.yield %q, %s : index, index
      }
      %kept:2 = scf.for %i = %c0 to %n step %c1 iter_args(%a = %y, %b = %y) -> (tensor<?xf32>, tensor<?xf32>) {
        %u = tensor.insert_slice %row into %a[%i] [1] [1] : tensor<1xf32> into tensor<?xf32>
        scf.yield %x, %u : tensor<?xf32>, tensor<?xf32>
      }
      return %swapped#0, %swapped#1, %fib#0, %kept#1 : tensor<?xf32>, tensor<?xf32>, index, tensor<?xf32>
    })";
  Function fn = context().loadString(text, "yield.mlir").function("f");
  std::vector<float> x = {1, 2, 3}, y = {4, 5, 6}, row = {-1};
  auto values = [](const Tensor &t) {
    return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
  };
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (int64_t n : {1, 2, 3}) {
      SCOPED_TRACE(fmt::format("{}, {} iterations", modeName(mode), n));
      auto r = fn({borrow(x, {3}), borrow(y, {3}), borrow(row, {1}), Scalar::index(n)}, mode);
      EXPECT_EQ(values(r[0]), n % 2 ? y : x);
      EXPECT_EQ(values(r[1]), n % 2 ? x : y);
      EXPECT_EQ(r[2].as<int64_t>()[0], (std::vector<int64_t>{0, 1, 1, 2})[size_t(n)]);
      // The last iteration inserts into x (the first into y).
      std::vector<float> updated = n == 1 ? y : x;
      updated[size_t(n - 1)] = -1;
      EXPECT_EQ(values(r[3]), updated);
      EXPECT_EQ(x, (std::vector<float>{1, 2, 3})) << "an argument changed";
      EXPECT_EQ(y, (std::vector<float>{4, 5, 6})) << "an argument changed";
    }
}

// Without iter_args the body's empty yield may be left out, as MLIR prints it: specialization
// had read past the end of the body (a crash).
TEST(ScfFor, YieldOfNothingMayBeLeftOut) {
  const char *text = R"(
    func.func @f(%x: f32, %n: index) -> f32 {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
      }
      scf.for %i = %c0 to %n step %c1 {
        %y = arith.addf %x, %x : f32
      }
      return %x : f32
    })";
  Function fn = context().loadString(text, "noyield.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    auto r = fn({Scalar::f32(1.5f), Scalar::index(3)}, mode);
    EXPECT_EQ(r[0].as<float>()[0], 1.5f) << modeName(mode);
  }
  // The yield each body implies is printed, as MLIR's generic form does.
  EXPECT_THAT(fn.emit(Stage::Mlir, {"f32", "index"}),
              testing::HasSubstr("step %c1 {\n      scf.yield\n    }"));
}

// With a runtime dim in the carried tensor (partial specialization) the yielded one, refined
// from a static operand, meets it through a tensor.cast: the types had disagreed, an error on a
// valid program.
TEST(ScfFor, RuntimeDimsOfTheCarryMeetStaticYields) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>, %n: index) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %s = scf.for %i = %c0 to %n step %c1 iter_args(%a = %x) -> (tensor<?x?xf32>) {
        %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
            ins(%a : tensor<?x?xf32>) outs(%y : tensor<?x?xf32>) {
        ^bb0(%p: f32, %q: f32):
          %t = arith.addf %p, %q : f32
          linalg.yield %t : f32
        } -> tensor<?x?xf32>
        scf.yield %r : tensor<?x?xf32>
      }
      return %s : tensor<?x?xf32>
    })";
  Function fn = context().loadString(text, "carry.mlir").function("f");
  std::vector<float> x = {0, 1, 2, 3, 4, 5}, y(6, 10.f);
  for (std::vector<RuntimeDim> dims :
       {std::vector<RuntimeDim>{{"x", 0}}, std::vector<RuntimeDim>{{"y", 1}},
        std::vector<RuntimeDim>{{"x", 1}}}) {
    Tensor r =
        fn.withRuntimeDims(dims)({borrow(x, {2, 3}), borrow(y, {2, 3}), Scalar::index(2)})[0];
    EXPECT_EQ(std::vector<float>(r.as<float>(), r.as<float>() + 6),
              (std::vector<float>{20, 21, 22, 23, 24, 25}));
  }
  EXPECT_THAT(
      fn.withRuntimeDims({{"x", 0}}).emit(Stage::Specialized, {"2x3xf32", "2x3xf32", "index=2"}),
      HasSubstr("tensor.cast %r : tensor<2x3xf32> to tensor<?x3xf32>"));
}

// A dispatch region inside an scf.for and an scf.if runs inline as it does at function scope
// (the fused rms_norm in a loop over layers): it had been inlined at function scope only, and
// failed inside loops with a type error of its own region, or as an unsupported op.
TEST(ScfFor, DispatchRegionsInLoopsAndBranchesRunInline) {
  const char *text = R"(
    #id = affine_map<(i) -> (i)>
    func.func @f(%x0: tensor<?xf32>, %n: index, %flag: i1) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %x0) -> (tensor<?xf32>) {
        %d = tensor.dim %x, %c0 : tensor<?xf32>
        %y = flow.dispatch.region -> (tensor<?xf32>{%d}) {
          %e = tensor.empty(%d) : tensor<?xf32>
          %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
              ins(%x : tensor<?xf32>) outs(%e : tensor<?xf32>) {
          ^bb0(%a: f32, %o: f32):
            %s = arith.addf %a, %a : f32
            linalg.yield %s : f32
          } -> tensor<?xf32>
          flow.return %g : tensor<?xf32>
        }
        scf.yield %y : tensor<?xf32>
      }
      %t = scf.if %flag -> (tensor<?xf32>) {
        %d = tensor.dim %r, %c0 : tensor<?xf32>
        %y = flow.dispatch.region -> (tensor<?xf32>{%d}) {
          %e = tensor.empty(%d) : tensor<?xf32>
          %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
              ins(%r : tensor<?xf32>) outs(%e : tensor<?xf32>) {
          ^bb0(%a: f32, %o: f32):
            %one = arith.constant 1.0 : f32
            %s = arith.addf %a, %one : f32
            linalg.yield %s : f32
          } -> tensor<?xf32>
          flow.return %g : tensor<?xf32>
        }
        scf.yield %y : tensor<?xf32>
      } else {
        scf.yield %r : tensor<?xf32>
      }
      return %t : tensor<?xf32>
    })";
  std::vector<float> x = {1, 2, 3};
  Function fn = context().loadString(text, "ops.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (bool flag : {false, true}) {
      SCOPED_TRACE(
          fmt::format("{} {}", mode == Mode::Specialized ? "specialized" : "generic", flag));
      Tensor y = fn({borrow(x, {3}), Scalar::index(2), Scalar::i1(flag)}, mode)[0];
      for (int64_t i = 0; i < 3; ++i)
        EXPECT_EQ(y.as<float>()[i], 4 * x[i] + (flag ? 1 : 0));
    }
}

} // namespace
} // namespace frank::test

namespace frank::test {
namespace {

// mul_mat_id transposes its weights expert-first and gathers from the copy; the gather reads the
// weights in place instead, and the copy is gone (results: MulMatIdTest).
TEST(FoldCopies, GatherReadsThroughATranspose) {
  Function fn = context().load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
  std::vector<std::string> types{"16x8x4xf32", "8x2x3xf32", "2x3xi32"};
  std::string loops = fn.emit(Stage::Loops, types);
  // The only temporary holds the per-choice sums (contraction.choices), not weights.
  EXPECT_THAT(loops, testing::Not(testing::ContainsRegex("temp [a-z_]*empty")))
      << "no buffer between weights and gather";
  EXPECT_THAT(loops, HasSubstr("= weights[")) << "the gather reads the weights in place";
  EXPECT_THAT(fn.emit(Stage::Loops, types, Mode::Generic), HasSubstr("temp wx_empty"))
      << "generic mode keeps the copy";
  EXPECT_THAT(fn.emit(Stage::Specialized, types, Mode::Specialized, true),
              HasSubstr("IR Dump After fold-copies"));
}

} // namespace
} // namespace frank::test

namespace frank::test {
namespace {

// Several chunks of a parallel gather fail at once: one of them reports, whole.
TEST(BoundsChecks, ParallelFailuresReportOneWholeError) {
  setNumThreads(2);
  Function fn =
      context().load(componentPath("embedding/embedding_lookup.mlir")).function("embedding_lookup");
  std::vector<float> table(50 * 2048, 1.f);
  std::vector<int64_t> ids(128, 3);
  ids[5] = 77;    // in the first half of the rows
  ids[100] = 900; // in the second half
  std::vector<Arg> args{Tensor::borrow(table.data(), DType::F32, {50, 2048}),
                        Tensor::borrow(ids.data(), DType::I64, {1, 128})};
  EXPECT_THAT(fn.emit(Stage::Loops, {"50x2048xf32", "1x128xi64"}), HasSubstr("parallel"));
  for (int rep = 0; rep < 20; ++rep)
    EXPECT_THAT(
        [&] { fn(args); },
        testing::ThrowsMessage<Error>(testing::AnyOf(
            HasSubstr("error: index 77 is out of bounds for dim 0 of '%weight', which has size 50"),
            HasSubstr(
                "error: index 900 is out of bounds for dim 0 of '%weight', which has size 50"))));
}

} // namespace
} // namespace frank::test
