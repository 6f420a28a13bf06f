// IEEE special values (NaN, infinities, signed zeros, the largest, smallest and subnormal floats)
// through every float op of the subset and through the reductions, softmax, contractions and
// components built from them, in both modes: NaN propagates, infinities keep their signs, and
// nothing is flushed or clamped where IEEE 754 and the C library say otherwise.
//
// Each result is compared with a double-precision reference rounded to f32: the same class (NaN,
// +inf, -inf, finite), finite values within the op's tolerance, and, for the ops that are exact
// in IEEE arithmetic, the sign of a zero.
#include "TestSupport.h"
#include "oracles/AttentionMoe.h"
#include "oracles/Oracles.h"
#include "runtime/Bfloat16.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace frank::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Sixteen values that exercise every IEEE case of the ops below.
const std::vector<float> kSpecials = {kNaN,    kInf,     -kInf,  0.0f,   -0.0f,   1.0f,
                                      -1.0f,   0.5f,     3.0f,   -2.5f,  FLT_MAX, -FLT_MAX,
                                      FLT_MIN, 1.4e-45f, 100.0f, -100.0f};

enum class FloatClass { NaN, PlusInf, MinusInf, Finite };

FloatClass classify(double v) {
  if (std::isnan(v))
    return FloatClass::NaN;
  if (std::isinf(v))
    return v > 0 ? FloatClass::PlusInf : FloatClass::MinusInf;
  return FloatClass::Finite;
}

const char *className(FloatClass c) {
  switch (c) {
  case FloatClass::NaN: return "NaN";
  case FloatClass::PlusInf: return "+inf";
  case FloatClass::MinusInf: return "-inf";
  case FloatClass::Finite: return "finite";
  }
  return "?";
}

/// How close a finite result must be: `ulps` units of f32 epsilon relative to max(|ref|, floor).
/// The floor makes the error absolute for results near zero (subnormals, sin of a huge angle).
struct Tolerance {
  double ulps = 0.5;
  double floor = 1e-30;
  bool signedZeros = false; // exact IEEE ops: a zero result must have the reference's sign
};

/// Empty when `got` matches `ref` (a double reference, rounded to f32 first); otherwise why not.
std::string mismatch(float got, double ref, const Tolerance &tol) {
  float rounded = static_cast<float>(ref);
  FloatClass want = classify(rounded), have = classify(got);
  if (want != have)
    return fmt::format("got {} ({}), expected {} ({})", got, className(have), ref, className(want));
  if (want != FloatClass::Finite)
    return {};
  double allowed =
      std::max(tol.ulps, 0.5) * std::ldexp(1.0, -23) * std::max(std::fabs(ref), tol.floor);
  if (!(std::fabs(got - ref) <= allowed))
    return fmt::format("got {}, expected {}", got, ref);
  if (tol.signedZeros && rounded == 0 && got == 0 && std::signbit(got) != std::signbit(rounded))
    return fmt::format("got {}, expected {} (the sign of zero)", got, rounded);
  return {};
}

/// Checks every element; reports the first few mismatches with the inputs that produced them.
void expectAllMatch(const Tensor &result, const std::vector<double> &reference,
                    const Tolerance &tol, const std::function<std::string(int64_t)> &describe) {
  ASSERT_EQ(result.numel(), static_cast<int64_t>(reference.size()));
  int reported = 0;
  for (int64_t i = 0; i < result.numel() && reported < 8; ++i) {
    std::string why = mismatch(result.as<float>()[i], reference[i], tol);
    if (!why.empty()) {
      ++reported;
      ADD_FAILURE() << describe(i) << ": " << why;
    }
  }
}

const Mode kModes[] = {Mode::Specialized, Mode::Generic};

// ---- Elementwise ops ----------------------------------------------------------------------

/// A function `f` of `operands` f32 vectors whose elementwise body is `body`.
Function elementwise(const std::string &body, int operands) {
  std::string args, ins, types, blockArgs, maps;
  for (int i = 0; i < operands; ++i) {
    args += fmt::format("{}%x{}: tensor<?xf32>", i ? ", " : "", i);
    ins += fmt::format("{}%x{}", i ? ", " : "", i);
    types += fmt::format("{}tensor<?xf32>", i ? ", " : "");
    blockArgs += fmt::format("%a{}: f32, ", i);
    maps += "affine_map<(i) -> (i)>, ";
  }
  std::string text = fmt::format(R"(
    func.func @f({}) -> tensor<?xf32> {{
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x0, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %r = linalg.generic {{indexing_maps = [{}affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}}
          ins({} : {}) outs(%e : tensor<?xf32>) {{
      ^bb0({}%o: f32):
        {}
      }} -> tensor<?xf32>
      return %r : tensor<?xf32>
    }})",
                                 args, maps, ins, types, blockArgs, body);
  return context().loadString(text, "edge.mlir").function("f");
}

struct UnaryCase {
  const char *op;
  double (*reference)(double);
  Tolerance tol;
};

// Tolerances as in MathTest (libm and libmvec within 4 ulp, frank's exp about 1); sin and cos
// of huge angles and tanh/erf near zero compare absolutely through the floor.
const UnaryCase kUnary[] = {
    {"arith.negf", [](double x) { return -x; }, {0.5, 1e-30, true}},
    {"math.absf", [](double x) { return std::fabs(x); }, {0.5, 1e-30, true}},
    {"math.sqrt", [](double x) { return std::sqrt(x); }, {1, 1e-30, true}},
    {"math.rsqrt", [](double x) { return 1.0 / std::sqrt(x); }, {2}},
    {"math.exp", [](double x) { return std::exp(x); }, {4}},
    {"math.exp2", [](double x) { return std::exp2(x); }, {4}},
    {"math.log", [](double x) { return std::log(x); }, {4, 1}},
    {"math.tanh", [](double x) { return std::tanh(x); }, {4, 1e-3}},
    {"math.erf", [](double x) { return std::erf(x); }, {4, 1e-3}},
    {"math.sin", [](double x) { return std::sin(x); }, {4, 1}},
    {"math.cos", [](double x) { return std::cos(x); }, {4, 1}},
};

class UnaryEdgeTest : public testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryEdgeTest, SpecialValuesFollowIeee) {
  const UnaryCase &c = GetParam();
  Function fn =
      elementwise(fmt::format("%y = {} %a0 : f32\n        linalg.yield %y : f32", c.op), 1);
  // Every special value twice over, 35 elements: a vector body and a tail.
  std::vector<float> x = kSpecials;
  x.insert(x.end(), kSpecials.begin(), kSpecials.end());
  x.insert(x.end(), {kNaN, -kInf, kInf});
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> reference;
  for (float v : x)
    reference.push_back(c.reference(v));
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {n})}, mode)[0];
    expectAllMatch(y, reference, c.tol,
                   [&](int64_t i) { return fmt::format("{}({})", c.op, x[i]); });
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryEdgeTest, testing::ValuesIn(kUnary), [](const auto &info) {
  std::string name = info.param.op;
  return name.substr(name.find('.') + 1);
});

/// IEEE 754-2019 maximum and minimum, which arith.maximumf / minimumf are: NaN if either operand
/// is NaN, and -0 < +0.
double ieeeMaximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

double ieeeMinimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

struct BinaryCase {
  const char *op;
  double (*reference)(double, double);
  Tolerance tol;
};

// Sums, products and quotients of two floats are exact in double, so rounding the reference to
// f32 gives the correctly rounded result; fmod is exact; powf is the C library's (4 ulp).
const BinaryCase kBinary[] = {
    {"arith.addf", [](double a, double b) { return a + b; }, {0.5, 1e-30, true}},
    {"arith.subf", [](double a, double b) { return a - b; }, {0.5, 1e-30, true}},
    {"arith.mulf", [](double a, double b) { return a * b; }, {0.5, 1e-30, true}},
    {"arith.divf", [](double a, double b) { return a / b; }, {0.5, 1e-30, true}},
    {"arith.remf", [](double a, double b) { return std::fmod(a, b); }, {0.5, 1e-30, true}},
    {"arith.maximumf", ieeeMaximum, {0.5, 1e-30, true}},
    {"arith.minimumf", ieeeMinimum, {0.5, 1e-30, true}},
    {"math.powf", [](double a, double b) { return std::pow(a, b); }, {4}},
};

/// Every ordered pair of special values, plus a few more for a tail: (lhs, rhs).
std::pair<std::vector<float>, std::vector<float>> allPairs() {
  std::vector<float> lhs, rhs;
  for (float a : kSpecials)
    for (float b : kSpecials) {
      lhs.push_back(a);
      rhs.push_back(b);
    }
  for (int i = 0; i < 5; ++i) {
    lhs.push_back(kSpecials[i]);
    rhs.push_back(kSpecials[15 - i]);
  }
  return {lhs, rhs};
}

class BinaryEdgeTest : public testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryEdgeTest, EveryPairOfSpecialValuesFollowsIeee) {
  const BinaryCase &c = GetParam();
  Function fn =
      elementwise(fmt::format("%y = {} %a0, %a1 : f32\n        linalg.yield %y : f32", c.op), 2);
  auto [lhs, rhs] = allPairs();
  const int64_t n = static_cast<int64_t>(lhs.size());
  std::vector<double> reference;
  for (int64_t i = 0; i < n; ++i)
    reference.push_back(c.reference(lhs[i], rhs[i]));
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn(
        {Tensor::borrow(lhs.data(), DType::F32, {n}), Tensor::borrow(rhs.data(), DType::F32, {n})},
        mode)[0];
    expectAllMatch(y, reference, c.tol,
                   [&](int64_t i) { return fmt::format("{}({}, {})", c.op, lhs[i], rhs[i]); });
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryEdgeTest, testing::ValuesIn(kBinary), [](const auto &info) {
  std::string name = info.param.op;
  return name.substr(name.find('.') + 1);
});

// arith.cmpf: the ordered predicates are false and the unordered ones true when either operand is
// NaN; +0 and -0 compare equal; the infinities order like any other value.
TEST(EdgeValues, CmpfPredicatesOnSpecialValues) {
  using Predicate = std::function<bool(double, double)>;
  auto unordered = [](double a, double b) { return std::isnan(a) || std::isnan(b); };
  const std::vector<std::pair<const char *, Predicate>> predicates = {
      {"false", [](double, double) { return false; }},
      {"oeq", [](double a, double b) { return a == b; }},
      {"ogt", [](double a, double b) { return a > b; }},
      {"oge", [](double a, double b) { return a >= b; }},
      {"olt", [](double a, double b) { return a < b; }},
      {"ole", [](double a, double b) { return a <= b; }},
      {"one", [=](double a, double b) { return !unordered(a, b) && a != b; }},
      {"ord", [=](double a, double b) { return !unordered(a, b); }},
      {"ueq", [=](double a, double b) { return unordered(a, b) || a == b; }},
      {"ugt", [=](double a, double b) { return unordered(a, b) || a > b; }},
      {"uge", [=](double a, double b) { return unordered(a, b) || a >= b; }},
      {"ult", [=](double a, double b) { return unordered(a, b) || a < b; }},
      {"ule", [=](double a, double b) { return unordered(a, b) || a <= b; }},
      {"une", [](double a, double b) { return a != b; }},
      {"uno", unordered},
      {"true", [](double, double) { return true; }},
  };
  auto [lhs, rhs] = allPairs();
  const int64_t n = static_cast<int64_t>(lhs.size());
  for (const auto &[name, predicate] : predicates) {
    SCOPED_TRACE(name);
    Function fn = elementwise(fmt::format(R"(%p = arith.cmpf {}, %a0, %a1 : f32
        %one = arith.constant 1.0 : f32
        %zero = arith.constant 0.0 : f32
        %y = arith.select %p, %one, %zero : f32
        linalg.yield %y : f32)",
                                          name),
                              2);
    std::vector<double> reference;
    for (int64_t i = 0; i < n; ++i)
      reference.push_back(predicate(lhs[i], rhs[i]) ? 1.0 : 0.0);
    for (Mode mode : kModes) {
      SCOPED_TRACE(modeName(mode));
      Tensor y = fn({Tensor::borrow(lhs.data(), DType::F32, {n}),
                     Tensor::borrow(rhs.data(), DType::F32, {n})},
                    mode)[0];
      expectAllMatch(y, reference, {}, [&](int64_t i) {
        return fmt::format("cmpf {} ({}, {})", name, lhs[i], rhs[i]);
      });
    }
  }
}

// f64 -> f32 -> f64: out-of-range doubles become infinities, NaN stays NaN, subnormal f32 results
// are kept, not flushed.
// Integer division where the source guards it: a body's scf.if computes both branches and
// selects, so the guarded quotient is computed for a zero divisor too. It must neither trap nor
// stop the kernel (a division the source runs unguarded is an error: DiagnosticsTest), and the
// points that divide get exact quotients, INT32_MIN / -1 guarded the same way.
TEST(EdgeValues, GuardedIntegerDivisionDoesNotTrap) {
  const char *text = R"(
    func.func @f(%a: tensor<?xi32>, %b: tensor<?xi32>) -> tensor<?xi32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %a, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                            affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%a, %b : tensor<?xi32>, tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%x: i32, %y: i32, %o: i32):
        %zero = arith.constant 0 : i32
        %minus1 = arith.constant -1 : i32
        %divides = arith.cmpi sgt, %y, %zero : i32
        %q = scf.if %divides -> (i32) {
          %d = arith.divsi %x, %y : i32
          %m = arith.remsi %x, %y : i32
          %s = arith.addi %d, %m : i32
          scf.yield %s : i32
        } else {
          scf.yield %minus1 : i32
        }
        linalg.yield %q : i32
      } -> tensor<?xi32>
      return %r : tensor<?xi32>
    })";
  std::vector<int32_t> a = {7, 7, INT32_MIN, -9, 100, INT32_MIN, 5}, b = {2, 0, -1, 4, 0, 3, 0};
  const int64_t n = static_cast<int64_t>(a.size());
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor q =
        fn({Tensor::borrow(a.data(), DType::I32, {n}), Tensor::borrow(b.data(), DType::I32, {n})},
           mode)[0];
    for (int64_t i = 0; i < n; ++i) {
      const int32_t want = b[i] > 0 ? a[i] / b[i] + a[i] % b[i] : -1;
      EXPECT_EQ(q.as<int32_t>()[i], want) << a[i] << " by " << b[i];
    }
  }
}

// An scf.if region in a body runs where its condition holds, nested ones where every enclosing
// condition does too, and so do its checks: a guarded division by zero, or one that overflows,
// stops the kernel where the guard holds (it had divided by 1 instead: 20 / 0 gave 20), and a
// guarded tensor.extract reads, and is checked, only there (index 7 of 4 elements behind
// `i < 4` had stopped the kernel).
TEST(EdgeValues, GuardedOpsTrapAndReadOnlyWhereTheGuardHolds) {
  const char *text = R"(
    func.func @f(%a: tensor<?xi32>, %b: tensor<?xi32>, %t: tensor<?xi32>, %on: i1) -> tensor<?xi32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %a, %c0 : tensor<?xi32>
      %len = tensor.dim %t, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                            affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%a, %b : tensor<?xi32>, tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%x: i32, %y: i32, %o: i32):
        %hundred = arith.constant 100 : i32
        %minus1 = arith.constant -1 : i32
        %small = arith.cmpi slt, %x, %hundred : i32
        %q = scf.if %on -> (i32) {
          %inner = scf.if %small -> (i32) {
            %d = arith.divsi %x, %y : i32
            scf.yield %d : i32
          } else {
            %i = arith.index_cast %y : i32 to index
            %fits = arith.cmpi slt, %i, %len : index
            %v = scf.if %fits -> (i32) {
              %read = tensor.extract %t[%i] : tensor<?xi32>
              scf.yield %read : i32
            } else {
              scf.yield %minus1 : i32
            }
            scf.yield %v : i32
          }
          scf.yield %inner : i32
        } else {
          scf.yield %minus1 : i32
        }
        linalg.yield %q : i32
      } -> tensor<?xi32>
      return %r : tensor<?xi32>
    })";
  Function fn = context().loadString(text, "guarded.mlir").function("f");
  std::vector<int32_t> t = {40, 41, 42, 43};
  auto call = [&](std::vector<int32_t> a, std::vector<int32_t> b, bool on, Mode mode) {
    const int64_t n = static_cast<int64_t>(a.size());
    Tensor r =
        fn({Tensor::borrow(a.data(), DType::I32, {n}), Tensor::borrow(b.data(), DType::I32, {n}),
            Tensor::borrow(t.data(), DType::I32, {4}), Scalar::i1(on)},
           mode)[0];
    return std::vector<int32_t>(r.as<int32_t>(), r.as<int32_t>() + n);
  };
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    // Small x divides; large x reads t[y] where y < 4, else -1: y = 7 reads nothing.
    EXPECT_EQ(call({20, 7, 300, 300}, {4, -2, 2, 7}, true, mode),
              (std::vector<int32_t>{5, -3, 42, -1}));
    // The outer guard off: nothing divides or reads, whatever the divisors and indices.
    EXPECT_EQ(call({20, INT32_MIN, 300}, {0, -1, 7}, false, mode),
              (std::vector<int32_t>{-1, -1, -1}));
    EXPECT_THAT(
        [&] {
          call({20, 300}, {0, 0}, true, mode);
        },
        testing::ThrowsMessage<Error>(
            testing::HasSubstr("guarded.mlir:17:13: error: division by zero in "
                               "'arith.divsi'")));
    EXPECT_THAT(
        [&] {
          call({300, INT32_MIN}, {1, -1}, true, mode);
        },
        testing::ThrowsMessage<Error>(
            testing::HasSubstr("error: 'arith.divsi' of -2147483648 by -1 overflows i32")));
    // y = -2 passes the signed guard, and the read is checked.
    EXPECT_THAT([&] { call({300}, {-2}, true, mode); },
                testing::ThrowsMessage<Error>(testing::HasSubstr(
                    "error: index -2 is out of bounds for dim 0 of '%t', which has size 4")));
  }
}

// A division of constants by zero inside a guarded region is not folded into an error: the
// kernel checks it where the guard holds (the region had failed to compile, guard or not).
TEST(EdgeValues, GuardedConstantDivisionIsCheckedWhereItRuns) {
  const char *text = R"(
    func.func @f(%a: tensor<?xi32>) -> tensor<?xi32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %a, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%a : tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%x: i32, %o: i32):
        %big = arith.constant 1000 : i32
        %c = arith.cmpi sgt, %x, %big : i32
        %q = scf.if %c -> (i32) {
          %num = arith.constant 100 : i32
          %den = arith.constant 0 : i32
          %d = arith.divsi %num, %den : i32
          scf.yield %d : i32
        } else {
          scf.yield %x : i32
        }
        linalg.yield %q : i32
      } -> tensor<?xi32>
      return %r : tensor<?xi32>
    })";
  Function fn = context().loadString(text, "guarded.mlir").function("f");
  std::vector<int32_t> small = {1, 2, 3}, large = {1, 2000, 3};
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor r = fn({Tensor::borrow(small.data(), DType::I32, {3})}, mode)[0];
    EXPECT_EQ(std::vector<int32_t>(r.as<int32_t>(), r.as<int32_t>() + 3), small);
    EXPECT_THAT([&] { fn({Tensor::borrow(large.data(), DType::I32, {3})}, mode); },
                testing::ThrowsMessage<Error>(testing::HasSubstr(
                    "guarded.mlir:15:11: error: division by zero in 'arith.divsi'")));
  }
}

// 16-bit softmax computes in f32 and rounds once: f16 sums of ones had stopped at 2048 (a row
// of 3000 zeros gave 1/2048 each), and bf16's x - max rounded on the way (6.734375 to 6.75)
// moved a probability by 2%. Each probability is the f32 computation's, rounded once.
TEST(EdgeValues, SixteenBitSoftmaxRoundsOnce) {
  for (const char *type : {"f16", "bf16"}) {
    SCOPED_TRACE(type);
    const std::string text = fmt::format(R"(
      func.func @f(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {{
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %n = tensor.dim %x, %c0 : tensor<?x?xf32>
        %m = tensor.dim %x, %c1 : tensor<?x?xf32>
        %e = tensor.empty(%n, %m) : tensor<?x?x{0}>
        %h = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
            ins(%x : tensor<?x?xf32>) outs(%e : tensor<?x?x{0}>) {{
        ^bb0(%a: f32, %o: {0}):
          %t = arith.truncf %a : f32 to {0}
          linalg.yield %t : {0}
        }} -> tensor<?x?x{0}>
        %s0 = tensor.empty(%n, %m) : tensor<?x?x{0}>
        %s = linalg.softmax dimension(1) ins(%h : tensor<?x?x{0}>) outs(%s0 : tensor<?x?x{0}>) -> tensor<?x?x{0}>
        %w0 = tensor.empty(%n, %m) : tensor<?x?xf32>
        %w = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
            ins(%s : tensor<?x?x{0}>) outs(%w0 : tensor<?x?xf32>) {{
        ^bb0(%a: {0}, %o: f32):
          %t = arith.extf %a : {0} to f32
          linalg.yield %t : f32
        }} -> tensor<?x?xf32>
        return %w : tensor<?x?xf32>
      }})",
                                         type);
    Function fn = context().loadString(text, "softmax16.mlir").function("f");
    const bool bf16 = std::string(type) == "bf16";
    auto narrow = [&](double v) {
      const float f = static_cast<float>(v);
      if (bf16) {
        const uint32_t bits = uint32_t(runtime::bfloat16Bits(f)) << 16;
        float narrowed;
        std::memcpy(&narrowed, &bits, 4);
        return static_cast<double>(narrowed);
      }
      return static_cast<double>(static_cast<float>(static_cast<_Float16>(f)));
    };
    // Row 0: 3000 zeros. Row 1: [3, -3.734375 x 3], exact in both types, then zeros.
    const int64_t m = 3000;
    std::vector<float> x(2 * m, 0.f);
    x[m] = 3.f;
    x[m + 1] = x[m + 2] = x[m + 3] = -3.734375f;
    for (Mode mode : kModes) {
      SCOPED_TRACE(modeName(mode));
      Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {2, m})}, mode)[0];
      for (int64_t row = 0; row < 2; ++row) {
        // The f32 computation: exp(x - max) summed in f32, each quotient then narrowed once.
        const float top = row ? 3.f : 0.f;
        float sum = 0;
        for (int64_t j = 0; j < m; ++j)
          sum += std::exp(x[size_t(row * m + j)] - top);
        for (int64_t j : {int64_t{0}, int64_t{1}, int64_t{2}, m - 1}) {
          const double want = narrow(std::exp(x[size_t(row * m + j)] - top) / sum);
          EXPECT_NEAR(y.as<float>()[row * m + j], want, std::fabs(want) * 1e-2)
              << "row " << row << " column " << j;
        }
      }
    }
  }
}

// True is -1 as a signed i1 (LLVM's reading): an i1 flag sign-extended to an all-ones mask,
// from an argument, a constant at function scope and a constant in a body, and a signed
// comparison of flags. Folded constants had read true as +1 (masks of 1, true < false false).
TEST(EdgeValues, SignedReadingsOfI1) {
  const char *text = R"(
    func.func @f(%x: tensor<?xi32>, %flag: i1) -> (tensor<?xi32>, i32, i1, index) {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xi32>
      %e = tensor.empty(%n) : tensor<?xi32>
      %mask = arith.extsi %flag : i1 to i32
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%x : tensor<?xi32>) outs(%e : tensor<?xi32>) {
      ^bb0(%v: i32, %o: i32):
        %t = arith.constant true
        %minus1 = arith.extsi %t : i1 to i32
        %masked = arith.andi %v, %mask : i32
        %s = arith.addi %masked, %minus1 : i32
        linalg.yield %s : i32
      } -> tensor<?xi32>
      %true = arith.constant true
      %false = arith.constant false
      %wide = arith.extsi %true : i1 to i32
      %less = arith.cmpi slt, %flag, %false : i1
      %index = arith.index_cast %flag : i1 to index
      return %r, %wide, %less, %index : tensor<?xi32>, i32, i1, index
    })";
  std::vector<int32_t> x = {255, -6, 7};
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    std::vector<Tensor> r = fn({Tensor::borrow(x.data(), DType::I32, {3}), Scalar::i1(true)}, mode);
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(r[0].as<int32_t>()[i], x[i] - 1);
    EXPECT_EQ(r[1].as<int32_t>()[0], -1);
    EXPECT_EQ(r[2].as<uint8_t>()[0], 1);
    EXPECT_EQ(r[3].as<int64_t>()[0], -1);
  }
}

// An i1 tensor's bytes other than 0 and 1 are true, as NumPy reads bools (2 had read as
// false: the low bit), and results are 0 or 1.
TEST(EdgeValues, I1TensorBytesReadAsNumPyBools) {
  const char *text = R"(
    func.func @f(%m: tensor<?xi1>, %x: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xi1>) {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %b = tensor.empty(%n) : tensor<?xi1>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                            affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%m, %x : tensor<?xi1>, tensor<?xf32>) outs(%e : tensor<?xf32>) {
      ^bb0(%keep: i1, %v: f32, %o: f32):
        %z = arith.constant 0.0 : f32
        %s = arith.select %keep, %v, %z : f32
        linalg.yield %s : f32
      } -> tensor<?xf32>
      %c = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%m : tensor<?xi1>) outs(%b : tensor<?xi1>) {
      ^bb0(%keep: i1, %o: i1):
        linalg.yield %keep : i1
      } -> tensor<?xi1>
      return %r, %c : tensor<?xf32>, tensor<?xi1>
    })";
  std::vector<uint8_t> mask(37);
  std::vector<float> x(37);
  for (size_t i = 0; i < mask.size(); ++i) {
    mask[i] = static_cast<uint8_t>(i * 37 % 5 == 0 ? 0 : i * 53); // zeros and other bytes
    x[i] = static_cast<float>(i) + 1;
  }
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    std::vector<Tensor> r = fn(
        {Tensor::borrow(mask.data(), DType::I1, {37}), Tensor::borrow(x.data(), DType::F32, {37})},
        mode);
    for (size_t i = 0; i < mask.size(); ++i) {
      EXPECT_EQ(r[0].as<float>()[i], mask[i] ? x[i] : 0.0f) << "byte " << int(mask[i]);
      EXPECT_EQ(r[1].as<uint8_t>()[i], mask[i] ? 1 : 0) << "byte " << int(mask[i]);
    }
  }
}

TEST(EdgeValues, TruncfAndExtfKeepSpecialValues) {
  const char *text = R"(
    func.func @f(%x: tensor<?xf64>) -> tensor<?xf64> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf64>
      %e = tensor.empty(%n) : tensor<?xf64>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%x : tensor<?xf64>) outs(%e : tensor<?xf64>) {
      ^bb0(%a: f64, %o: f64):
        %t = arith.truncf %a : f64 to f32
        %y = arith.extf %t : f32 to f64
        linalg.yield %y : f64
      } -> tensor<?xf64>
      return %r : tensor<?xf64>
    })";
  std::vector<double> x = {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e300, -1e300,  0.0, -0.0,
                           1e-40,        1e-50,    -1e-50,    3.0,   DBL_MAX, 1.5};
  const int64_t n = static_cast<int64_t>(x.size());
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn({Tensor::borrow(x.data(), DType::F64, {n})}, mode)[0];
    for (int64_t i = 0; i < n; ++i) {
      double want = static_cast<double>(static_cast<float>(x[i]));
      double got = y.as<double>()[i];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << "truncf/extf(" << x[i] << ") = " << got;
      else
        EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want))
            << "truncf/extf(" << x[i] << ") = " << got << ", expected " << want;
    }
  }
}

// f32 to bf16 by hand: nearest even on the top 16 bits (NaN as it is).
float roundToBfloat16(float v) {
  if (std::isnan(v))
    return v;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Runs `check` on function @f of `text` in both modes, on the host and on a CPU without 16-bit
// float instructions (x86-64-v3).
void onHostAndX86v3(const std::string &text,
                    const std::function<void(const Function &, Mode)> &check) {
  for (const char *cpu : {"", "x86-64-v3"}) {
    ContextOptions options;
    options.cpu = cpu;
    options.diskCache = false;
    Context ctx(options);
    Function fn = ctx.loadString(text, "edge.mlir").function("f");
    for (Mode mode : kModes) {
      SCOPED_TRACE(fmt::format("{} {}", *cpu ? cpu : "host", modeName(mode)));
      check(fn, mode);
    }
  }
}

// 16-bit floats on the host and on a CPU without AVX512-FP16 and AVX512-BF16 (LLVM widens
// their ops itself there): truncf to bf16 rounds to nearest even with subnormals kept (the
// host's instruction flushes them; the other CPU had no function to call), and maximumf and
// minimumf of f16 keep NaN against zeros (LLVM's widened vector forms returned the zero).
TEST(EdgeValues, SixteenBitFloatsAgreeAcrossCpus) {
  // One elementwise generic of x and y per result, its body computing %r.
  auto generic = [](const char *result, const char *body) {
    return fmt::format(R"(
      %{0} = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>,
                                               affine_map<(i) -> (i)>],
                              iterator_types = ["parallel"]}}
          ins(%x, %y : tensor<?xf32>, tensor<?xf32>) outs(%e : tensor<?xf32>) {{
      ^bb0(%a: f32, %b: f32, %o: f32):
        %ha = arith.truncf %a : f32 to f16
        %hb = arith.truncf %b : f32 to f16
        {1}
        linalg.yield %r : f32
      }} -> tensor<?xf32>)",
                       result, body);
  };
  const std::string text =
      R"(func.func @f(%x: tensor<?xf32>, %y: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>)" +
      generic("rounded",
              "%bf = arith.truncf %a : f32 to bf16\n %r = arith.extf %bf : bf16 to f32") +
      generic("max", "%m = arith.maximumf %ha, %hb : f16\n %r = arith.extf %m : f16 to f32") +
      generic("min", "%m = arith.minimumf %ha, %hb : f16\n %r = arith.extf %m : f16 to f32") + R"(
      return %rounded, %max, %min : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
    })";
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie to 1, 1 + 3·2^-8 a tie to 1 + 2^-6.
  std::vector<float> x = {0.0f,     kNaN,    -0.0f,   kNaN,  1.0f + 0x1p-8f, 1.0f + 0x3p-8f,
                          1e-40f,   -1e-39f, 3.4e38f, -kInf, 0.5f,           2.0f,
                          1.4e-45f, -2.5f,   kNaN,    0.0f};
  std::vector<float> y = {kNaN,  0.0f, kNaN,  -0.0f, 1.0f, -1.0f, 0.0f, -0.0f,
                          -0.0f, 1.0f, -0.0f, 0.0f,  0.0f, -3.0f, kNaN, -0.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  auto same = [](float got, float want) {
    return std::isnan(want) ? std::isnan(got)
                            : got == want && std::signbit(got) == std::signbit(want);
  };
  onHostAndX86v3(text, [&](const Function &fn, Mode mode) {
    std::vector<Tensor> r =
        fn({Tensor::borrow(x.data(), DType::F32, {n}), Tensor::borrow(y.data(), DType::F32, {n})},
           mode);
    for (int64_t i = 0; i < n; ++i) {
      float a = static_cast<float>(static_cast<_Float16>(x[i]));
      float b = static_cast<float>(static_cast<_Float16>(y[i]));
      bool nan = std::isnan(a) || std::isnan(b);
      bool bothZero = a == 0 && b == 0;
      float max = nan ? kNaN : bothZero ? (std::signbit(a) ? b : a) : std::max(a, b);
      float min = nan ? kNaN : bothZero ? (std::signbit(a) ? a : b) : std::min(a, b);
      EXPECT_TRUE(same(r[0].as<float>()[i], roundToBfloat16(x[i])))
          << "bf16(" << x[i] << ") = " << r[0].as<float>()[i];
      EXPECT_TRUE(same(r[1].as<float>()[i], max))
          << "max(" << a << ", " << b << ") = " << r[1].as<float>()[i];
      EXPECT_TRUE(same(r[2].as<float>()[i], min))
          << "min(" << a << ", " << b << ") = " << r[2].as<float>()[i];
    }
  });
}

// bf16 arithmetic on subnormal operands and results: negf, absf, addf, mulf and a maximumf
// reduction keep them, on the host (AVX512-BF16's conversion to bf16 flushes them to 0, and
// LLVM's optimizer had turned f32 ops on widened bf16 values back into bf16 ops rounded by it)
// and on a CPU without bf16 instructions.
TEST(EdgeValues, Bfloat16ArithmeticKeepsSubnormals) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %y: tensor<?x?xf32>) -> (tensor<?x?x4xf32>, tensor<?xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xf32>
      %n = tensor.dim %x, %c1 : tensor<?x?xf32>
      %e = tensor.empty(%m, %n) : tensor<?x?x4xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j)>,
                                            affine_map<(i, j, k) -> (i, j)>,
                                            affine_map<(i, j, k) -> (i, j, k)>],
                           iterator_types = ["parallel", "parallel", "parallel"]}
          ins(%x, %y : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e : tensor<?x?x4xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %k = linalg.index 2 : index
        %ha = arith.truncf %a : f32 to bf16
        %hb = arith.truncf %b : f32 to bf16
        %neg = arith.negf %ha : bf16
        %abs = math.absf %ha : bf16
        %sum = arith.addf %ha, %hb : bf16
        %product = arith.mulf %ha, %hb : bf16
        %i = arith.index_cast %k : index to i32
        %c1i = arith.constant 1 : i32
        %c2i = arith.constant 2 : i32
        %is1 = arith.cmpi eq, %i, %c2i : i32
        %lt1 = arith.cmpi slt, %i, %c1i : i32
        %p = arith.select %lt1, %neg, %abs : bf16
        %q = arith.select %is1, %sum, %product : bf16
        %gt1 = arith.cmpi sgt, %i, %c1i : i32
        %pick = arith.select %gt1, %q, %p : bf16
        %w = arith.extf %pick : bf16 to f32
        linalg.yield %w : f32
      } -> tensor<?x?x4xf32>
      %eb = tensor.empty(%m, %n) : tensor<?x?xbf16>
      %hx = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                            iterator_types = ["parallel", "parallel"]}
          ins(%x : tensor<?x?xf32>) outs(%eb : tensor<?x?xbf16>) {
      ^bb0(%a: f32, %o: bf16):
        %t = arith.truncf %a : f32 to bf16
        linalg.yield %t : bf16
      } -> tensor<?x?xbf16>
      %ninf = arith.constant 0xFF80 : bf16
      %e1 = tensor.empty(%m) : tensor<?xbf16>
      %f1 = linalg.fill ins(%ninf : bf16) outs(%e1 : tensor<?xbf16>) -> tensor<?xbf16>
      %mx = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                            iterator_types = ["parallel", "reduction"]}
          ins(%hx : tensor<?x?xbf16>) outs(%f1 : tensor<?xbf16>) {
      ^bb0(%a: bf16, %acc: bf16):
        %r2 = arith.maximumf %acc, %a : bf16
        linalg.yield %r2 : bf16
      } -> tensor<?xbf16>
      %e2 = tensor.empty(%m) : tensor<?xf32>
      %mf = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                            iterator_types = ["parallel"]}
          ins(%mx : tensor<?xbf16>) outs(%e2 : tensor<?xf32>) {
      ^bb0(%a: bf16, %o: f32):
        %t = arith.extf %a : bf16 to f32
        linalg.yield %t : f32
      } -> tensor<?xf32>
      return %r, %mf : tensor<?x?x4xf32>, tensor<?xf32>
    })";
  // Rows of 37 subnormals (and a few normals, and zeros) of either sign; the sums and products
  // of pairs land on subnormals too.
  const int64_t rows = 3, cols = 37;
  std::vector<float> x(rows * cols), y(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    x[i] = float((i % 7) - 3) * 0x1p-130f * float(1 + i % 5);
    y[i] = i % 11 == 0 ? 1.5f : float((i % 5) - 2) * 0x1p-128f;
  }
  x[cols + 5] = 1e-38f;
  onHostAndX86v3(text, [&](const Function &fn, Mode mode) {
    std::vector<Tensor> r = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols}),
                                Tensor::borrow(y.data(), DType::F32, {rows, cols})},
                               mode);
    int subnormal = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const double a = roundToBfloat16(x[i]), b = roundToBfloat16(y[i]);
      const float want[4] = {static_cast<float>(-a), static_cast<float>(std::fabs(a)),
                             roundToBfloat16(float(a + b)), roundToBfloat16(float(a * b))};
      for (int k = 0; k < 4; ++k) {
        const float got = r[0].as<float>()[i * 4 + k];
        subnormal += std::fpclassify(want[k]) == FP_SUBNORMAL;
        EXPECT_TRUE(got == want[k] && std::signbit(got) == std::signbit(want[k]))
            << "op " << k << " of " << a << " and " << b << " = " << got << ", not " << want[k];
      }
    }
    EXPECT_GT(subnormal, 100); // the check is about them
    for (int64_t row = 0; row < rows; ++row) {
      float want = -INFINITY;
      for (int64_t j = 0; j < cols; ++j)
        want = std::max(want, roundToBfloat16(x[row * cols + j]));
      EXPECT_EQ(r[1].as<float>()[row], want) << "row " << row;
    }
  });
}

// bf16 negf, absf, select, a maximumf reduction's accumulator and the stores of all of them move
// bits: no lane goes through f32 and back (SixteenBitFloatBits.h), which x86 without AVX512-BF16
// does with a call to __truncsfbf2 per lane (SwiGLU in bf16 had run 19x slower than in f32).
TEST(EdgeValues, Bfloat16SignsSelectsAndStoresMoveBits) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xbf16>, %y: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?xbf16>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %x, %c0 : tensor<?x?xbf16>
      %n = tensor.dim %x, %c1 : tensor<?x?xbf16>
      %e = tensor.empty(%m, %n) : tensor<?x?xbf16>
      %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>,
                                            affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%x, %y : tensor<?x?xbf16>, tensor<?x?xbf16>) outs(%e : tensor<?x?xbf16>) {
      ^bb0(%a: bf16, %b: bf16, %o: bf16):
        %na = arith.negf %a : bf16
        %ab = math.absf %b : bf16
        %gt = arith.cmpf ogt, %a, %b : bf16
        %s = arith.select %gt, %na, %ab : bf16
        linalg.yield %s : bf16
      } -> tensor<?x?xbf16>
      %ninf = arith.constant 0xFF80 : bf16
      %er = tensor.empty(%m) : tensor<?xbf16>
      %f = linalg.fill ins(%ninf : bf16) outs(%er : tensor<?xbf16>) -> tensor<?xbf16>
      %mx = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                            iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<?x?xbf16>) outs(%f : tensor<?xbf16>) {
      ^bb0(%a: bf16, %acc: bf16):
        %na = arith.negf %a : bf16
        %r2 = arith.maximumf %na, %acc : bf16
        linalg.yield %r2 : bf16
      } -> tensor<?xbf16>
      return %r, %mx : tensor<?x?xbf16>, tensor<?xbf16>
    })";
  const int64_t rows = 4, cols = 100;
  std::vector<uint16_t> x(rows * cols), y(rows * cols);
  auto value = [](uint16_t bits) {
    const uint32_t wide = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return f;
  };
  for (int64_t i = 0; i < rows * cols; ++i) {
    // Normals, subnormals (exponent 0) and zeros of either sign.
    x[i] = uint16_t((i * 2654435761u) >> 16) & (i % 3 ? 0xffff : 0x807f);
    y[i] = uint16_t((i * 40503u + 7) & 0xffff) & (i % 5 ? 0xffff : 0x807f);
    for (uint16_t *v : {&x[i], &y[i]})
      if ((*v & 0x7f80) == 0x7f80) // no infinities or NaN
        *v &= 0xbfff;
  }
  onHostAndX86v3(text, [&](const Function &fn, Mode mode) {
    const std::vector<std::string> shapes{fmt::format("{}x{}xbf16", rows, cols),
                                          fmt::format("{}x{}xbf16", rows, cols)};
    EXPECT_THAT(fn.emit(Stage::Assembly, shapes, mode),
                testing::Not(testing::HasSubstr("truncsfbf2")));
    std::vector<Tensor> r = fn({Tensor::borrow(x.data(), DType::BF16, {rows, cols}),
                                Tensor::borrow(y.data(), DType::BF16, {rows, cols})},
                               mode);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint16_t want = value(x[i]) > value(y[i]) ? x[i] ^ 0x8000 : y[i] & 0x7fff;
      EXPECT_EQ(r[0].as<uint16_t>()[i], want) << i;
    }
    for (int64_t row = 0; row < rows; ++row) {
      float want = -INFINITY;
      for (int64_t j = 0; j < cols; ++j)
        want = std::max(want, -value(x[row * cols + j]));
      EXPECT_EQ(value(r[1].as<uint16_t>()[row]), want) << "row " << row;
    }
  });
}

// negf and absf of f16 and bf16 move the sign bit alone, signaling NaNs as they are, in vector
// lanes and in the scalar lanes after them: x86 without AVX512-FP16 had computed a scalar f16
// fneg in f32 and converted it back, quieting the NaN (negf of 0x7C01 gave 0xFE01, absf 0x7E01).
TEST(EdgeValues, SixteenBitSignOpsKeepSignalingNaNs) {
  for (const char *type : {"f16", "bf16"}) {
    SCOPED_TRACE(type);
    auto generic = [&](const char *result, const char *op) {
      return fmt::format(R"(
        %{1} = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                               iterator_types = ["parallel"]}}
            ins(%x : tensor<?x{0}>) outs(%e : tensor<?x{0}>) {{
        ^bb0(%a: {0}, %o: {0}):
          %r = {2} %a : {0}
          linalg.yield %r : {0}
        }} -> tensor<?x{0}>)",
                         type, result, op);
    };
    const std::string text = fmt::format(R"(
      func.func @f(%x: tensor<?x{0}>) -> (tensor<?x{0}>, tensor<?x{0}>) {{
        %c0 = arith.constant 0 : index
        %n = tensor.dim %x, %c0 : tensor<?x{0}>
        %e = tensor.empty(%n) : tensor<?x{0}>)",
                                         type) +
                             generic("neg", "arith.negf") + generic("abs", "math.absf") +
                             fmt::format(R"(
        return %neg, %abs : tensor<?x{0}>, tensor<?x{0}>
      }})",
                                         type);
    const bool bf16 = std::string(type) == "bf16";
    // Signaling and quiet NaNs with payloads, of either sign, infinities, zeros and numbers.
    const std::vector<uint16_t> special =
        bf16 ? std::vector<uint16_t>{0x7f81, 0xff81, 0x7fc1, 0x7f80, 0x8000, 0x3f80, 0x0001}
             : std::vector<uint16_t>{0x7c01, 0xfc01, 0x7e01, 0x7c00, 0x8000, 0x3c00, 0x0001};
    for (int64_t n : {1, 17, 33}) {
      std::vector<uint16_t> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        x[size_t(i)] = special[size_t((i * 3 + n) % int64_t(special.size()))];
      x.back() = special[0]; // the last lane: scalar code after the vectors
      onHostAndX86v3(text, [&](const Function &fn, Mode mode) {
        std::vector<Tensor> r =
            fn({Tensor::borrow(x.data(), bf16 ? DType::BF16 : DType::F16, {n})}, mode);
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(r[0].as<uint16_t>()[i], x[size_t(i)] ^ 0x8000) << "negf, n " << n << ", " << i;
          EXPECT_EQ(r[1].as<uint16_t>()[i], x[size_t(i)] & 0x7fff) << "absf, n " << n << ", " << i;
        }
      });
    }
  }
}

// The conversions LLVM calls for bf16 results on CPUs without bf16 instructions (after
// arithmetic in bf16, or from f64): nearest even, from a double in one rounding (through a
// float rounded to nearest first, 1 + 2^-8 + 2^-40 would tie and go down to 1).
TEST(EdgeValues, Bfloat16RuntimeConversionsRoundOnce) {
  using runtime::bfloat16Bits;
  EXPECT_EQ(bfloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16Bits(1.0f + 0x1p-8f), 0x3f80); // a tie, to even
  EXPECT_EQ(bfloat16Bits(1.0f + 0x3p-8f), 0x3f82); // a tie, to even
  EXPECT_EQ(bfloat16Bits(1e-40f), 0x0001);         // subnormal (2^-133), kept
  EXPECT_EQ(bfloat16Bits(3.4e38f), 0x7f80);        // past the largest bf16
  EXPECT_EQ(bfloat16Bits(-kInf), 0xff80);
  EXPECT_EQ(bfloat16Bits(-kNaN) & 0xffc0, 0xffc0); // quiet, signed
  EXPECT_EQ(bfloat16Bits(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
  EXPECT_EQ(bfloat16Bits(-(1.0 + 0x1p-8)), 0xbf80);
  EXPECT_EQ(bfloat16Bits(1e300), 0x7f80);
  EXPECT_EQ(bfloat16Bits(1e-300), 0x0000);
  EXPECT_EQ(bfloat16Bits(-0.0), 0x8000);
  // In a kernel for such a CPU: a sum in bf16, rounded by the runtime's conversion.
  const char *text = R"(
    func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?xf32>
      %e = tensor.empty(%n) : tensor<?xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%x : tensor<?xf32>) outs(%e : tensor<?xf32>) {
      ^bb0(%a: f32, %o: f32):
        %h = arith.truncf %a : f32 to bf16
        %one = arith.constant 1.0 : bf16
        %s = arith.addf %h, %one : bf16
        %w = arith.extf %s : bf16 to f32
        linalg.yield %w : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    })";
  ContextOptions options;
  options.cpu = "x86-64-v3";
  options.diskCache = false;
  Context ctx(options);
  std::vector<float> x = {0x1p-8f, 0x3p-8f, 0x1p-7f, 2.0f, -1.0f};
  std::vector<float> want = {1.0f, 1.015625f, 1.0078125f, 3.0f, 0.0f};
  Tensor y = ctx.loadString(text, "edge.mlir")
                 .function("f")({Tensor::borrow(x.data(), DType::F32, {5})})[0];
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(y.as<float>()[i], want[i]) << "1 + " << x[i];
}

// ---- Reductions, softmax, contractions ----------------------------------------------------

/// Rows of `cols` values in [-4, 4) with special values planted in the vector body and the tail:
/// a control row, NaN early and late, +inf, -inf, both infinities, all -inf, NaN with +inf.
std::vector<float> rowsWithSpecials(int64_t cols, int64_t *rowsOut) {
  const int64_t rows = 8;
  *rowsOut = rows;
  std::vector<float> x = oracle::randomFloats(rows * cols, 41, -4, 4);
  auto at = [&](int64_t r, int64_t c) -> float & { return x[r * cols + c % cols]; };
  at(1, 3) = kNaN;
  at(2, cols - 1) = kNaN;
  at(3, 10) = kInf;
  at(4, 20) = -kInf;
  at(5, 1) = kInf;
  at(5, cols - 2) = -kInf;
  for (int64_t c = 0; c < cols; ++c)
    at(6, c) = -kInf;
  at(7, 0) = kNaN;
  at(7, 5) = kInf;
  return x;
}

struct ReductionCase {
  const char *name;
  const char *combine; // the body's op on (%in, %acc)
  const char *init;    // the accumulator's initial value, as an MLIR float literal
  double start;
  double (*combineRef)(double, double);
};

const ReductionCase kReductions[] = {
    {"sum", "arith.addf", "0.0", 0.0, [](double a, double b) { return a + b; }},
    {"max", "arith.maximumf", "0xFF800000", -HUGE_VAL, ieeeMaximum},
    {"min", "arith.minimumf", "0x7F800000", HUGE_VAL, ieeeMinimum},
};

class ReductionEdgeTest : public testing::TestWithParam<std::tuple<ReductionCase, int64_t>> {};

TEST_P(ReductionEdgeTest, NaNAndInfinitiesPropagateThroughTheReduction) {
  const auto &[c, cols] = GetParam();
  std::string text = fmt::format(R"(
    func.func @f(%x: tensor<?x?xf32>) -> tensor<?xf32> {{
      %c0 = arith.constant 0 : index
      %n = tensor.dim %x, %c0 : tensor<?x?xf32>
      %init = arith.constant {} : f32
      %e = tensor.empty(%n) : tensor<?xf32>
      %f = linalg.fill ins(%init : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
      %r = linalg.reduce ins(%x : tensor<?x?xf32>) outs(%f : tensor<?xf32>) dimensions = [1] (%in: f32, %acc: f32) {{
        %v = {} %in, %acc : f32
        linalg.yield %v : f32
      }}
      return %r : tensor<?xf32>
    }})",
                                 c.init, c.combine);
  int64_t rows = 0;
  std::vector<float> x = rowsWithSpecials(cols, &rows);
  std::vector<double> reference(rows, c.start);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      reference[r] = c.combineRef(x[r * cols + j], reference[r]);
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols})}, mode)[0];
    // A reassociated f32 sum of `cols` values in [-4, 4): error well under 1e-4 absolute.
    expectAllMatch(y, reference, {1e-4 / std::ldexp(1.0, -23) / 4, 4},
                   [&](int64_t i) { return fmt::format("{} of row {}", c.name, i); });
  }
}

INSTANTIATE_TEST_SUITE_P(Reductions, ReductionEdgeTest,
                         testing::Combine(testing::ValuesIn(kReductions),
                                          testing::Values<int64_t>(37, 1031)),
                         [](const auto &info) {
                           return fmt::format("{}_{}", std::get<0>(info.param).name,
                                              std::get<1>(info.param));
                         });

/// softmax as linalg.softmax defines it: exp(x - max) / sum exp(x - max), max NaN-propagating.
std::vector<double> softmaxRows(const std::vector<float> &x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -HUGE_VAL, sum = 0;
    for (int64_t j = 0; j < cols; ++j)
      m = ieeeMaximum(x[r * cols + j], m);
    for (int64_t j = 0; j < cols; ++j)
      sum += std::exp(x[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = std::exp(x[r * cols + j] - m) / sum;
  }
  return y;
}

// A NaN anywhere in a row makes the whole row NaN; so does +inf (inf - inf) and a row of only
// -inf (-inf - -inf), as in PyTorch; a single -inf (a masked position) gives exactly 0.
TEST(EdgeValues, SoftmaxRowsWithSpecialValues) {
  Function fn = context().loadString(kRowSoftmaxModule, "edge.mlir").function("softmax");
  for (int64_t cols : {37, 1031}) {
    int64_t rows = 0;
    std::vector<float> x = rowsWithSpecials(cols, &rows);
    std::vector<double> reference = softmaxRows(x, rows, cols);
    EXPECT_EQ(reference[4 * cols + 20], 0.0); // the masked position of row 4
    for (Mode mode : kModes) {
      SCOPED_TRACE(fmt::format("{} cols={}", modeName(mode), cols));
      Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols})}, mode)[0];
      expectAllMatch(y, reference, {16, 1e-6}, [&](int64_t i) {
        return fmt::format("softmax row {} col {} (x = {})", i / cols, i % cols, x[i]);
      });
      EXPECT_EQ(y.as<float>()[4 * cols + 20], 0.0f) << "a -inf logit gives exactly 0";
    }
  }
}

// inf * 0 is NaN inside a dot product; a NaN in a row of A reaches every column of that row's
// output, an infinity in B every row of its column. Checked on the tiled path and a small one.
TEST(EdgeValues, MatmulPropagatesSpecialValues) {
  const char *text = R"(
    func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %m = tensor.dim %a, %c0 : tensor<?x?xf32>
      %n = tensor.dim %b, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty(%m, %n) : tensor<?x?xf32>
      %c = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";
  Function fn = context().loadString(text, "edge.mlir").function("f");
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 9}, {64, 96, 80}}) {
    std::vector<float> a = oracle::randomFloats(m * k, 5), b = oracle::randomFloats(k * n, 6);
    a[1 * k + 4] = kNaN;        // row 1 of the output: all NaN
    a[2 * k + 0] = kInf;        // row 2: +-inf by the sign of b[0, j]
    b[0 * n + 3] = 0.0f;        //   ... and NaN in column 3 (inf * 0)
    b[5 * n + (n - 1)] = -kInf; // the last column: -+inf by the sign of a[i, 5]
    a[4 * k + 5] = 0.0f;        //   ... and NaN in row 4 (0 * -inf)
    std::vector<double> reference(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          reference[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
    for (Mode mode : kModes) {
      SCOPED_TRACE(fmt::format("{} {}x{}x{}", modeName(mode), m, k, n));
      Tensor y = fn({Tensor::borrow(a.data(), DType::F32, {m, k}),
                     Tensor::borrow(b.data(), DType::F32, {k, n})},
                    mode)[0];
      // A reassociated f32 dot product of k values in [-1, 1): 1e-5 absolute is generous.
      expectAllMatch(y, reference, {1e-5 / std::ldexp(1.0, -23), 1},
                     [&](int64_t i) { return fmt::format("C[{}, {}]", i / n, i % n); });
    }
  }
}

// ---- Components ---------------------------------------------------------------------------

// rms_norm: a NaN makes its row NaN; an infinity makes the mean square infinite, so the finite
// values of its row become 0 and the infinity itself NaN (inf * 0), as the formula says.
TEST(EdgeValues, RmsNormRowsWithSpecialValues) {
  Function fn =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  for (int64_t cols : {37, 4096}) {
    int64_t rows = 0;
    std::vector<float> x = rowsWithSpecials(cols, &rows);
    std::vector<float> w = oracle::randomFloats(cols, 9, 0.5f, 1.5f);
    w[7] = kNaN; // one NaN weight: column 7 NaN in every row
    std::vector<double> reference = oracle::rmsNorm(x.data(), w.data(), 1e-6f, rows, cols);
    for (Mode mode : kModes) {
      SCOPED_TRACE(fmt::format("{} cols={}", modeName(mode), cols));
      Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols}),
                     Tensor::borrow(w.data(), DType::F32, {cols}), Scalar::f32(1e-6f)},
                    mode)[0];
      expectAllMatch(y, reference, {8, 1e-6}, [&](int64_t i) {
        return fmt::format("row {} col {} (x = {})", i / cols, i % cols, x[i]);
      });
    }
  }
}

// Attention: a NaN key poisons every score of its KV head's queries, a NaN value every output
// of its head; an infinite query gives infinite or NaN logits, never a finite answer.
TEST(EdgeValues, AttentionWithSpecialValues) {
  Function fn =
      context().load(componentPath("attention/attention_gqa.mlir")).function("attention_gqa");
  const oracle::AttentionDims dims{1, 5, 9, 4, 2, 16};
  const int64_t qn = dims.batch * dims.seq * dims.heads * dims.headDim;
  const int64_t kvn = dims.batch * dims.kvSeq * dims.kvHeads * dims.headDim;
  std::vector<float> q = oracle::randomFloats(qn, 1), k = oracle::randomFloats(kvn, 2),
                     v = oracle::randomFloats(kvn, 3);
  const int64_t d = dims.headDim, hkv = dims.kvHeads, h = dims.heads;
  k[(3 * hkv + 0) * d + 2] = kNaN; // key 3 of KV head 0
  v[(6 * hkv + 1) * d + 5] = kNaN; // value 6 of KV head 1, element 5
  q[(4 * h + 3) * d + 1] = kInf;   // query 4, head 3
  const float scale = 0.25f;
  std::vector<double> reference = oracle::attentionGqa(q.data(), k.data(), v.data(), scale, dims,
                                                       /*causal=*/false);
  for (Mode mode : kModes) {
    SCOPED_TRACE(modeName(mode));
    Tensor y =
        fn({Tensor::borrow(q.data(), DType::F32, {1, dims.seq, h, d}),
            Tensor::borrow(k.data(), DType::F32, {1, dims.kvSeq, hkv, d}),
            Tensor::borrow(v.data(), DType::F32, {1, dims.kvSeq, hkv, d}), Scalar::f32(scale)},
           mode)[0];
    // MLIR-SUBSET.md §10's attention tolerance, 1e-4 relative with a 1e-5 floor.
    expectAllMatch(y, reference, {1e-4 / std::ldexp(1.0, -23), 0.1}, [&](int64_t i) {
      return fmt::format("out[s={}, h={}, d={}]", i / (h * d), i / d % h, i % d);
    });
  }
}

} // namespace
} // namespace frank::test
