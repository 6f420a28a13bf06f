// reciprocal-divisors: which loops multiply by a reciprocal (golden tests on hand-built loop IR,
// no JIT), and, compiled, that the products stay within 1.5 ulp of the quotients for normal
// divisors while zero, infinite, NaN, tiny and huge divisors divide as written.
#include "loops/ReciprocalDivisors.h"
#include "Engine.h"
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace frank::test {
namespace {

using namespace frank::loops;

constexpr int64_t kRows = 8, kColumns = 512; // 4096 divisions a call

Expr rowMajor(Expr row, Expr column) { return add(mul(row, intConst(kColumns)), column); }

// y[i, j] = x[i, j] / divisor(i, j), rows in parallel; buffers x, d (one per row), z (one per
// element), y.
Program dividing(const std::function<Expr(Expr i, Expr j)> &divisor, std::vector<Stmt> extra = {}) {
  Program p;
  p.name = "divide_rows";
  Expr size = intConst(kRows * kColumns);
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, size, nullptr},
               {"d", ElemKind::F32, BufferRole::Input, 1, intConst(kRows), nullptr},
               {"z", ElemKind::F32, BufferRole::Input, 2, size, nullptr},
               {"y", ElemKind::F32, BufferRole::Output, 0, size, nullptr}};
  p.workspaceBytes = intConst(0);
  Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
  std::vector<Stmt> body = {
      let("q", binary(OpKind::DivF, load(0, rowMajor(i, j), ElemKind::F32), divisor(i, j))),
      store(3, rowMajor(i, j), var("q", ElemKind::F32))};
  body.insert(body.end(), extra.begin(), extra.end());
  Stmt columns = forLoop("j", intConst(kColumns), ForKind::Vectorize, std::move(body));
  p.body = {forLoop("i", intConst(kRows), ForKind::Parallel,
                    {let("s", load(1, i, ElemKind::F32)), columns})};
  p.body[0]->bound = intConst(1);
  return p;
}

Expr rowDivisor(Expr, Expr) { return var("s", ElemKind::F32); }

TEST(ReciprocalDivisors, LoopDividingByItsRowsValueMultiplies) {
  Program p = dividing(rowDivisor);
  EXPECT_EQ(reciprocalDivisors(p), 1);
  const std::string text = print(p);
  EXPECT_THAT(text,
              testing::HasSubstr("let divisor: f32 = s\n"
                                 "    let reciprocal: f32 = (1f / divisor)\n"
                                 "    if andi(cmp.oge(absf(divisor), 1.1754943508222875e-38f), "
                                 "cmp.ole(absf(divisor), 8.507059173023462e+37f)) {\n"))
      << text;
  EXPECT_THAT(text, testing::HasSubstr("let q: f32 = (x[((i * 512) + j)] * reciprocal)")) << text;
  EXPECT_THAT(text, testing::HasSubstr("} else {\n      for j in 0..512 vectorized {\n"
                                       "        let q: f32 = (x[((i * 512) + j)] / s)"))
      << text;
}

// A divisor bound by a let inside the loop from values outside it is computed before the loop.
TEST(ReciprocalDivisors, LetsOfTheLoopAreComputedBeforeIt) {
  Program p = dividing([](Expr i, Expr) { return load(1, i, ElemKind::F32); });
  EXPECT_EQ(reciprocalDivisors(p), 1);
  EXPECT_THAT(print(p), testing::HasSubstr("let divisor: f32 = d[i]\n")) << print(p);
}

// With a runtime extent, the divisor is read before the loop only if the loop runs.
TEST(ReciprocalDivisors, RuntimeExtentsGuardTheDivisors) {
  Program p = dividing(rowDivisor);
  p.body[0]->value = intConst(16); // 16 rows of a nominal 256: 4096
  p.body[0]->body[1]->value = dimParam(0);
  EXPECT_EQ(reciprocalDivisors(p), 1);
  EXPECT_THAT(print(p), testing::HasSubstr("    if cmp.sgt(dims[0], 0) {\n"
                                           "      let divisor: f32 = s\n"))
      << print(p);
}

// 8 rows of 64 divide 512 elements a call: too few to pay for a second loop.
TEST(ReciprocalDivisors, ShortLoopsStay) {
  Program p = dividing(rowDivisor);
  p.body[0]->body[1]->value = intConst(64);
  EXPECT_EQ(reciprocalDivisors(p), 0) << print(p);
}

TEST(ReciprocalDivisors, DivisorsTheLoopChangesStay) {
  const std::vector<std::pair<const char *, Program>> cases = {
      {"read per element",
       dividing([](Expr i, Expr j) { return load(2, rowMajor(i, j), ElemKind::F32); })},
      {"the loop's variable",
       dividing([](Expr, Expr j) { return cast(OpKind::SIToFP, j, ElemKind::F32); })},
      {"a constant", dividing([](Expr, Expr) { return floatConst(3, ElemKind::F32); })},
      // y's row is read as the divisor while the loop writes y.
      {"from a buffer the loop writes",
       dividing([](Expr i, Expr) { return load(3, mul(i, intConst(kColumns)), ElemKind::F32); })},
  };
  for (const auto &[what, program] : cases) {
    Program p = program;
    const std::string before = print(p);
    EXPECT_EQ(reciprocalDivisors(p), 0) << what;
    EXPECT_EQ(print(p), before) << what;
  }
}

float at(const std::vector<float> &v, int64_t r, int64_t c) { return v[size_t(r * kColumns + c)]; }

// Compiled: rows with normal divisors within 1.5 ulp of the quotient (x * (1 / d) rounds twice),
// the others exactly the quotient, special values included.
TEST(ReciprocalDivisors, ProductsAreCloseAndSpecialDivisorsDivide) {
  Program p = dividing(rowDivisor);
  p.name = "divide_rows_versioned";
  ASSERT_EQ(reciprocalDivisors(p), 1);
  jit::EntryFn kernel = jit::Engine::instance().compile(p, {});
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> divisors = {
      3.0f, -7.25f, 1e-40f, inf, 0.0f, std::numeric_limits<float>::quiet_NaN(), 1e38f, 0.1f};
  const std::vector<bool> normal = {true, true, false, false, false, false, false, true};
  std::vector<float> x(kRows * kColumns), z(kRows * kColumns), y(kRows * kColumns);
  // Per row: zero, infinities, a subnormal, then values of both signs.
  const std::vector<float> special = {0.0f, -0.0f, inf, -inf, 1e-39f};
  for (int64_t k = 0; k < kRows * kColumns; ++k) {
    const int64_t c = k % kColumns;
    x[size_t(k)] = c < int64_t(special.size()) ? special[size_t(c)] : float(c - 32) * 0.37f;
  }
  void *buffers[] = {x.data(), const_cast<float *>(divisors.data()), z.data(), y.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kColumns; ++c) {
      const float quotient = at(x, r, c) / divisors[size_t(r)], got = at(y, r, c);
      SCOPED_TRACE(testing::Message() << "x = " << at(x, r, c) << ", d = " << divisors[size_t(r)]);
      if (!normal[size_t(r)] || !std::isfinite(quotient)) {
        EXPECT_TRUE(std::memcmp(&got, &quotient, sizeof got) == 0 ||
                    (std::isnan(got) && std::isnan(quotient)))
            << got << " against " << quotient;
        continue;
      }
      const double exact = double(at(x, r, c)) / double(divisors[size_t(r)]);
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(exact), 0x1p-126)) - 23);
      EXPECT_LE(std::abs(double(got) - exact), 1.5 * ulp) << got;
    }
}

} // namespace
} // namespace frank::test
