// Polynomials in runtime sizes (see Polynomial.h).
#include "loops/Polynomial.h"

#include <algorithm>
#include <iterator>

namespace frank::loops {

Poly constantPoly(int64_t c) { return c ? Poly{{{}, c}} : Poly{}; }

Poly plus(Poly a, const Poly &b, int64_t sign) {
  for (const auto &[term, k] : b)
    if ((a[term] += sign * k) == 0)
      a.erase(term);
  return a;
}

Poly times(const Poly &a, const Poly &b) {
  Poly product;
  for (const auto &[ta, ka] : a)
    for (const auto &[tb, kb] : b) {
      std::vector<Size> term = ta;
      term.insert(term.end(), tb.begin(), tb.end());
      std::sort(term.begin(), term.end());
      product = plus(std::move(product), {{term, ka * kb}});
    }
  return product;
}

bool nonNegative(const Poly &p) {
  Poly bounded;
  for (const auto &[sizes, coefficient] : p) {
    std::vector<Size> term = sizes;
    int64_t k = coefficient;
    auto quotient =
        std::find_if(term.begin(), term.end(), [](const Size &s) { return s.divisor > 1; });
    if (k < 0 && quotient != term.end() && k % quotient->divisor == 0) {
      k /= quotient->divisor;
      quotient->divisor = 1;
      std::sort(term.begin(), term.end());
    }
    bounded = plus(std::move(bounded), {{term, k}});
  }
  return std::all_of(bounded.begin(), bounded.end(),
                     [](const auto &term) { return term.second >= 0; });
}

namespace {

// Whether `sizes` holds every size of `part` (sorted multisets); `rest` gets the others.
bool holds(const std::vector<Size> &sizes, const std::vector<Size> &part, std::vector<Size> &rest) {
  rest.clear();
  if (!std::includes(sizes.begin(), sizes.end(), part.begin(), part.end()))
    return false;
  std::set_difference(sizes.begin(), sizes.end(), part.begin(), part.end(),
                      std::back_inserter(rest));
  return true;
}

} // namespace

std::optional<Poly> exactQuotient(const Poly &p, const Poly &divisor) {
  if (divisor.size() != 1 || divisor.begin()->second <= 0)
    return std::nullopt;
  const auto &[sizes, k] = *divisor.begin();
  Poly quotient;
  std::vector<Size> rest;
  for (const auto &[term, coefficient] : p) {
    if (!holds(term, sizes, rest) || coefficient % k != 0)
      return std::nullopt;
    quotient = plus(std::move(quotient), {{rest, coefficient / k}});
  }
  return quotient;
}

std::optional<Poly> quotientBound(const Poly &most, const Poly &divisor) {
  if (divisor.size() != 1 || divisor.begin()->second <= 0)
    return std::nullopt;
  const auto &[sizes, k] = *divisor.begin();
  // most + 1 <= multiple * divisor term by term (every product of sizes is at least 0): a
  // term the divisor's sizes divide rounds up, a negative one it does not can be dropped.
  Poly multiple;
  std::vector<Size> rest;
  for (const auto &[term, coefficient] : plus(most, constantPoly(1))) {
    if (holds(term, sizes, rest)) {
      const int64_t up = coefficient >= 0 ? (coefficient + k - 1) / k : -(-coefficient / k);
      multiple = plus(std::move(multiple), {{rest, up}});
    } else if (coefficient > 0) {
      return std::nullopt;
    }
  }
  return plus(std::move(multiple), constantPoly(-1));
}

Expr exprOf(const Poly &p) {
  Expr sum = intConst(0);
  for (const auto &[sizes, coefficient] : p) {
    Expr term = intConst(coefficient);
    for (const Size &s : sizes)
      term = mul(term, s.divisor == 1
                           ? dimParam(int(s.dim))
                           : binary(OpKind::DivSI, dimParam(int(s.dim)), intConst(s.divisor)));
    sum = add(sum, term);
  }
  return sum;
}

namespace {

std::optional<Size> sizeOf(const Expr &e) {
  if (e->kind == ExprKind::DimParam)
    return Size{e->intValue, 1};
  if (e->kind != ExprKind::Binary || (e->op != OpKind::DivSI && e->op != OpKind::DivUI) ||
      e->args[0]->kind != ExprKind::DimParam)
    return std::nullopt;
  std::optional<int64_t> divisor = asConstant(e->args[1]);
  if (!divisor || *divisor <= 0)
    return std::nullopt;
  return Size{e->args[0]->intValue, *divisor};
}

} // namespace

std::optional<Affine> affineOf(const Expr &e) {
  if (e->kind == ExprKind::IntConst)
    return Affine{{}, constantPoly(e->intValue)};
  if (std::optional<Size> size = sizeOf(e))
    return Affine{{}, Poly{{{*size}, 1}}};
  if (e->kind == ExprKind::Var && e->lanes == 1)
    return Affine{{{e->name, constantPoly(1)}}, {}};
  if (e->kind != ExprKind::Binary ||
      (e->op != OpKind::AddI && e->op != OpKind::SubI && e->op != OpKind::MulI))
    return std::nullopt;
  auto a = affineOf(e->args[0]), b = affineOf(e->args[1]);
  if (!a || !b)
    return std::nullopt;
  if (e->op == OpKind::MulI) {
    if (!a->coefficients.empty() && !b->coefficients.empty())
      return std::nullopt;
    Affine scaled = a->coefficients.empty() ? *b : *a;
    const Poly &factor = a->coefficients.empty() ? a->constant : b->constant;
    for (auto &[name, k] : scaled.coefficients)
      k = times(k, factor);
    scaled.constant = times(scaled.constant, factor);
    return scaled;
  }
  const int64_t sign = e->op == OpKind::SubI ? -1 : 1;
  for (const auto &[name, k] : b->coefficients)
    a->coefficients[name] = plus(a->coefficients[name], k, sign);
  a->constant = plus(a->constant, b->constant, sign);
  return a;
}

std::optional<Poly> polyOf(const Expr &e) {
  std::optional<Affine> a = affineOf(e);
  if (!a)
    return std::nullopt;
  for (const auto &[name, k] : a->coefficients)
    if (!k.empty())
      return std::nullopt;
  return a->constant;
}

std::optional<Poly> boundOf(const Expr &e) {
  if (std::optional<Poly> p = polyOf(e))
    return p;
  if (e->kind != ExprKind::Binary || e->op != OpKind::MinSI)
    return std::nullopt;
  std::optional<Poly> a = boundOf(e->args[0]);
  return a ? a : boundOf(e->args[1]);
}

} // namespace frank::loops
