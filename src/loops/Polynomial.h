// Polynomials in a kernel's runtime sizes, for the loop passes that prove facts about indices
// whose strides and extents are runtime values (partial specialization): fuse-loops' rows, and
// contract-temporaries'. Sizes are never negative, so a polynomial whose coefficients are all
// at least 0 is at least 0 whatever they are.
#pragma once

#include "loops/LoopIR.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace frank::loops {

/// A runtime size: a runtime dim, or one divided by a positive constant (a count of tiles),
/// which is never more than the dim divided exactly.
struct Size {
  int64_t dim = 0;
  int64_t divisor = 1;
  auto operator<=>(const Size &) const = default;
};

/// A polynomial in runtime sizes: each term's sizes (sorted, repeated for powers) and its
/// coefficient. Constants are the term of no sizes.
using Poly = std::map<std::vector<Size>, int64_t>;

Poly constantPoly(int64_t c);
/// a + sign * b.
Poly plus(Poly a, const Poly &b, int64_t sign = 1);
Poly times(const Poly &a, const Poly &b);
/// At least 0 for any sizes: every coefficient is, once each negative term with a quotient
/// d / c among its sizes takes the quotient's upper bound, d / c exactly (so that d - 4 * (d / 4)
/// is seen to be at least 0).
bool nonNegative(const Poly &p);

/// `p / divisor` when every term of `p` divides by the divisor, a single term (a stride: a
/// product of extents); nothing otherwise.
std::optional<Poly> exactQuotient(const Poly &p, const Poly &divisor);
/// A polynomial that `v / divisor` (rounded down) never exceeds for any v from 0 to `most`, or
/// nothing when this cannot tell: for a runtime divisor, the quotient of the first multiple
/// of it above `most`, less one (4 * d - 1 over d: 3).
std::optional<Poly> quotientBound(const Poly &most, const Poly &divisor);
/// The index arithmetic that computes `p`.
Expr exprOf(const Poly &p);

/// An index as `constant + sum(coefficient * variable)`, coefficients and constant polynomials.
struct Affine {
  std::map<std::string, Poly> coefficients;
  Poly constant;
};
/// `e` in that form, or nothing when it is not (a product of two variables, a load, a minimum).
std::optional<Affine> affineOf(const Expr &e);
/// An extent free of loop variables, as a polynomial.
std::optional<Poly> polyOf(const Expr &e);
/// A polynomial that an extent never exceeds: the extent, or for a minimum (a causal mask's
/// keys, `minsi(keys, last key seen + 1)`) a bound of either side.
std::optional<Poly> boundOf(const Expr &e);

} // namespace frank::loops
