// rope (components/position/rope.mlir) against its oracle, over many shapes and frequency
// settings, in specialized and generic modes, with guard regions around every output; then
// position 0, large positions, the i64 -> i32 truncation of positions, and the S4 shape.
//
// Tolerance (MLIR-SUBSET.md §10, rope): rtol 1e-4, atol 1e-5. The angle a = float(int32(pos)) *
// theta_i is formed in f32 by the kernel and by the oracle alike (one correctly rounded multiply
// of the same operands, provided powf gives the same theta_i), so the differences come from sin
// and cos (a few ulp, polynomial or libm) and from the rotation's two products and one sum in f32
// (possibly contracted to an FMA): a few 1e-7 relative to |x|. The atol covers outputs that
// cancel to near zero. Position 0 must return the input within the f32 elementwise tolerance
// (rtol 1e-5, atol 1e-6).
//
// The angle is only as exact as theta_i. §4.3 lets powf be off by a few ulp, and one ulp of
// theta_i moves the angle by up to pos * theta_i * 2^-23: 5e-4 rad at pos = 4000 and theta_i
// near 1, over this tolerance. frank-jit computes powf as pow of doubles rounded once, which is
// correctly rounded but in rare cases (Math.PowfRoundsOnceFromDoubles); its vectorized f32 pow
// had been off by 0.55 ulp at a few theta_i of base 1e4, D = 128. glibc's powf differs from the
// correctly rounded result for about 0.1% of rope's (base, D, i). So every comparison, which
// holds any faithful powf to the tolerance, accepts, for each pair index i, either f32
// neighbour of the exact power base^-(2i/D) (what any faithfully rounded powf returns), and
// requires all outputs of that pair index to match the oracle computed with one of them at
// rtol 1e-4, atol 1e-5. A powf worse than one ulp fails at large positions, and the message
// names the pair index. The sine and cosine of thousands of radians are also checked alone, with
// settings whose theta_i are exact powers of two (any powf gets those exactly).
#include "TestSupport.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

namespace frank::test {
namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5; // see the file comment

Function ropeFunction() {
  static Module module = context().load(componentPath("position/rope.mlir"));
  return module.function("rope");
}

struct RopeDims {
  int64_t b, s, h, d;
  int64_t numel() const { return b * s * h * d; }
  std::vector<int64_t> shape() const { return {b, s, h, d}; }
};

/// Runs rope on x and positions into a guarded output; returns the output values and checks the
/// guards.
std::vector<float> runRope(const RopeDims &dims, std::vector<float> &x,
                           std::vector<int64_t> &positions, float base, float scale, Mode mode) {
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, dims.shape()),
                        Tensor::borrow(positions.data(), DType::I64, {dims.b, dims.s}),
                        Scalar::f32(base), Scalar::f32(scale)};
  Kernel kernel = ropeFunction().specialize(args, mode);
  GuardedOutput out(dims.shape());
  std::vector<Tensor> outputs{out.tensor()};
  kernel.run(args, outputs);
  EXPECT_EQ(out.guardsIntact(), "");
  return std::vector<float>(out.data(), out.data() + dims.numel());
}

bool within(double actual, double expected, double rtol, double atol) {
  const double error = std::fabs(actual - expected);
  return !std::isnan(error) && error <= atol + rtol * std::fabs(expected);
}

/// Runs rope and compares it with the oracle at the rope tolerance, accepting for each pair
/// index either faithfully rounded theta_i (see the file comment).
void checkRope(const RopeDims &dims, std::vector<float> &x, std::vector<int64_t> &positions,
               float base, float scale, Mode mode) {
  auto y = runRope(dims, x, positions, base, scale, mode);
  const int64_t half = dims.d / 2;
  std::vector<float> down(static_cast<size_t>(half)), up(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    std::tie(down[i], up[i]) = oracle::ropeThetaFaithful(i, dims.d, base, scale);
  auto expectedDown = oracle::rope(x.data(), positions.data(), dims.b, dims.s, dims.h, dims.d, base,
                                   scale, down.data());
  auto expectedUp = oracle::rope(x.data(), positions.data(), dims.b, dims.s, dims.h, dims.d, base,
                                 scale, up.data());
  // firstBad[i][0 or 1]: the first element of pair index i that misses the down / up oracle.
  std::vector<std::array<int64_t, 2>> firstBad(static_cast<size_t>(half), {-1, -1});
  for (int64_t n = 0; n < dims.numel(); ++n) {
    const int64_t i = (n % dims.d) / 2;
    if (firstBad[i][0] < 0 && !within(y[n], expectedDown[n], kRtol, kAtol))
      firstBad[i][0] = n;
    if (firstBad[i][1] < 0 && !within(y[n], expectedUp[n], kRtol, kAtol))
      firstBad[i][1] = n;
  }
  for (int64_t i = 0; i < half; ++i) {
    if (firstBad[i][0] < 0 || firstBad[i][1] < 0)
      continue;
    const int64_t n = std::min(firstBad[i][0], firstBad[i][1]);
    const int64_t token = n / (dims.h * dims.d);
    ADD_FAILURE() << fmt::format(
        "pair index {} (elements {}, {}) matches the oracle with neither theta_i = {:a} nor {:a}: "
        "first at element {} (position {}): got {:.9g}, expected {:.9g} or {:.9g}",
        i, 2 * i, 2 * i + 1, down[i], up[i], n, positions[token], y[n], expectedDown[n],
        expectedUp[n]);
    return; // one pair index is enough to say what is wrong
  }
}

// ---- shapes --------------------------------------------------------------------------------

struct RopeShape {
  int64_t b, s, h, d;
  float base, scale;
  int64_t start; // positions[b, s] = start + 3 * b + s: a prefill from `start`, per sequence
};

class RopeTest : public testing::TestWithParam<std::tuple<RopeShape, Mode>> {};

TEST_P(RopeTest, MatchesOracle) {
  auto [shape, mode] = GetParam();
  RopeDims dims{shape.b, shape.s, shape.h, shape.d};
  auto x = oracle::randomFloats(dims.numel(), 5 + shape.b * 3 + shape.s * 7 + shape.h * 11 +
                                                  shape.d * 13 + shape.start);
  std::vector<int64_t> positions(static_cast<size_t>(shape.b * shape.s));
  for (int64_t b = 0; b < shape.b; ++b)
    for (int64_t s = 0; s < shape.s; ++s)
      positions[b * shape.s + s] = shape.start + 3 * b + s;
  checkRope(dims, x, positions, shape.base, shape.scale, mode);
}

// Head dims 2 (one pair), small and odd pair counts (6, 10, 18, 30, 34, 126), 64 and 128;
// one token (decode) and many; one head and 32; bases of Llama 2 (1e4), Llama 3 (5e5) and
// 1e6, with linear position scaling (scale < 1) on some.
const RopeShape kRopeShapes[] = {
    {1, 1, 1, 2, 10000.f, 1.f, 0},        {1, 1, 1, 64, 10000.f, 1.f, 5},
    {1, 1, 1, 128, 10000.f, 1.f, 17},     {2, 3, 5, 2, 10000.f, 1.f, 1},
    {1, 7, 3, 64, 10000.f, 1.f, 0},       {3, 13, 2, 128, 10000.f, 1.f, 40},
    {2, 17, 4, 18, 10000.f, 0.5f, 3},     {1, 31, 7, 30, 500000.f, 1.f, 0},
    {1, 1, 32, 128, 10000.f, 1.f, 511},   {4, 64, 8, 64, 10000.f, 1.f, 0},
    {1, 257, 2, 6, 10000.f, 1.f, 0},      {5, 3, 11, 126, 1000000.f, 0.25f, 100},
    {2, 5, 3, 10, 10000.f, 1.f, 9},       {1, 37, 1, 34, 10000.f, 1.f, 200},
    {1, 16, 8, 128, 500000.f, 1.f, 1000}, {3, 1, 4, 64, 10000.f, 1.f, 255},
    {1, 100, 2, 128, 1000000.f, 1.f, 0},  {2, 11, 13, 4, 10000.f, 2.f, 0},
};

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         testing::Combine(testing::ValuesIn(kRopeShapes),
                                          testing::Values(Mode::Specialized, Mode::Generic)),
                         [](const auto &info) {
                           const RopeShape &s = std::get<0>(info.param);
                           return fmt::format("rope_b{}_s{}_h{}_d{}_base{}_scale{}_from{}_{}", s.b,
                                              s.s, s.h, s.d, static_cast<int64_t>(s.base),
                                              static_cast<int64_t>(s.scale * 100), s.start,
                                              modeName(std::get<1>(info.param)));
                         });

// ---- position 0 ----------------------------------------------------------------------------

// Position 0 gives a = 0 for every pair: cos 1, sin 0, and the input comes back within the f32
// elementwise tolerance (§10: rtol 1e-5, atol 1e-6).
TEST(RopePositionZero, ReturnsTheInput) {
  const RopeDims shapes[] = {{1, 1, 1, 2}, {2, 3, 4, 64}, {1, 5, 3, 128}, {3, 7, 2, 30}};
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (const RopeDims &dims : shapes) {
      SCOPED_TRACE(fmt::format("{} {}x{}x{}x{}", modeName(mode), dims.b, dims.s, dims.h, dims.d));
      auto x = oracle::randomFloats(dims.numel(), 77 + dims.numel(), -4, 4);
      std::vector<int64_t> positions(static_cast<size_t>(dims.b * dims.s), 0);
      auto y = runRope(dims, x, positions, 10000.f, 1.f, mode);
      std::vector<double> input(x.begin(), x.end());
      auto cmp = oracle::compare(y.data(), input, 1e-5, 1e-6);
      EXPECT_TRUE(cmp.ok) << cmp.describe();
    }
}

// ---- large positions -----------------------------------------------------------------------

std::vector<int64_t> randomPositions(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t &v : p)
    v = dist(rng);
  return p;
}

// Exact theta_i: freq_base 2^16 with D = 16 gives theta_i = 2^16^(-i/8) * scale = 4^-i * scale,
// and freq_base 1 gives theta_i = scale for every i (powf(1, y) = 1). The f32 angles are then
// the same on both sides whatever powf does, and this checks sin and cos alone, at positions
// up to 65535 (angles up to 65535 rad).
TEST(RopeLargePositions, SinCosAccurateForThousandsOfRadians) {
  struct Case {
    RopeDims dims;
    float base, scale;
  };
  const Case cases[] = {
      {{2, 32, 3, 16}, 65536.f, 1.f}, {{1, 64, 2, 8}, 1.f, 0.7f}, {{3, 17, 1, 16}, 65536.f, 3.f}};
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (const Case &c : cases) {
      SCOPED_TRACE(
          fmt::format("{} base {} scale {} d {}", modeName(mode), c.base, c.scale, c.dims.d));
      auto x = oracle::randomFloats(c.dims.numel(), 9 + c.dims.numel());
      auto positions = randomPositions(c.dims.b * c.dims.s, 1000, 65535, c.dims.numel());
      positions[0] = 65535;
      positions[1] = 4096;
      checkRope(c.dims, x, positions, c.base, c.scale, mode);
    }
}

// Realistic settings (base 1e4 and 5e5, D = 64 and 128) at positions in the thousands, as in
// long-context decoding: sine and cosine of large angles, and a faithfully rounded powf (see the
// file comment).
TEST(RopeLargePositions, RealisticBasesAtThousands) {
  struct Case {
    RopeDims dims;
    float base;
  };
  const Case cases[] = {
      {{1, 48, 4, 128}, 10000.f}, {{2, 24, 2, 64}, 10000.f}, {{1, 40, 2, 128}, 500000.f}};
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    for (const Case &c : cases) {
      SCOPED_TRACE(fmt::format("{} base {} d {}", modeName(mode), c.base, c.dims.d));
      auto x = oracle::randomFloats(c.dims.numel(), 21 + c.dims.numel());
      auto positions = randomPositions(c.dims.b * c.dims.s, 1000, 8191, c.dims.numel() + 1);
      positions[0] = 8191;
      positions[1] = 4095;
      checkRope(c.dims, x, positions, c.base, 1.f, mode);
    }
}

// ---- i64 positions truncated to i32 --------------------------------------------------------

// The interface converts int32(pos): 2^32 + 100 acts as 100, 2^32 - 1 as -1, 2^33 - 5 as -5,
// -2^31 stays -2^31. The kernel gives the same bits as for the truncated positions, and matches
// the oracle (which truncates too).
TEST(RopePositions, TruncatedToI32) {
  const RopeDims dims{1, 6, 3, 16};
  auto x = oracle::randomFloats(dims.numel(), 99);
  std::vector<int64_t> wide{(int64_t{1} << 32) + 100, (int64_t{1} << 32) - 1,
                            (int64_t{1} << 33) - 5,   -(int64_t{1} << 31),
                            (int64_t{1} << 40) + 7,   -(int64_t{1} << 32) + 3};
  std::vector<int64_t> narrow{100, -1, -5, -(int64_t{1} << 31), 7, 3};
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    auto fromWide = runRope(dims, x, wide, 10000.f, 1.f, mode);
    auto fromNarrow = runRope(dims, x, narrow, 10000.f, 1.f, mode);
    EXPECT_EQ(0, std::memcmp(fromWide.data(), fromNarrow.data(), fromWide.size() * 4));
    checkRope(dims, x, wide, 10000.f, 1.f, mode);
  }
}

// ---- errors --------------------------------------------------------------------------------

// D must be even (the [D/2, 2] view of the head dim does not exist otherwise), and positions'
// [B, S] must equal input's.
TEST(RopeErrors, ShapeMismatchesAreErrors) {
  // Checked when the kernel is specialized (specialized mode) or run (generic mode, whose kernel
  // is shared by every shape of the same ranks), so call it.
  auto call = [](std::vector<int64_t> input, std::vector<int64_t> positions, Mode mode) {
    ropeFunction()({Tensor::zeros(DType::F32, std::move(input)),
                    Tensor::zeros(DType::I64, std::move(positions)), Scalar::f32(10000.f),
                    Scalar::f32(1.f)},
                   mode);
  };
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    EXPECT_THROW(call({1, 2, 3, 7}, {1, 2}, mode), Error);
    EXPECT_THROW(call({1, 2, 3, 8}, {1, 3}, mode), Error);
    EXPECT_THROW(call({2, 2, 3, 8}, {1, 2}, mode), Error);
    EXPECT_NO_THROW(call({2, 2, 3, 8}, {2, 2}, mode));
  }
}

// ---- benchmark shape -----------------------------------------------------------------------

// S4: input [1, 128, 32, 128], positions 0..127, base 1e4 (prefill of a Llama-7B layer's q).
// Specialized mode only; it runs in well under 2 s including the oracle.
TEST(RopeBenchmarkShape, S4Specialized) {
  const RopeDims dims{1, 128, 32, 128};
  auto x = oracle::randomFloats(dims.numel(), 4);
  std::vector<int64_t> positions(128);
  for (int64_t s = 0; s < 128; ++s)
    positions[s] = s;
  checkRope(dims, x, positions, 10000.f, 1.f, Mode::Specialized);
}

} // namespace
} // namespace frank::test
