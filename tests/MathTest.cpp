// The math dialect: each op against the C library in double, over its useful range, in both
// modes; and, when specialized, vectorized (frank's own exp, libmvec for the rest).
#include "TestSupport.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace frank::test {
namespace {

struct MathCase {
  const char *op; // "math.sin" or, with two operands, "math.powf"
  float lo, hi;   // input range
  double (*reference)(double);
  double ulps;  // allowed error in units of float's epsilon, relative to max(|ref|, floor)
  double floor; // magnitude below which the error counts as absolute
};

double rsqrtRef(double x) { return 1.0 / std::sqrt(x); }

// Tolerances: a few ulp for the libm and libmvec functions (glibc documents up to 4 ulp for
// libmvec), frank's exp about 1 ulp in either form (measured 1.06 at most over 5 million inputs
// in [-104, 89]); sin and cos at thousands of radians are
// compared absolutely, since their values are O(1).
const MathCase kCases[] = {
    {"math.exp", -87.f, 88.f, [](double x) { return std::exp(x); }, 4, 0},
    {"math.exp2", -126.f, 127.f, [](double x) { return std::exp2(x); }, 4, 0},
    {"math.log", 1e-30f, 1e30f, [](double x) { return std::log(x); }, 4, 1},
    {"math.sqrt", 0.f, 1e30f, [](double x) { return std::sqrt(x); }, 1, 0},
    {"math.rsqrt", 1e-30f, 1e30f, rsqrtRef, 2, 0},
    {"math.tanh", -12.f, 12.f, [](double x) { return std::tanh(x); }, 4, 1e-3},
    {"math.sin", -6000.f, 6000.f, [](double x) { return std::sin(x); }, 4, 1},
    {"math.cos", -6000.f, 6000.f, [](double x) { return std::cos(x); }, 4, 1},
    {"math.erf", -5.f, 5.f, [](double x) { return std::erf(x); }, 4, 1e-3},
    {"math.absf", -1e30f, 1e30f, [](double x) { return std::fabs(x); }, 0, 0},
};

std::string unaryComponent(const char *op) {
  return fmt::format(R"(
    func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {{
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %r = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}}
          ins(%x : tensor<?xf32>) outs(%e : tensor<?xf32>) {{
      ^bb0(%a: f32, %o: f32):
        %y = {} %a : f32
        linalg.yield %y : f32
      }} -> tensor<?xf32>
      return %r : tensor<?xf32>
    }})",
                     op);
}

std::vector<float> spread(float lo, float hi, int64_t n) {
  // Evenly spaced, geometrically when the range spans many decades of positive values.
  std::vector<float> v(static_cast<size_t>(n));
  bool geometric = lo > 0 && hi / lo > 1e6f;
  for (int64_t i = 0; i < n; ++i) {
    double t = static_cast<double>(i) / static_cast<double>(n - 1);
    v[i] = geometric ? static_cast<float>(lo * std::pow(static_cast<double>(hi) / lo, t))
                     : static_cast<float>(lo + (static_cast<double>(hi) - lo) * t);
  }
  return v;
}

class MathOpTest : public testing::TestWithParam<MathCase> {};

TEST_P(MathOpTest, MatchesLibmInBothModes) {
  const MathCase &c = GetParam();
  static Context ctx;
  Function fn = ctx.loadString(unaryComponent(c.op), "math.mlir").function("f");
  const int64_t n = 10007;
  std::vector<float> x = spread(c.lo, c.hi, n);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(mode == Mode::Specialized ? "specialized" : "generic");
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {n})}, mode)[0];
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      double ref = c.reference(x[i]);
      double got = y.as<float>()[i];
      double scale = std::max(std::fabs(ref), c.floor);
      double allowed = std::max(c.ulps, 0.5) * std::ldexp(1.0, -23) * scale;
      if (std::isinf(ref) && got == ref)
        continue;
      if (!(std::fabs(got - ref) <= allowed)) {
        ++bad;
        ADD_FAILURE() << c.op << "(" << x[i] << ") = " << got << ", expected " << ref << " (error "
                      << std::fabs(got - ref) / (std::ldexp(1.0, -23) * scale) << " ulp)";
      }
    }
  }
}

TEST_P(MathOpTest, PropagatesNaN) {
  const MathCase &c = GetParam();
  static Context ctx;
  Function fn = ctx.loadString(unaryComponent(c.op), "math.mlir").function("f");
  std::vector<float> x(9, std::numeric_limits<float>::quiet_NaN());
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {9})}, mode)[0];
    for (int i = 0; i < 9; ++i)
      EXPECT_TRUE(std::isnan(y.as<float>()[i])) << c.op << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, MathOpTest, testing::ValuesIn(kCases), [](const auto &info) {
  std::string name = info.param.op;
  return name.substr(name.find('.') + 1);
});

// powf is pow of doubles rounded once to f32: the correctly rounded power but in rare cases,
// the same on every CPU, in vector lanes and alone. Rope's angles magnify an ulp of
// base^(-2i/D) by the position (at 70000, 2e-3 rad): the 8- and 16-lane f32 pow had been 0.55
// ulp off at five of base 1e4's 64 powers for D = 128, the scalar one not.
TEST(Math, PowfRoundsOnceFromDoubles) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%x, %y : tensor<?xf32>, tensor<?xf32>) outs(%e : tensor<?xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %p = math.powf %a, %b : f32
        linalg.yield %p : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    })";
  std::vector<float> base = spread(1e-3f, 1e4f, 1001), exponent = spread(-8.f, 8.f, 1001);
  for (float b : {1e4f, 5e5f})
    for (int d : {64, 128})
      for (int i = 0; i < d / 2; ++i) {
        base.push_back(b);
        exponent.push_back(-2.f * static_cast<float>(i) / static_cast<float>(d));
      }
  const int64_t n = static_cast<int64_t>(base.size());
  for (const char *cpu : {"", "x86-64-v3", "x86-64"}) {
    ContextOptions options;
    options.cpu = cpu;
    Context ctx(options);
    Function fn = ctx.loadString(text, "math.mlir").function("f");
    for (Mode mode : {Mode::Specialized, Mode::Generic}) {
      SCOPED_TRACE(fmt::format("cpu '{}', {}", cpu, modeName(mode)));
      for (int64_t count : {n, int64_t{1}}) // in vector lanes, and alone
        for (int64_t first = 0; first < n; first += count) {
          Tensor y = fn({Tensor::borrow(base.data() + first, DType::F32, {count}),
                         Tensor::borrow(exponent.data() + first, DType::F32, {count})},
                        mode)[0];
          for (int64_t i = 0; i < count; ++i) {
            const float want =
                static_cast<float>(std::pow(double(base[first + i]), double(exponent[first + i])));
            ASSERT_EQ(y.as<float>()[i], want) << base[first + i] << "^" << exponent[first + i];
          }
          if (count == 1 && first >= 8)
            break; // alone: a few suffice
        }
    }
  }
  // f64 powf is libm's pow itself, in lanes too: libmvec's double pow is an ulp off at times
  // (3^-1 came out 0.33333333333333337 from 3 elements up).
  std::string f64 = text;
  for (size_t at; (at = f64.find("f32")) != std::string::npos;)
    f64.replace(at, 3, "f64");
  std::vector<double> x(64, 3.0), y(64, -1.0);
  for (int64_t i = 0; i < 64; ++i)
    x[size_t(i)] += double(i) / 7, y[size_t(i)] -= double(i) / 13;
  for (const char *cpu : {"", "x86-64-v3"}) {
    ContextOptions options;
    options.cpu = cpu;
    Context ctx(options);
    Tensor p = ctx.loadString(f64, "math.mlir")
                   .function("f")({Tensor::borrow(x.data(), DType::F64, {64}),
                                   Tensor::borrow(y.data(), DType::F64, {64})})[0];
    for (int64_t i = 0; i < 64; ++i)
      ASSERT_EQ(p.as<double>()[i], std::pow(x[size_t(i)], y[size_t(i)])) << cpu << " " << i;
  }
}

// exp at the ends of float's range, where the scaling by 2^n must overflow to +inf, round into
// the subnormals and underflow to 0 as libm does (e^88.5 and e^88.7 are finite, e^88.73 is not;
// e^-100 is subnormal), and far past them, where the range reduction no longer holds. Within 2
// ulp of the float result, counted in units of the smallest subnormal below FLT_MIN. Each value
// is checked in a vector lane (a multiple of 16 values) and alone (the scalar remainder loop).
TEST(Math, ExpAtTheEndsOfTheRange) {
  static Context ctx;
  Function fn = ctx.loadString(unaryComponent("math.exp"), "math.mlir").function("f");
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {
      88.3f, 88.5f, 88.7f,  88.72f, 88.73f, 89.f,   100.f,  104.f,  2e5f,  1e30f,  3e38f, inf,
      -87.f, -87.5f, -90.f, -95.f,  -100.f, -103.f, -104.f, -110.f, -200.f, -2e5f, -3e38f, -inf};
  // Magnitudes from 128 to FLT_MAX, where x - n ln2 is no longer small.
  for (float v = 128.f; v < 3e38f; v *= 1.7f) {
    values.push_back(v);
    values.push_back(-v);
  }
  auto check = [&](const std::vector<float> &x, Mode mode) {
    const int64_t n = static_cast<int64_t>(x.size());
    Tensor y = fn({Tensor::borrow(const_cast<float *>(x.data()), DType::F32, {n})}, mode)[0];
    for (int64_t i = 0; i < n; ++i) {
      float ref = std::exp(x[i]), got = y.as<float>()[i];
      if (std::isinf(ref) || ref == 0.f) {
        EXPECT_EQ(got, ref) << "exp(" << x[i] << ")";
        continue;
      }
      double ulp = std::max(std::ldexp(std::fabs(static_cast<double>(ref)), -23),
                            static_cast<double>(std::numeric_limits<float>::denorm_min()));
      EXPECT_LE(std::fabs(static_cast<double>(got) - ref), 2 * ulp)
          << "exp(" << x[i] << ") = " << got << ", expected " << ref;
    }
  };
  std::vector<float> lanes;
  while (lanes.size() < values.size() || lanes.size() % 16 != 0)
    lanes.push_back(values[lanes.size() % values.size()]);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(mode == Mode::Specialized ? "specialized" : "generic");
    check(lanes, mode);
    for (float v : values)
      check({v}, mode);
  }
}

// Each vector form of exp that the host can run, through the CPU whose width selects it: 16 lanes
// with AVX-512 (the host's, where it has it), 8 with AVX2 (a table of 2^(j/8)) and 4 with SSE2
// only (the portable form, which the scalar remainder loops also take). A dense sweep of
// [-110, 95] covers every branch of the range reduction and the scaling: within 2^-23 |e^x| where
// the result is normal (the sweep measures 0.72 of it at most with the table, 0.69 without),
// within 1.5 times the smallest subnormal where it is not (0.92 measured: the scaling rounds a
// second time there), exactly +inf past FLT_MAX and exactly 0 where e^x rounds to 0 (the table
// form without its quartic term fails these bounds). NaN stays NaN whatever its payload and
// sign, though the 8-lane form builds its power of two from x's bits.
TEST(Math, ExpIsAccurateInEachVectorForm) {
  std::vector<float> x;
  for (int i = 0; i <= 400000; ++i)
    x.push_back(float(-110.0 + 205.0 * i / 400000));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, 1.f, -1.f, 88.72f, 88.73f, -103.9f, -104.f, inf, -inf})
    x.push_back(v);
  const std::vector<uint32_t> nans = {0x7fc00000u, 0x7fc00010u, 0x7fc12345u, 0xffc00000u,
                                      0xffc00008u, 0x7fffffffu, 0x7fa00001u /* signalling */};
  const size_t firstNaN = x.size();
  for (uint32_t bits : nans) {
    float nan;
    std::memcpy(&nan, &bits, sizeof nan);
    x.push_back(nan);
  }
  while (x.size() % 16 != 0) // every value in a vector lane, none in the scalar remainder
    x.push_back(0.f);
  std::vector<std::string> cpus = {"", "x86-64"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    cpus.push_back(kAvx2Cpu);
  for (const std::string &cpu : cpus) {
    SCOPED_TRACE(cpu.empty() ? "host" : cpu);
    Context ctx(forCpu(cpu));
    Function fn = ctx.loadString(unaryComponent("math.exp"), "math.mlir").function("f");
    const auto n = static_cast<int64_t>(x.size());
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {n})}, Mode::Specialized)[0];
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; ++i) {
      const double got = y.as<float>()[i];
      const double ref = std::exp(static_cast<double>(x[i]));
      const float rounded = static_cast<float>(ref);
      bool ok;
      if (i >= firstNaN && i < firstNaN + nans.size())
        ok = std::isnan(got);
      else if (std::isinf(rounded) || rounded == 0.f)
        ok = got == rounded;
      else
        ok = std::fabs(got - ref) <=
             std::max(std::ldexp(std::fabs(ref), -23),
                      1.5 * static_cast<double>(std::numeric_limits<float>::denorm_min()));
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "exp(" << x[i] << ") = " << got << ", expected " << ref;
      }
    }
  }
}

// Specialized loops call the vector forms: 8-lane AVX2 or 16-lane AVX-512 libmvec variants, or
// frank's exp, whose 16-lane form uses vpermps, vrangeps and vscalefps where the CPU has
// AVX-512 DQ. Both targets, on any host (the generated code is read, not run).
TEST(Math, SpecializedMathIsVectorized) {
  for (auto [cpu, lanes] : {std::pair{kAvx512Cpu, 16}, std::pair{kAvx2Cpu, 8}}) {
    SCOPED_TRACE(cpu);
    Context ctx(forCpu(cpu));
    std::string asmText = ctx.loadString(unaryComponent("math.exp"), "m.mlir")
                              .function("f")
                              .emit(Stage::Assembly, {"4096xf32"});
    EXPECT_THAT(asmText, testing::HasSubstr(lanes == 16 ? "zmm" : "ymm")) << "exp is vectorized";
    EXPECT_THAT(asmText, testing::Not(testing::HasSubstr("expf"))) << "exp is frank's own";
    EXPECT_THAT(asmText, testing::Not(testing::HasSubstr("frank.exp"))) << "exp is inlined";
    if (lanes == 16) {
      for (const char *instruction : {"vpermps", "vrangeps", "vscalefps"})
        EXPECT_THAT(asmText, testing::HasSubstr(instruction)) << "the 16-lane exp";
    } else {
      EXPECT_THAT(asmText, testing::HasSubstr("vpermps")) << "the 8-lane exp's table";
    }
    for (const char *op :
         {"math.sin", "math.cos", "math.log", "math.tanh", "math.erf", "math.exp2"}) {
      std::string ir = ctx.loadString(unaryComponent(op), "m.mlir")
                           .function("f")
                           .emit(Stage::OptimizedLLVM, {"4096xf32"});
      EXPECT_THAT(ir, testing::ContainsRegex(fmt::format("<{0} x float> @_ZGV[de]N{0}v_", lanes)))
          << op;
    }
  }
}

} // namespace
} // namespace frank::test
