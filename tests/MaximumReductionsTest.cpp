// The horizontal maximum and minimum of a vectorized row reduction, taken through the integer
// order of the floats' bits (codegen/MaximumReductions.h): bit for bit what IEEE 754-2019's
// maximum and minimum give, for rows that a wrong order, a missed NaN or a zero of the wrong sign
// would get wrong, in rows of whole vectors and with a scalar tail.
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <limits>

namespace frank::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float bitsToFloat(uint32_t bits) { return std::bit_cast<float>(bits); }

// IEEE 754-2019 maximum (minimum with `least`): NaN if either is, and -0 below +0.
float ieee(float a, float b, bool least) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<float>::quiet_NaN();
  if (a == b)
    return std::signbit(a) == least ? a : b;
  return (a > b) != least ? a : b;
}

std::string reduction(const char *op, const char *init, const char *type = "f32") {
  return fmt::format(R"(
    func.func @f(%x: tensor<?x?x{2}>) -> tensor<?x{2}> {{
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?x?x{2}>
      %init = arith.constant {0} : {2}
      %e = tensor.empty(%n) : tensor<?x{2}>
      %f = linalg.fill ins(%init : {2}) outs(%e : tensor<?x{2}>) -> tensor<?x{2}>
      %r = linalg.reduce ins(%x : tensor<?x?x{2}>) outs(%f : tensor<?x{2}>) dimensions = [1] (%in: {2}, %acc: {2}) {{
        %v = {1} %in, %acc : {2}
        linalg.yield %v : {2}
      }}
      return %r : tensor<?x{2}>
    }})",
                     init, op, type);
}

// Rows of `cols` values, each a trap for one way of getting the order wrong.
std::vector<std::vector<float>> trickyRows(int64_t cols) {
  auto row = [&](float fill) { return std::vector<float>(size_t(cols), fill); };
  std::vector<std::vector<float>> rows;
  rows.push_back(row(-3.0f)); // all negative: the order of their bits is reversed
  rows.back()[size_t(cols / 3)] = -0.25f;
  rows.back()[size_t(cols - 1)] = -7.5f;
  rows.push_back(row(-0.0f)); // -0 and +0: +0 the maximum, -0 the minimum
  rows.back()[size_t(cols / 2)] = 0.0f;
  rows.push_back(row(-0.0f)); // -0 alone
  rows.push_back(row(0.0f));  // +0 alone
  rows.push_back(row(-kInf)); // infinities with a negative and a positive subnormal
  rows.back()[1] = -bitsToFloat(1);
  rows.back()[size_t(cols - 2)] = bitsToFloat(1);
  rows.push_back(row(1.0f)); // the largest floats
  rows.back()[0] = std::numeric_limits<float>::max();
  rows.back()[size_t(cols - 1)] = -std::numeric_limits<float>::max();
  rows.push_back(row(2.0f)); // a NaN in a middle lane
  rows.back()[5] = std::numeric_limits<float>::quiet_NaN();
  rows.push_back(row(2.0f)); // a NaN with its sign bit, the lowest of all bit orders, last
  rows.back()[size_t(cols - 1)] = bitsToFloat(0xFFC00000u);
  rows.push_back(row(kInf)); // a NaN with its sign bit among infinities, first
  rows.back()[0] = bitsToFloat(0xFFC00001u);
  std::vector<float> mixed = row(0.0f); // values of both signs
  for (int64_t c = 0; c < cols; ++c)
    mixed[size_t(c)] = float((c * 37) % 23) * (c % 2 ? -0.5f : 0.25f);
  rows.push_back(mixed);
  return rows;
}

class MaximumReductionTest : public testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(MaximumReductionTest, MatchesIeeeBitForBit) {
  const auto [least, cols] = GetParam();
  Function fn = context()
                    .loadString(reduction(least ? "arith.minimumf" : "arith.maximumf",
                                          least ? "0x7F800000" : "0xFF800000"),
                                "reduce.mlir")
                    .function("f");
  std::vector<std::vector<float>> rows = trickyRows(cols);
  std::vector<float> x;
  for (const auto &r : rows)
    x.insert(x.end(), r.begin(), r.end());
  const int64_t n = int64_t(rows.size());
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {n, cols})}, mode)[0];
    for (int64_t r = 0; r < n; ++r) {
      float want = least ? kInf : -kInf;
      for (float v : rows[size_t(r)])
        want = ieee(v, want, least);
      const float got = y.as<float>()[r];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << "row " << r << ": " << got;
      else
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "row " << r << ": " << got << ", expected " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, MaximumReductionTest,
                         testing::Combine(testing::Bool(), testing::Values<int64_t>(16, 37, 128)),
                         [](const auto &info) {
                           return fmt::format("{}_{}", std::get<0>(info.param) ? "min" : "max",
                                              std::get<1>(info.param));
                         });

// Doubles take 64-bit integers: -0 below +0, negatives reversed, a NaN with its sign bit.
TEST(MaximumReduction, DoublesMatchIeeeBitForBit) {
  const int64_t cols = 40;
  std::vector<std::vector<double>> rows = {std::vector<double>(cols, -0.0),
                                           std::vector<double>(cols, -2.0),
                                           std::vector<double>(cols, 1.0)};
  rows[0][17] = 0.0;
  rows[1][cols - 1] = -0.5;
  rows[2][9] = std::bit_cast<double>(0xFFF8000000000001ull);
  std::vector<double> x;
  for (const auto &r : rows)
    x.insert(x.end(), r.begin(), r.end());
  for (bool least : {false, true}) {
    SCOPED_TRACE(least ? "min" : "max");
    Function fn =
        context()
            .loadString(reduction(least ? "arith.minimumf" : "arith.maximumf",
                                  least ? "0x7FF0000000000000" : "0xFFF0000000000000", "f64"),
                        "reduce.mlir")
            .function("f");
    Tensor y = fn({Tensor::borrow(x.data(), DType::F64, {int64_t(rows.size()), cols})})[0];
    const double want[2][3] = {{0.0, -0.5, 0.0}, {-0.0, -2.0, 0.0}};
    for (size_t r = 0; r < 2; ++r)
      EXPECT_EQ(std::bit_cast<uint64_t>(y.as<double>()[r]), std::bit_cast<uint64_t>(want[least][r]))
          << "row " << r << ": " << y.as<double>()[r];
    EXPECT_TRUE(std::isnan(y.as<double>()[2]));
  }
}

// The vectorized reduction's last step is an integer one: no expansion of `maximum` is left.
TEST(MaximumReduction, HorizontalStepIsAnIntegerMaximum) {
  for (auto [cpu, lanes] : {std::pair{kAvx512Cpu, 16}, std::pair{kAvx2Cpu, 8}}) {
    SCOPED_TRACE(cpu);
    Context ctx(forCpu(cpu));
    Function fn =
        ctx.loadString(reduction("arith.maximumf", "0xFF800000"), "reduce.mlir").function("f");
    const std::string ir = fn.emit(Stage::OptimizedLLVM, {"64x128xf32"});
    EXPECT_THAT(ir,
                testing::HasSubstr(fmt::format("call i32 @llvm.vector.reduce.smax.v{}i32", lanes)))
        << ir;
    EXPECT_THAT(ir, testing::Not(testing::HasSubstr("reduce.fmaximum"))) << ir;
  }
}

} // namespace
} // namespace frank::test
