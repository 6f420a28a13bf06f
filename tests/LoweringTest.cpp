// linalg.generic lowering: every indexing-map and iterator form of the subset, checked against
// plain loops in both modes. Shapes are odd so that vector tails run.
#include "Pipeline.h"
#include "TestSupport.h"
#include "oracles/Oracles.h"
#include "parse/Parser.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace frank::test {
namespace {

std::vector<float> iota(int64_t n, float scale = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>((i * 37) % 101 - 50) / 50.f;
  return v;
}

// Runs `fn` of `text` in both modes and returns result 0 of each.
std::vector<std::vector<float>> runBoth(const std::string &text, const std::vector<Arg> &args) {
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  std::vector<std::vector<float>> results;
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    Tensor y = fn(args, mode)[0];
    results.emplace_back(y.as<float>(), y.as<float>() + y.numel());
  }
  return results;
}

void expectAllNear(const std::vector<std::vector<float>> &results,
                   const std::vector<double> &expected) {
  for (size_t m = 0; m < results.size(); ++m) {
    SCOPED_TRACE(m == 0 ? "specialized" : "generic");
    ASSERT_EQ(results[m].size(), expected.size());
    auto cmp = oracle::compare(results[m].data(), expected, 1e-5, 1e-6);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

Tensor borrow(std::vector<float> &v, std::vector<int64_t> shape) {
  return Tensor::borrow(v.data(), DType::F32, std::move(shape));
}

TEST(Lowering, OuterReductionSumsColumns) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>) -> tensor<?xf32> {
      %c1 = arith.constant 1 : index
      %n = tensor.dim %x, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%n) : tensor<?xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (c)>],
                           iterator_types = ["reduction", "parallel"]}
          ins(%x : tensor<?x?xf32>) outs(%init : tensor<?xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %s = arith.addf %acc, %a : f32
        linalg.yield %s : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    })";
  const int64_t rows = 13, cols = 37;
  auto x = iota(rows * cols);
  std::vector<double> expected(cols, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      expected[c] += x[r * cols + c];
  expectAllNear(runBoth(text, {borrow(x, {rows, cols})}), expected);
}

TEST(Lowering, MiddleReductionWithMaximumAndHexInfinity) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      %a = tensor.dim %x, %c0 : tensor<?x?x?xf32>
      %b = tensor.dim %x, %c2 : tensor<?x?x?xf32>
      %ninf = arith.constant 0xFF800000 : f32
      %e = tensor.empty(%a, %b) : tensor<?x?xf32>
      %init = linalg.fill ins(%ninf : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k, j)>, affine_map<(i, k, j) -> (i, j)>],
                           iterator_types = ["parallel", "reduction", "parallel"]}
          ins(%x : tensor<?x?x?xf32>) outs(%init : tensor<?x?xf32>) {
      ^bb0(%v: f32, %m: f32):
        %n = arith.maximumf %m, %v : f32
        linalg.yield %n : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t a = 3, k = 7, b = 19;
  auto x = iota(a * k * b);
  std::vector<double> expected(a * b, -INFINITY);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < b; ++j)
        expected[i * b + j] =
            std::max(expected[i * b + j], static_cast<double>(x[(i * k + kk) * b + j]));
  expectAllNear(runBoth(text, {borrow(x, {a, k, b})}), expected);
}

TEST(Lowering, TransposedStoreAndPermutedInput) {
  // out[j, i] = x[i, j] + y[j, i]: the output map and one input map are permutations.
  const char *text = R"(
    #xy = affine_map<(i, j) -> (i, j)>
    #yx = affine_map<(i, j) -> (j, i)>
    func.func @f(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xf32>
      %n = tensor.dim %x, %c1 : tensor<?x?xf32>
      %e = tensor.empty(%n, %m) : tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [#xy, #yx, #yx], iterator_types = ["parallel", "parallel"]}
          ins(%x, %y : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %s = arith.addf %a, %b : f32
        linalg.yield %s : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t m = 5, n = 11;
  auto x = iota(m * n), y = iota(n * m, 3);
  std::vector<double> expected(n * m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      expected[j * m + i] = static_cast<double>(x[i * n + j]) + y[j * m + i];
  expectAllNear(runBoth(text, {borrow(x, {m, n}), borrow(y, {n, m})}), expected);
}

// out[t, e] = sum_k d[e, k, t] * w[k, t] over (e, k, t), the MoE block's weighted sum: the
// output is strided along t and contiguous along e, so a specialized nest runs t outermost,
// then k, and vectorizes e, storing whole vectors; each output still sums over k in order.
TEST(Lowering, OutputContiguousDimGoesInnermost) {
  const char *text = R"(
    #ekt = affine_map<(e, k, t) -> (e, k, t)>
    #kt = affine_map<(e, k, t) -> (k, t)>
    #te = affine_map<(e, k, t) -> (t, e)>
    func.func @f(%d: tensor<?x?x?xf32>, %w: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      %ne = tensor.dim %d, %c0 : tensor<?x?x?xf32>
      %nt = tensor.dim %d, %c2 : tensor<?x?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%nt, %ne) : tensor<?x?xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [#ekt, #kt, #te],
                           iterator_types = ["parallel", "reduction", "parallel"]}
          ins(%d, %w : tensor<?x?x?xf32>, tensor<?x?xf32>) outs(%init : tensor<?x?xf32>) {
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %p : f32
        linalg.yield %s : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t ne = 37, nk = 3, nt = 11;
  std::string loops = context().loadString(text, "lowering.mlir").function("f").emit(
      Stage::Loops, {fmt::format("{}x{}x{}xf32", ne, nk, nt), fmt::format("{}x{}xf32", nk, nt)});
  // t's loop is the fill's too (fused): the nest's t is the fill's i0.
  EXPECT_THAT(loops, testing::HasSubstr("  for i0 in 0..11 {\n    for i1 in 0..37 vectorized {"))
      << loops;
  EXPECT_THAT(loops, testing::HasSubstr("    for d1 in 0..3 {\n      for d0 in 0..37 vectorized {"))
      << loops;
  EXPECT_THAT(loops, testing::HasSubstr("out0[(d0 + (i0 * 37))] = s")) << loops;
  auto d = iota(ne * nk * nt), w = iota(nk * nt, 2);
  std::vector<double> expected(nt * ne, 0);
  for (int64_t e = 0; e < ne; ++e)
    for (int64_t k = 0; k < nk; ++k)
      for (int64_t t = 0; t < nt; ++t)
        expected[t * ne + e] += double(d[(e * nk + k) * nt + t]) * w[k * nt + t];
  expectAllNear(runBoth(text, {borrow(d, {ne, nk, nt}), borrow(w, {nk, nt})}), expected);
}

TEST(Lowering, BroadcastConstantResultAndScalarOperand) {
  // out[i, j] = pair[i, 1] * w[j] + s: a constant map result picks element 1 of each pair, w is
  // broadcast along i, and s is a scalar operand with an empty map.
  const char *text = R"(
    func.func @f(%pair: tensor<?x2xf32>, %w: tensor<?xf32>, %s: f32) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %m = tensor.dim %pair, %c0 : tensor<?x2xf32>
      %n = tensor.dim %w, %c0 : tensor<?xf32>
      %e = tensor.empty(%m, %n) : tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, 1)>, affine_map<(i, j) -> (j)>,
                                            affine_map<(i, j) -> ()>, affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%pair, %w, %s : tensor<?x2xf32>, tensor<?xf32>, f32) outs(%e : tensor<?x?xf32>) {
      ^bb0(%p: f32, %wj: f32, %sc: f32, %o: f32):
        %t = arith.mulf %p, %wj : f32
        %u = arith.addf %t, %sc : f32
        linalg.yield %u : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t m = 6, n = 9;
  auto pair = iota(m * 2), w = iota(n, 2);
  std::vector<double> expected(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      expected[i * n + j] = static_cast<double>(pair[i * 2 + 1]) * w[j] + 0.25;
  expectAllNear(runBoth(text, {borrow(pair, {m, 2}), borrow(w, {n}), Scalar::f32(0.25f)}),
                expected);
}

// exp(j * s) varies with j alone: specialized, it becomes a table of n values computed before
// the nest, reading the scalar operand s there too; the pair dim of 2 is unrolled.
TEST(Lowering, InvariantMathBecomesATableAndATinyInnerDimUnrolls) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?x2xf32>, %s: f32) -> tensor<?x?x2xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?x2xf32>
      %n = tensor.dim %x, %c1 : tensor<?x?x2xf32>
      %e = tensor.empty(%m, %n) : tensor<?x?x2xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>,
                                            affine_map<(i, j, k) -> ()>,
                                            affine_map<(i, j, k) -> (i, j, k)>],
                           iterator_types = ["parallel", "parallel", "parallel"]}
          ins(%x, %s : tensor<?x?x2xf32>, f32) outs(%e : tensor<?x?x2xf32>) {
      ^bb0(%v: f32, %sc: f32, %o: f32):
        %j = linalg.index 1 : index
        %ji = arith.index_cast %j : index to i32
        %jf = arith.sitofp %ji : i32 to f32
        %a = arith.mulf %jf, %sc : f32
        %g = math.exp %a : f32
        %u = arith.mulf %v, %g : f32
        linalg.yield %u : f32
      } -> tensor<?x?x2xf32>
      return %r : tensor<?x?x2xf32>
    })";
  const int64_t m = 7, n = 37;
  auto x = iota(m * n * 2);
  const float s = -0.05f;
  std::vector<double> expected(x.size());
  for (int64_t i = 0; i < m * n * 2; ++i)
    expected[i] = static_cast<double>(x[i]) * std::exp(static_cast<double>(i / 2 % n) * s);
  expectAllNear(runBoth(text, {borrow(x, {m, n, 2}), Scalar::f32(s)}), expected);
  std::string loops = context()
                          .loadString(text, "lowering.mlir")
                          .function("f")
                          .emit(Stage::Loops, {"7x37x2xf32", "f32"});
  EXPECT_THAT(loops, testing::HasSubstr("// 'math.exp' varies with 1 of the nest's 3 dims: a "
                                        "table of 37"));
  EXPECT_THAT(loops, testing::HasSubstr("for d1 in 0..37 vectorized"));
}

TEST(Lowering, NoInputsUsesLinalgIndexAndCapturedScalar) {
  // out[i, j] = float(i * 100 + j) * scale, with `scale` captured from the function scope.
  const char *text = R"(
    func.func @f(%like: tensor<?x?xf32>, %scale: f32) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %like, %c0 : tensor<?x?xf32>
      %n = tensor.dim %like, %c1 : tensor<?x?xf32>
      %hundred = arith.constant 100 : index
      %e = tensor.empty(%m, %n) : tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
          outs(%e : tensor<?x?xf32>) {
      ^bb0(%o: f32):
        %i = linalg.index 0 : index
        %j = linalg.index 1 : index
        %t = arith.muli %i, %hundred : index
        %k = arith.addi %t, %j : index
        %k32 = arith.index_cast %k : index to i32
        %f = arith.sitofp %k32 : i32 to f32
        %v = arith.mulf %f, %scale : f32
        linalg.yield %v : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  const int64_t m = 4, n = 23;
  std::vector<float> like(m * n);
  std::vector<double> expected(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      expected[i * n + j] = (i * 100.0 + j) * 0.5;
  expectAllNear(runBoth(text, {borrow(like, {m, n}), Scalar::f32(0.5f)}), expected);
}

// A generic of no tensor inputs that nothing reads is never made, nor a collapse of it, unless
// its body can stop the kernel: an integer division checks its divisor, which a call must still
// report.
TEST(Lowering, GenericsNothingReadsAreNotMadeUnlessTheyCheck) {
  const char *text = R"(
    func.func @f(%x: tensor<?xi32>, %d: tensor<?xi32>) -> tensor<?xi32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %e2 = tensor.empty(%n) : tensor<?x1xi32>
      %unused = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
          outs(%e2 : tensor<?x1xi32>) {
      ^bb0(%o: i32):
        %i = linalg.index 0 : index
        %a = arith.index_cast %i : index to i32
        %s = arith.muli %a, %a : i32
        linalg.yield %s : i32
      } -> tensor<?x1xi32>
      %view = tensor.collapse_shape %unused [[0, 1]] : tensor<?x1xi32> into tensor<?xi32>
      %checked = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
          ins(%x, %d : tensor<?xi32>, tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%a: i32, %b: i32, %o: i32):
        %q = arith.divsi %a, %b : i32
        linalg.yield %q : i32
      } -> tensor<?xi32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
          ins(%x : tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%a: i32, %o: i32):
        %p = arith.addi %a, %a : i32
        linalg.yield %p : i32
      } -> tensor<?xi32>
      return %r : tensor<?xi32>
    })";
  Function fn = context().loadString(text, "dead.mlir").function("f");
  std::string loops = fn.emit(Stage::Loops, {"3xi32", "3xi32"});
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("(a * a)"))) << loops;
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("unused"))) << loops;
  EXPECT_THAT(loops, testing::HasSubstr("check cmp.ne(b, 0:i32)")) << loops;
  std::vector<int32_t> x{1, 2, 3}, d{1, 0, 1};
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::I32, {3}),
                        Tensor::borrow(d.data(), DType::I32, {3})};
  EXPECT_THAT([&] { fn(args); }, testing::ThrowsMessage<Error>(
                                     testing::HasSubstr("division by zero in 'arith.divsi'")));
  d[1] = 2;
  Tensor y = fn(args)[0];
  EXPECT_EQ(std::vector<int32_t>(y.as<int32_t>(), y.as<int32_t>() + 3),
            (std::vector<int32_t>{2, 4, 6}));
}

TEST(Lowering, SameTensorTwiceAndAccumulatingIntoNonZeroInit) {
  // r[i] = init[i] + sum_j x[i, j] * x[j, i]: one tensor read through two maps, and a
  // reduction that adds to what `outs` holds.
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %init: tensor<?xf32>) -> tensor<?xf32> {
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j, i)>,
                                            affine_map<(i, j) -> (i)>],
                           iterator_types = ["parallel", "reduction"]}
          ins(%x, %x : tensor<?x?xf32>, tensor<?x?xf32>) outs(%init : tensor<?xf32>) {
      ^bb0(%a: f32, %b: f32, %acc: f32):
        %p = arith.mulf %a, %b : f32
        %s = arith.addf %acc, %p : f32
        linalg.yield %s : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    })";
  const int64_t n = 17;
  auto x = iota(n * n);
  auto init = iota(n, 4);
  std::vector<double> expected(n);
  for (int64_t i = 0; i < n; ++i) {
    expected[i] = init[i];
    for (int64_t j = 0; j < n; ++j)
      expected[i] += static_cast<double>(x[i * n + j]) * x[j * n + i];
  }
  auto initCopy = init;
  expectAllNear(runBoth(text, {borrow(x, {n, n}), borrow(initCopy, {n})}), expected);
  EXPECT_EQ(initCopy, init) << "an argument used as `outs` must not be written";
}

TEST(Lowering, ReturningAnArgumentAndOneValueTwiceCopies) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %d = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
          ins(%x : tensor<?xf32>) outs(%e : tensor<?xf32>) {
      ^bb0(%a: f32, %o: f32):
        %t = arith.addf %a, %a : f32
        linalg.yield %t : f32
      } -> tensor<?xf32>
      return %d, %x, %d : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
    })";
  auto x = iota(10);
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    auto r = fn({borrow(x, {10})}, mode);
    ASSERT_EQ(r.size(), 3u);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(r[0].as<float>()[i], 2 * x[i]);
      EXPECT_EQ(r[1].as<float>()[i], x[i]);
      EXPECT_EQ(r[2].as<float>()[i], 2 * x[i]);
    }
    EXPECT_NE(r[1].data(), static_cast<void *>(x.data())) << "results never alias arguments";
  }
}

TEST(Lowering, IntegerElementsCompareAndSelect) {
  // out[i] = x[i] > 3 ? x[i] * 2 : -x[i], on i32.
  const char *text = R"(
    func.func @f(%x: tensor<?xi32>) -> tensor<?xi32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %three = arith.constant 3 : i32
      %two = arith.constant 2 : i32
      %zero = arith.constant 0 : i32
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
          ins(%x : tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%a: i32, %o: i32):
        %big = arith.cmpi sgt, %a, %three : i32
        %dbl = arith.muli %a, %two : i32
        %neg = arith.subi %zero, %a : i32
        %v = arith.select %big, %dbl, %neg : i32
        linalg.yield %v : i32
      } -> tensor<?xi32>
      return %r : tensor<?xi32>
    })";
  std::vector<int32_t> x{-5, 0, 3, 4, 100, 7, 2, -1, 9};
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    Tensor y = fn({Tensor::borrow(x.data(), DType::I32, {9})}, mode)[0];
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(y.as<int32_t>()[i], x[i] > 3 ? x[i] * 2 : -x[i]) << "at " << i;
  }
}

TEST(Lowering, ElementwiseChainFusesIntoOneLoopNest) {
  // exp(x) then * y: specialization fuses the producer, generic mode keeps two nests.
  const char *text = R"(
    #id = affine_map<(i, j) -> (i, j)>
    func.func @f(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xf32>
      %n = tensor.dim %x, %c1 : tensor<?x?xf32>
      %e0 = tensor.empty(%m, %n) : tensor<?x?xf32>
      %ex = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
          ins(%x : tensor<?x?xf32>) outs(%e0 : tensor<?x?xf32>) {
      ^bb0(%a: f32, %o: f32):
        %t = math.exp %a : f32
        linalg.yield %t : f32
      } -> tensor<?x?xf32>
      %e1 = tensor.empty(%m, %n) : tensor<?x?xf32>
      %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
          ins(%ex, %y : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e1 : tensor<?x?xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %t = arith.mulf %a, %b : f32
        linalg.yield %t : f32
      } -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  std::vector<std::string> types{"3x45xf32", "3x45xf32"};
  std::string fused = fn.emit(Stage::Specialized, types);
  auto count = [](const std::string &s, const std::string &what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count(fused, "linalg.generic"), 1u) << fused;
  EXPECT_EQ(count(fn.emit(Stage::Loops, types), "temp "), 0u) << "the fused value needs no buffer";
  EXPECT_EQ(count(fn.emit(Stage::Loops, types, Mode::Generic), "temp "), 1u);
  auto x = iota(3 * 45), y = iota(3 * 45, 2);
  std::vector<double> expected(3 * 45);
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] = std::exp(static_cast<double>(x[i])) * y[i];
  expectAllNear(runBoth(text, {borrow(x, {3, 45}), borrow(y, {3, 45})}), expected);
}

// A sum over the rows of a broadcast, and over the rows of a generic without inputs: the
// producer was the only operand that indexed the summed dim, so fusing it left a loop without
// an extent (specialization refused the program as "not indexed by any operand"). It stays a
// tensor of its own.
TEST(Lowering, ProducersThatAloneIndexADimDoNotFuse) {
  const char *text = R"(
    func.func @f(%a: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %e = tensor.empty() : tensor<4x3xf32>
      %b = linalg.broadcast ins(%a : tensor<3xf32>) outs(%e : tensor<4x3xf32>) dimensions = [0]
      %rows = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
          outs(%e : tensor<4x3xf32>) {
      ^bb0(%o: f32):
        %i = linalg.index 0 : index
        %ii = arith.index_cast %i : index to i32
        %f = arith.sitofp %ii : i32 to f32
        linalg.yield %f : f32
      } -> tensor<4x3xf32>
      %z = arith.constant 0.0 : f32
      %e2 = tensor.empty() : tensor<3xf32>
      %zero = linalg.fill ins(%z : f32) outs(%e2 : tensor<3xf32>) -> tensor<3xf32>
      %sums = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
          ins(%b : tensor<4x3xf32>) outs(%zero : tensor<3xf32>) {
      ^bb0(%x: f32, %o: f32):
        %s = arith.addf %o, %x : f32
        linalg.yield %s : f32
      } -> tensor<3xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
          ins(%rows : tensor<4x3xf32>) outs(%zero : tensor<3xf32>) {
      ^bb0(%x: f32, %o: f32):
        %s = arith.addf %o, %x : f32
        linalg.yield %s : f32
      } -> tensor<3xf32>
      return %sums, %r : tensor<3xf32>, tensor<3xf32>
    })";
  std::vector<float> a{1, 2, 3};
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    std::vector<Tensor> r = fn({borrow(a, {3})}, mode);
    EXPECT_EQ(std::vector<float>(r[0].as<float>(), r[0].as<float>() + 3),
              (std::vector<float>{4, 8, 12}));
    EXPECT_EQ(std::vector<float>(r[1].as<float>(), r[1].as<float>() + 3),
              (std::vector<float>{6, 6, 6}));
  }
}

// K in attention: [1, S, H, D] transposed to [1, H, S, D] and collapsed to [H, S, D] before a
// contraction reads it. collapse-before-copy collapses the source instead ([S, H, D], a view),
// and the copy that is left fuses into the contraction: no copy, no temporary. A collapse that
// merges dims in an order the source does not have them in keeps its copy.
TEST(Lowering, TransposeThroughACollapseFoldsIntoItsConsumer) {
  auto text = [](const char *permutation, const char *transposedType, const char *reassociation,
                 const char *collapsedType) {
    return fmt::format(R"(
    func.func @f(%k: tensor<1x5x3x7xf32>, %w: tensor<5xf32>) -> tensor<3x7xf32> {{
      %e = tensor.empty() : tensor<{1}>
      %t = linalg.transpose ins(%k : tensor<1x5x3x7xf32>) outs(%e : tensor<{1}>)
          permutation = {0}
      %c = tensor.collapse_shape %t {2} : tensor<{1}> into tensor<{3}>
      %z = arith.constant 0.0 : f32
      %o = tensor.empty() : tensor<3x7xf32>
      %init = linalg.fill ins(%z : f32) outs(%o : tensor<3x7xf32>) -> tensor<3x7xf32>
      %r = linalg.generic {{indexing_maps = [affine_map<(h, d, s) -> (h, s, d)>,
                                            affine_map<(h, d, s) -> (s)>,
                                            affine_map<(h, d, s) -> (h, d)>],
                           iterator_types = ["parallel", "parallel", "reduction"]}}
          ins(%c, %w : tensor<{3}>, tensor<5xf32>) outs(%init : tensor<3x7xf32>) {{
      ^bb0(%a: f32, %b: f32, %acc: f32):
        %p = arith.mulf %a, %b : f32
        %q = arith.addf %acc, %p : f32
        linalg.yield %q : f32
      }} -> tensor<3x7xf32>
      return %r : tensor<3x7xf32>
    }})",
                       permutation, transposedType, reassociation, collapsedType);
  };
  auto count = [](const std::string &s, const std::string &what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
      ++n;
    return n;
  };
  auto k = iota(5 * 3 * 7), w = iota(5, 0.5f);
  std::vector<Arg> args{borrow(k, {1, 5, 3, 7}), borrow(w, {5})};
  std::vector<double> expected(3 * 7, 0.0);
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t d = 0; d < 7; ++d)
      for (int64_t s = 0; s < 5; ++s)
        expected[h * 7 + d] += double(k[(s * 3 + h) * 7 + d]) * w[s];

  // [1, H, S, D] -> [H, S, D]: groups {1, H}, {S}, {D} are runs of the source (the unit dim
  // aside), so the source collapses and the copy fuses.
  std::string folds = text("[0, 2, 1, 3]", "1x3x5x7xf32", "[[0, 1], [2], [3]]", "3x5x7xf32");
  Function fn = context().loadString(folds, "lowering.mlir").function("f");
  std::vector<std::string> types{"1x5x3x7xf32", "5xf32"};
  std::string specialized = fn.emit(Stage::Specialized, types);
  EXPECT_EQ(count(specialized, "linalg.generic"), 1u) << specialized;
  EXPECT_EQ(count(fn.emit(Stage::Loops, types), "temp "), 0u) << fn.emit(Stage::Loops, types);
  expectAllNear(runBoth(folds, args), expected);

  // [H, 1, S, D] -> [H, S, D] through groups {H, 1}, {S}, {D}: the same, with the unit dim
  // joining the group before it.
  std::string unitAfter = text("[2, 0, 1, 3]", "3x1x5x7xf32", "[[0, 1], [2], [3]]", "3x5x7xf32");
  specialized = context()
                    .loadString(unitAfter, "lowering.mlir")
                    .function("f")
                    .emit(Stage::Specialized, types);
  EXPECT_EQ(count(specialized, "linalg.generic"), 1u) << specialized;
  expectAllNear(runBoth(unitAfter, args), expected);

  // [S, H, D] -> [H, S, D] -> [H*S, D]: the group {H, S} merges the source's S and H in the
  // other order, which no collapse of the source gives: the copy stays.
  const char *merged = R"(
    func.func @f(%k: tensor<5x3x7xf32>) -> tensor<15x7xf32> {
      %e = tensor.empty() : tensor<3x5x7xf32>
      %t = linalg.transpose ins(%k : tensor<5x3x7xf32>) outs(%e : tensor<3x5x7xf32>)
          permutation = [1, 0, 2]
      %c = tensor.collapse_shape %t [[0, 1], [2]] : tensor<3x5x7xf32> into tensor<15x7xf32>
      %o = tensor.empty() : tensor<15x7xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, d) -> (i, d)>,
                                            affine_map<(i, d) -> (i, d)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%c : tensor<15x7xf32>) outs(%o : tensor<15x7xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %p = arith.mulf %a, %a : f32
        linalg.yield %p : f32
      } -> tensor<15x7xf32>
      return %r : tensor<15x7xf32>
    })";
  specialized = context()
                    .loadString(merged, "lowering.mlir")
                    .function("f")
                    .emit(Stage::Specialized, {"5x3x7xf32"});
  EXPECT_EQ(count(specialized, "linalg.generic"), 2u) << specialized;
  std::vector<double> squares(15 * 7);
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t s = 0; s < 5; ++s)
      for (int64_t d = 0; d < 7; ++d)
        squares[(h * 5 + s) * 7 + d] = double(k[(s * 3 + h) * 7 + d]) * k[(s * 3 + h) * 7 + d];
  expectAllNear(runBoth(merged, {borrow(k, {5, 3, 7})}), squares);
}

// The same through an expand: K's [S, H, D] transposed to [H, S, D] and its keys split into
// [H, 2, S/2, D] (decode attention's chunks of keys, generalize-attention). collapse-before-copy
// expands the source instead ([2, S/2, H, D], a view) and the copy fuses into the contraction:
// no copy, no temporary.
TEST(Lowering, TransposeThroughAnExpandFoldsIntoItsConsumer) {
  const char *text = R"(
    func.func @f(%k: tensor<6x3x7xf32>, %w: tensor<6xf32>) -> tensor<3x7xf32> {
      %e = tensor.empty() : tensor<3x6x7xf32>
      %t = linalg.transpose ins(%k : tensor<6x3x7xf32>) outs(%e : tensor<3x6x7xf32>)
          permutation = [1, 0, 2]
      %x = tensor.expand_shape %t [[0], [1, 2], [3]] output_shape [3, 2, 3, 7]
          : tensor<3x6x7xf32> into tensor<3x2x3x7xf32>
      %wx = tensor.expand_shape %w [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
      %z = arith.constant 0.0 : f32
      %o = tensor.empty() : tensor<3x7xf32>
      %init = linalg.fill ins(%z : f32) outs(%o : tensor<3x7xf32>) -> tensor<3x7xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(h, d, c, s) -> (h, c, s, d)>,
                                            affine_map<(h, d, c, s) -> (c, s)>,
                                            affine_map<(h, d, c, s) -> (h, d)>],
                           iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
          ins(%x, %wx : tensor<3x2x3x7xf32>, tensor<2x3xf32>) outs(%init : tensor<3x7xf32>) {
      ^bb0(%a: f32, %b: f32, %acc: f32):
        %p = arith.mulf %a, %b : f32
        %q = arith.addf %acc, %p : f32
        linalg.yield %q : f32
      } -> tensor<3x7xf32>
      return %r : tensor<3x7xf32>
    })";
  auto count = [](const std::string &s, const std::string &what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
      ++n;
    return n;
  };
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  std::vector<std::string> types{"6x3x7xf32", "6xf32"};
  std::string specialized = fn.emit(Stage::Specialized, types);
  EXPECT_EQ(count(specialized, "linalg.generic"), 1u) << specialized;
  EXPECT_THAT(specialized, testing::HasSubstr("tensor<6x3x7xf32> into tensor<2x3x3x7xf32>"));
  EXPECT_EQ(count(fn.emit(Stage::Loops, types), "temp "), 0u) << fn.emit(Stage::Loops, types);
  auto k = iota(6 * 3 * 7), w = iota(6, 0.5f);
  std::vector<double> expected(3 * 7, 0.0);
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t d = 0; d < 7; ++d)
      for (int64_t s = 0; s < 6; ++s)
        expected[h * 7 + d] += double(k[(s * 3 + h) * 7 + d]) * w[s];
  expectAllNear(runBoth(text, {borrow(k, {6, 3, 7}), borrow(w, {6})}), expected);
}

// Where reassociation is allowed: the specialized kernel sums in vector lanes. Over a million
// terms it stays within 1e-5 relative of the double-precision sum (the f32 elementwise
// tolerance), as the source-order sum of generic mode does too for these uniform inputs.
TEST(Lowering, ReassociatedLongReductionStaysWithinTolerance) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%m) : tensor<?xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                           iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<?x?xf32>) outs(%init : tensor<?xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %s = arith.addf %acc, %a : f32
        linalg.yield %s : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    })";
  Function fn = context().loadString(text, "lowering.mlir").function("f");
  EXPECT_THAT(fn.emit(Stage::Loops, {"2x1000003xf32"}), testing::HasSubstr("+[reassoc]"));
  EXPECT_THAT(fn.emit(Stage::Loops, {"2x1000003xf32"}, Mode::Generic),
              testing::Not(testing::HasSubstr("[reassoc]")));
  const int64_t n = 1000003;
  auto x = oracle::randomFloats(2 * n, 42, 0, 1);
  std::vector<double> expected(2, 0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < n; ++j)
      expected[i] += x[i * n + j];
  auto results = runBoth(text, {borrow(x, {2, n})});
  auto cmp = oracle::compare(results[0].data(), expected, 1e-5, 0);
  EXPECT_TRUE(cmp.ok) << "specialized: " << cmp.describe();
}

// ---- contraction.ranks' prefetch -----------------------------------------------------------

// Runs a loop program's index arithmetic: its loops, the integer lets of loop variables and
// constants, and each prefetch, whose element index it hands to `visit` with the values of
// the loops around it. Everything else (loads, stores, vector values) it passes over.
class PrefetchWalk {
public:
  using Visit = std::function<void(int64_t index, const std::map<std::string, int64_t> &env)>;
  explicit PrefetchWalk(Visit visit) : visit_(std::move(visit)) {}

  void run(const std::vector<loops::Stmt> &stmts) {
    for (const loops::Stmt &s : stmts) {
      switch (s->kind) {
      case loops::StmtKind::Block: run(s->body); break;
      case loops::StmtKind::For: {
        const int64_t trips = value(s->value);
        for (int64_t i = 0; i < trips; ++i) {
          env_[s->name] = i;
          run(s->body);
        }
        env_.erase(s->name);
        break;
      }
      case loops::StmtKind::Let:
        if (s->lanes == 1 && isArithmetic(s->value))
          env_[s->name] = value(s->value);
        break;
      case loops::StmtKind::Prefetch: visit_(value(s->index), env_); break;
      default: break;
      }
    }
  }

private:
  static bool isArithmetic(const loops::Expr &e) {
    if (e->kind != loops::ExprKind::IntConst && e->kind != loops::ExprKind::Var &&
        e->kind != loops::ExprKind::Binary)
      return false;
    return std::all_of(e->args.begin(), e->args.end(), isArithmetic);
  }
  // `e` with every variable replaced by its value, evaluated as the host evaluates shapes.
  int64_t value(const loops::Expr &e) const { return loops::evaluate(bound(e), nullptr, nullptr); }
  loops::Expr bound(const loops::Expr &e) const {
    if (e->kind == loops::ExprKind::Var)
      return loops::intConst(env_.at(e->name));
    auto copy = std::make_shared<loops::ExprNode>(*e);
    for (loops::Expr &arg : copy->args)
      arg = bound(arg);
    return copy;
  }

  Visit visit_;
  std::map<std::string, int64_t> env_;
};

// A component's function lowered for AVX-512's registers, with no JIT.
loops::Program avx512Program(const std::string &component, const std::string &function,
                             const std::vector<ArgSpec> &args, const std::string &config = "") {
  auto file = std::make_shared<SourceFile>();
  file->name = componentPath(component);
  std::ifstream in(file->name, std::ios::binary);
  file->text.assign(std::istreambuf_iterator<char>(in), {});
  std::unique_ptr<ModuleOp> module = parseModule(file);
  PipelineOptions options;
  options.lowering.target = loops::Target::avx512();
  options.lowering.config = loops::parseConfig(config);
  return runPipeline(*module, function, args, "lowered", options).kernel.program;
}

ArgSpec f32(std::vector<int64_t> shape) {
  return {Type::tensor(ElemKind::F32, std::move(shape)), {}};
}

// mul_mat_id at 64 tokens (128 pairs, 8 experts), two k steps at a time.
loops::Program ranksProgram(int64_t rows, int64_t k, const std::string &config = "") {
  return avx512Program(
      "moe/mul_mat_id.mlir", "mul_mat_id",
      {f32({rows, k, 8}), f32({k, 2, 64}), {Type::tensor(ElemKind::I32, {2, 64}), {}}}, config);
}

// In k blocks of 64 a tile reads each row in runs of 2 KiB, too short for the L2's streamer:
// each tile (4x2 by hand: the slots in four rank blocks) prefetches the next tile's rows of its
// k block while it runs, every line once, spread over all its rank blocks' passes: one line a
// step (of two k), not four in the first pass and the same four again in each of the others.
// Over the whole kernel every row but the first tile's is prefetched, each k block of it by
// the tile before.
TEST(Lowering, RanksTilesPrefetchTheNextRowsOnceOverAllTheirPasses) {
  const int64_t rows = 64, k = 1024, experts = 8, lineElems = 16, rowElems = k * experts;
  const int64_t blockK = 64, kBlocks = k / blockK;
  loops::Program program = ranksProgram(rows, k, "tile=4x2,k-block=64");
  const std::string printed = loops::print(program);
  ASSERT_THAT(printed, testing::HasSubstr("contraction.ranks m=d0 n=- k=d3 tile=4x2 lanes=16 "
                                          "k-block=64"));
  ASSERT_THAT(printed, testing::HasSubstr("for rank_block in 0..4 {"));
  EXPECT_EQ(count(printed, "prefetch weights["), 1) << printed;
  // A tile is one pass of the m_block loop: (m_part, k_block, m_block).
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int64_t>> linesOfTile;
  PrefetchWalk([&](int64_t index, const std::map<std::string, int64_t> &env) {
    EXPECT_EQ(index % lineElems, 0) << "a prefetch in the middle of a line";
    linesOfTile[{env.at("m_part"), env.at("k_block"), env.at("m_block")}].push_back(index /
                                                                                    lineElems);
  }).run(program.body);
  ASSERT_EQ(linesOfTile.size(), size_t(rows / 4 * kBlocks)); // 16 m blocks x 16 k blocks
  std::set<int64_t> rowsPrefetched;
  for (const auto &[tile, lines] : linesOfTile) {
    const auto [part, kBlock, mBlock] = tile;
    SCOPED_TRACE(fmt::format("m_part {}, k_block {}, m_block {}", part, kBlock, mBlock));
    const int64_t nextRow = std::min((part * 2 + mBlock) * 4 + 4, rows - 4);
    std::vector<int64_t> expected;
    for (int64_t row = nextRow; row < nextRow + 4; ++row)
      for (int64_t line = 0; line < blockK * experts / lineElems; ++line)
        expected.push_back((row * rowElems + kBlock * blockK * experts) / lineElems + line);
    EXPECT_EQ(lines, expected); // in order, each once
    for (int64_t row = nextRow; row < nextRow + 4; ++row)
      rowsPrefetched.insert(row);
  }
  EXPECT_EQ(rowsPrefetched.size(), size_t(rows - 4));
  EXPECT_EQ(*rowsPrefetched.begin(), 4);
}

// Over runs of a page or more (the strategy's own choices: whole rows of 32 KiB, or k blocks of
// 1024 where the packed input needs them), each step prefetches each of the tile's rows 1 KiB
// ahead of its read: every line but the first 1 KiB of the first row, or of each k block's run.
// Past a whole row lies the next row; past a k block lie lines read only in the next k block,
// so a k block's prefetches stop at its last line. Runs of 2 KiB are the
// next rows' prefetches' (above).
TEST(Lowering, RanksTilesOverLongRunsPrefetchEachRowAhead) {
  const int64_t rows = 64, experts = 8, lineElems = 16, aheadElems = 1024 / 4;
  for (const int64_t k : {1024, 2048}) {
    SCOPED_TRACE(fmt::format("k = {}", k));
    const int64_t rowElems = k * experts, blockK = std::min<int64_t>(k, 1024);
    const int64_t runElems = blockK * experts;
    loops::Program program = ranksProgram(rows, k);
    const std::string printed = loops::print(program);
    ASSERT_THAT(printed,
                testing::HasSubstr(k == 1024 ? "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16\n"
                                             : "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 "
                                               "k-block=1024"));
    EXPECT_EQ(count(printed, "prefetch"), 4) << printed; // one per row of the tile
    // Each step's prefetches, by (first row of the tile, k block, rank block, step).
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::set<int64_t>> ofStep;
    std::set<int64_t> lines;
    PrefetchWalk([&](int64_t index, const std::map<std::string, int64_t> &env) {
      EXPECT_EQ(index % lineElems, 0) << "a prefetch in the middle of a line";
      const int64_t firstRow = env.count("m_part") ? (env.at("m_part") * 2 + env.at("m_block")) * 4
                                                   : env.at("m_block") * 4;
      const int64_t kBlock = env.count("k_block") ? env.at("k_block") : 0;
      ofStep[{firstRow, kBlock, env.at("rank_block"), env.at("d3")}].insert(index);
      lines.insert(index / lineElems);
    }).run(program.body);
    ASSERT_EQ(ofStep.size(), size_t(rows / 4 * (k / blockK) * 2 * (blockK / 2)));
    for (const auto &[step, indices] : ofStep) {
      const auto [firstRow, kBlock, rankBlock, d3] = step;
      int64_t ahead = d3 * 2 * experts + aheadElems;
      if (k != blockK)
        ahead = std::min(ahead, runElems - lineElems);
      std::set<int64_t> expected;
      for (int64_t row = firstRow; row < firstRow + 4; ++row)
        expected.insert(row * rowElems + kBlock * runElems + ahead);
      EXPECT_EQ(indices, expected)
          << "tile at row " << firstRow << ", k block " << kBlock << ", step " << d3;
    }
    // Every line of a whole row, or of a k block's run past its first 1 KiB.
    for (int64_t line = 0; line < rows * rowElems / lineElems; ++line)
      if (k == blockK ? line >= aheadElems / lineElems
                      : line % (runElems / lineElems) >= aheadElems / lineElems) {
        ASSERT_TRUE(lines.count(line)) << "line " << line << " never prefetched";
      }
    if (k != blockK) {
      EXPECT_LT(*lines.rbegin(), rows * rowElems / lineElems);
    }
  }
  // 2 KiB runs: the next rows' two prefetches a step (see above); 4 KiB runs: this one's four.
  EXPECT_EQ(count(loops::print(ranksProgram(64, 1024, "k-block=64")), "prefetch"), 2);
  EXPECT_EQ(count(loops::print(ranksProgram(64, 1024, "k-block=128")), "prefetch"), 4);
}

// At one token (contraction.choices: each step a row's 8 experts at one k, a half line), each
// step prefetches each of the tile's rows 2 KiB ahead: every line of the weights but the first
// 2 KiB asked for before the tile reads it, past a row's end the next row's first lines.
TEST(Lowering, ChoicesTilesPrefetchEachRowAhead) {
  const int64_t rows = 64, k = 1024, experts = 8, lineElems = 16, aheadElems = 2048 / 4;
  loops::Program program = avx512Program(
      "moe/mul_mat_id.mlir", "mul_mat_id",
      {f32({rows, k, experts}), f32({k, 2, 1}), {Type::tensor(ElemKind::I32, {2, 1}), {}}});
  const std::string printed = loops::print(program);
  ASSERT_THAT(printed, testing::HasSubstr("contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8"));
  EXPECT_EQ(count(printed, "prefetch"), 4) << printed;             // one per row of the tile
  std::map<std::pair<int64_t, int64_t>, std::set<int64_t>> ofStep; // by (m block, k)
  std::set<int64_t> lines;
  PrefetchWalk([&](int64_t index, const std::map<std::string, int64_t> &env) {
    ofStep[{env.at("m_block"), env.at("d3")}].insert(index);
    lines.insert(index / lineElems);
  }).run(program.body);
  ASSERT_EQ(ofStep.size(), size_t(rows / 4 * k));
  for (const auto &[step, indices] : ofStep) {
    const auto [mBlock, kk] = step;
    std::set<int64_t> expected;
    for (int64_t row = mBlock * 4; row < mBlock * 4 + 4; ++row)
      expected.insert(row * k * experts + kk * experts + aheadElems);
    EXPECT_EQ(indices, expected) << "m block " << mBlock << ", k " << kk;
  }
  for (int64_t line = aheadElems / lineElems; line < rows * k * experts / lineElems; ++line)
    ASSERT_TRUE(lines.count(line)) << "line " << line << " never prefetched";
}

// A GEMV streams the weights 8 rows a step in each of two parts (split k), and each load
// prefetches its line of the next step's rows: every line of those 8 rows once. After a part's
// last step that is the next part's first rows; after the last step, the step's own rows
// rather than lines past the weights.
TEST(Lowering, StreamStepsPrefetchTheNextStepsRowsLineByLine) {
  const int64_t k = 64, n = 256, lineElems = 16, rowLines = n / lineElems;
  loops::Program program =
      avx512Program("linear/matmul.mlir", "matmul", {f32({1, k}), f32({k, n})});
  ASSERT_THAT(loops::print(program),
              testing::HasSubstr("contraction.stream m=- n=d1 k=d2 tile=8x2 lanes=16 split=k "
                                 "prefetch=1"));
  std::map<std::pair<int64_t, int64_t>, std::multiset<int64_t>> linesOfStep;
  PrefetchWalk([&](int64_t index, const std::map<std::string, int64_t> &env) {
    EXPECT_EQ(index % lineElems, 0) << "a prefetch in the middle of a line";
    linesOfStep[{env.at("part"), env.at("k_step")}].insert(index / lineElems);
  }).run(program.body);
  ASSERT_EQ(linesOfStep.size(), size_t(2 * (k / 2 / 8)));
  for (const auto &[step, lines] : linesOfStep) {
    const auto [part, kStep] = step;
    SCOPED_TRACE(fmt::format("part {}, k_step {}", part, kStep));
    std::multiset<int64_t> expected;
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t row = std::min(part * (k / 2) + kStep * 8 + 8, k - 8) + r;
      for (int64_t line = 0; line < rowLines; ++line)
        expected.insert(row * rowLines + line);
    }
    EXPECT_EQ(lines, expected);
  }
}

} // namespace
} // namespace frank::test
