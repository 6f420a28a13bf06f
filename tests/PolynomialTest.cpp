// Polynomials in runtime sizes: exact quotients by a stride, bounds of quotients by a radix,
// and the index arithmetic that computes a polynomial, each checked against brute force over
// the sizes they claim to hold for.
#include "loops/Polynomial.h"

#include <gtest/gtest.h>

namespace frank::test {
namespace {

using namespace frank::loops;

// d0 and d1 as polynomials, d1 / 4 a count of tiles.
Poly size(int64_t dim, int64_t divisor = 1) { return {{{Size{dim, divisor}}, 1}}; }
Poly k(int64_t c) { return constantPoly(c); }
Poly sum(const Poly &a, const Poly &b) { return plus(a, b); }

int64_t valueOf(const Poly &p, int64_t d0, int64_t d1) {
  const int64_t dims[2] = {d0, d1};
  return evaluate(exprOf(p), dims, nullptr);
}

TEST(Polynomial, ExactQuotientsByAStride) {
  const Poly d0 = size(0);
  // 512 d0 over the stride 128 d0: 4; 4 d0 + 8 over 4: d0 + 2.
  EXPECT_EQ(exactQuotient(times(k(512), d0), times(k(128), d0)), k(4));
  EXPECT_EQ(exactQuotient(sum(times(k(4), d0), k(8)), k(4)), sum(d0, k(2)));
  EXPECT_EQ(exactQuotient(times(d0, size(1)), d0), size(1));
  // Not exact for every size: d0 over 2 (d0 may be odd), 128 over d0, 4 d0 + 1 over 4, and a
  // divisor of two terms.
  EXPECT_FALSE(exactQuotient(d0, k(2)));
  EXPECT_FALSE(exactQuotient(k(128), d0));
  EXPECT_FALSE(exactQuotient(sum(times(k(4), d0), k(1)), k(4)));
  EXPECT_FALSE(exactQuotient(times(k(4), d0), sum(d0, k(1))));
  EXPECT_FALSE(exactQuotient(k(4), k(0)));
}

TEST(Polynomial, QuotientBoundsHoldForEverySize) {
  const Poly d0 = size(0), d1 = size(1);
  struct Case {
    Poly most, divisor, bound;
  };
  const std::vector<Case> cases = {
      {sum(times(k(4), d0), k(-1)), d0, k(3)}, // the last row of 4 groups of d0: group 3
      {sum(times(k(4), d0), k(-2)), d0, k(3)},
      {k(7), k(4), k(1)},
      {k(-1), k(4), k(-1)}, // a loop that never runs: no value to bound
      {sum(times(k(4), d0), k(-1)), k(4), sum(d0, k(-1))},
      {sum(times(k(8), d1), k(-1)), times(k(2), d1), k(3)},
      {sum(times(k(4), size(1, 4)), k(-1)), size(1, 4), k(3)},
  };
  for (const Case &c : cases) {
    std::optional<Poly> bound = quotientBound(c.most, c.divisor);
    ASSERT_TRUE(bound);
    EXPECT_EQ(*bound, c.bound);
    for (int64_t d0v = 1; d0v <= 9; ++d0v)
      for (int64_t d1v = 4; d1v <= 13; ++d1v) {
        const int64_t most = valueOf(c.most, d0v, d1v), divisor = valueOf(c.divisor, d0v, d1v);
        for (int64_t v = 0; v <= most; ++v)
          EXPECT_LE(v / divisor, valueOf(*bound, d0v, d1v)) << v << " " << d0v << " " << d1v;
      }
  }
  // d0 over d1, 8 d1 + 3 over 2 d1 (5 when d1 is 1), or anything over a divisor of two terms:
  // no bound.
  EXPECT_FALSE(quotientBound(d0, d1));
  EXPECT_FALSE(quotientBound(sum(times(k(8), d1), k(3)), times(k(2), d1)));
  EXPECT_FALSE(quotientBound(d0, sum(d1, k(1))));
}

TEST(Polynomial, ExprOfComputesThePolynomial) {
  const Poly p = sum(sum(times(times(k(3), size(0)), size(1, 4)), times(k(-2), size(1))), k(5));
  for (int64_t d0 = 0; d0 <= 5; ++d0)
    for (int64_t d1 = 0; d1 <= 9; ++d1)
      EXPECT_EQ(valueOf(p, d0, d1), 3 * d0 * (d1 / 4) - 2 * d1 + 5) << d0 << " " << d1;
  EXPECT_EQ(valueOf({}, 3, 4), 0);
}

} // namespace
} // namespace frank::test
