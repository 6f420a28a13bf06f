// Shape-specialization tests: every component against its oracle over many shapes (1, primes,
// sizes that are not multiples of the vector width, the benchmark shapes), in specialized and
// generic modes, with guard regions around every output.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

// ---- rms_norm ------------------------------------------------------------------------------

struct RmsShape {
  int64_t rows, cols;
};

// Tolerance (MLIR-SUBSET.md §10, f32 short reductions): rtol 1e-5, atol 1e-6. The specialized
// kernel sums squares in vector lanes (reassociated), generic mode sums in source order; both
// keep the f32 sum's relative error near sqrt(E) * 2^-24 ~ 4e-6 at E = 4096 for these positive
// summands, and the square root halves it.
class RmsNormTest : public testing::TestWithParam<std::tuple<RmsShape, Mode>> {};

TEST_P(RmsNormTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  static Module module = context().load(componentPath("normalization/rms_norm.mlir"));
  for (const char *name : {"rms_norm_linalg", "rms_norm_fused"}) {
    SCOPED_TRACE(name);
    Function fn = module.function(name);
    auto x = oracle::randomFloats(shape.rows * shape.cols, 1 + shape.rows * 31 + shape.cols, -2, 2);
    auto w = oracle::randomFloats(shape.cols, 7 + shape.cols, 0.5f, 1.5f);
    const float eps = 1e-6f;
    Tensor xt = Tensor::borrow(x.data(), DType::F32, {shape.rows, shape.cols});
    Tensor wt = Tensor::borrow(w.data(), DType::F32, {shape.cols});
    std::vector<Arg> args{xt, wt, Scalar::f32(eps)};
    Kernel kernel = fn.specialize(args, mode);
    GuardedOutput out({shape.rows, shape.cols});
    std::vector<Tensor> outputs{out.tensor()};
    kernel.run(args, outputs);
    EXPECT_EQ(out.guardsIntact(), "");
    auto expected = oracle::rmsNorm(x.data(), w.data(), eps, shape.rows, shape.cols);
    auto cmp = oracle::compare(out.data(), expected, 1e-5, 1e-6);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

const RmsShape kRmsShapes[] = {
    {1, 1},    {1, 2},    {1, 7},    {3, 13},   {2, 17},    {5, 31},   {8, 15},
    {64, 16},  {7, 64},   {4, 100},  {13, 127}, {31, 129},  {1, 255},  {17, 257},
    {11, 333}, {2, 1000}, {3, 1023}, {1, 4096}, {32, 4096}, {2, 4099},
};

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         testing::Combine(testing::ValuesIn(kRmsShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const RmsShape &s = std::get<0>(info.param);
                           return fmt::format("rms_norm_rows_{}_cols_{}_{}", s.rows, s.cols,
                                              modeName(std::get<1>(info.param)));
                         });

// ---- swiglu --------------------------------------------------------------------------------

struct SwigluShape {
  int64_t d0, d1, d2;
};

// Tolerance: rtol 1e-5, atol 1e-6 (f32 elementwise). Specialized mode computes exp with frank's
// own (about 1 ulp, MathFunctions.cpp) and contracts multiply-adds; the result goes through one
// divide and two multiplies, so a few ulp in all, well inside 1e-5.
class SwigluTest : public testing::TestWithParam<std::tuple<SwigluShape, Mode>> {};

TEST_P(SwigluTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  static Module module = context().load(componentPath("activation/swiglu.mlir"));
  Function fn = module.function("swiglu");
  int64_t n = shape.d0 * shape.d1 * shape.d2;
  std::vector<int64_t> dims{shape.d0, shape.d1, shape.d2};
  // Wide enough to exercise exp's range reduction in both directions.
  auto gate = oracle::randomFloats(n, 11 + n, -4, 4);
  auto up = oracle::randomFloats(n, 13 + n, -12, 12);
  std::vector<Arg> args{Tensor::borrow(gate.data(), DType::F32, dims),
                        Tensor::borrow(up.data(), DType::F32, dims)};
  Kernel kernel = fn.specialize(args, mode);
  GuardedOutput out(dims);
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  auto cmp = oracle::compare(out.data(), oracle::swiglu(gate.data(), up.data(), n), 1e-5, 1e-6);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

const SwigluShape kSwigluShapes[] = {
    {1, 1, 1},    {1, 1, 7},    {1, 2, 3},    {2, 3, 5},     {1, 1, 15},
    {2, 1, 16},   {7, 7, 7},    {3, 5, 17},   {3, 17, 19},   {1, 7, 31},
    {1, 11, 33},  {2, 2, 64},   {1, 13, 100}, {4, 4, 127},   {5, 1, 255},
    {1, 1, 1000}, {2, 3, 1023}, {1, 3, 4097}, {1, 1, 14336}, {1, 32, 14336},
};

INSTANTIATE_TEST_SUITE_P(Shapes, SwigluTest,
                         testing::Combine(testing::ValuesIn(kSwigluShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const SwigluShape &s = std::get<0>(info.param);
                           return fmt::format("swiglu_{}x{}x{}_{}", s.d0, s.d1, s.d2,
                                              modeName(std::get<1>(info.param)));
                         });

// Special values: exp overflows and underflows inside silu, NaN and infinities propagate.
TEST(SwigluEdgeValues, ExtremesAndNonFinite) {
  Function fn = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> up{-200.f, -88.f, -87.f,  0.f,     87.f, 88.f,
                        89.f,   200.f, 1e-30f, -1e-30f, inf,  nan};
  std::vector<float> gate(up.size(), 1.5f);
  const int64_t n = static_cast<int64_t>(up.size());
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    auto result = fn({Tensor::borrow(gate.data(), DType::F32, {1, 1, n}),
                      Tensor::borrow(up.data(), DType::F32, {1, 1, n})},
                     mode);
    const float *y = result[0].as<float>();
    auto expected = oracle::swiglu(gate.data(), up.data(), n);
    for (int64_t i = 0; i + 2 < n; ++i)
      EXPECT_NEAR(y[i], expected[i], 1e-6 + 1e-5 * std::fabs(expected[i])) << "up = " << up[i];
    EXPECT_EQ(y[n - 2], inf) << "silu(+inf) is +inf";
    EXPECT_TRUE(std::isnan(y[n - 1])) << "NaN propagates";
  }
}

// Generic mode is a second implementation: on the same inputs it agrees with specialized mode
// to the elementwise tolerance.
TEST(DifferentialTest, GenericAgreesWithSpecialized) {
  Function fn =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  auto x = oracle::randomFloats(9 * 300, 5);
  auto w = oracle::randomFloats(300, 6);
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {9, 300}),
                        Tensor::borrow(w.data(), DType::F32, {300}), Scalar::f32(1e-5f)};
  Tensor a = fn(args, Mode::Specialized)[0], b = fn(args, Mode::Generic)[0];
  std::vector<double> reference(b.as<float>(), b.as<float>() + b.numel());
  auto cmp = oracle::compare(a.as<float>(), reference, 1e-5, 1e-6);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

} // namespace
} // namespace frank::test
