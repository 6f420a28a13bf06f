// Forwarding permuting copies into their readers and writers (see ForwardCopies.h).
#include "loops/ForwardCopies.h"
#include "loops/Polynomial.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace frank::loops {
namespace {

// ---- Index arithmetic ------------------------------------------------------------------------

// Loop variables and their extents, polynomials in the runtime sizes (constants when every
// size is baked in); nothing for a name a let binds, loops of different extents bind, or a loop
// whose extent is no polynomial (a causal mask's minimum).
using Extents = std::map<std::string, std::optional<Poly>>;

void collectExtents(const std::vector<Stmt> &body, Extents &extents) {
  for (const Stmt &s : body) {
    if (s->kind == StmtKind::For || s->kind == StmtKind::Let || s->kind == StmtKind::Local) {
      std::optional<Poly> extent = s->kind == StmtKind::For ? polyOf(s->value) : std::nullopt;
      auto [it, fresh] = extents.insert({s->name, extent});
      if (!fresh && it->second != extent)
        it->second = std::nullopt;
    }
    collectExtents(s->body, extents);
    collectExtents(s->elseBody, extents);
  }
}

std::optional<Poly> extentOf(const Extents &extents, const std::string &var) {
  auto e = extents.find(var);
  return e == extents.end() ? std::nullopt : e->second;
}

Poly minusOne(const Poly &p) { return plus(p, constantPoly(1), -1); }

// Whether values up to `most` stay within `radix` values.
bool fits(const Poly &most, const Poly &radix) {
  return nonNegative(plus(minusOne(radix), most, -1));
}

// One loop of a copy nest: digit `var` of a buffer's index, `extent` values at `stride`.
struct Digit {
  std::string var;
  Poly extent, stride;
};

// The digits of a store index that walks `size` elements densely (strides 1, e0, e0 e1, ...),
// innermost first; nullopt otherwise (a copy of one element, with no loop in its index, too).
std::optional<std::vector<Digit>> denseLayout(const Expr &index, const Extents &extents,
                                              const Poly &size) {
  std::optional<Affine> a = affineOf(index);
  if (!a || !a->constant.empty())
    return std::nullopt;
  std::map<std::string, Poly> left;
  for (const auto &[var, coefficient] : a->coefficients)
    if (!coefficient.empty())
      left.insert({var, coefficient});
  std::vector<Digit> digits;
  Poly stride = constantPoly(1);
  while (!left.empty()) {
    auto next = std::find_if(left.begin(), left.end(),
                             [&](const auto &term) { return term.second == stride; });
    if (next == left.end())
      return std::nullopt;
    std::optional<Poly> extent = extentOf(extents, next->first);
    if (!extent)
      return std::nullopt;
    digits.push_back({next->first, *extent, stride});
    stride = times(stride, *extent);
    left.erase(next);
  }
  if (digits.empty() || stride != size)
    return std::nullopt;
  return digits;
}

// `value` divided by, and the remainder by, a digit's radix.
Expr divided(const Expr &value, const Poly &radix) {
  if (auto k = asConstant(exprOf(radix)))
    return quotient(value, *k);
  return binary(OpKind::DivSI, value, exprOf(radix));
}
Expr remainder(const Expr &value, const Poly &radix) {
  return binary(OpKind::RemSI, value, exprOf(radix));
}

// The value of each digit at `index` (a vector access of `lanes` stays within digit 0), or
// nullopt when this cannot tell. A term that could pass its digit's radix carries into the next
// digits: on its own, when the radix is a multiple of its scale (m * 2 over radix 128: (m % 64)
// * 2 here, m / 64 in the next digit), which leaves room for the smaller terms beside it;
// otherwise the digit's whole value does (m * 2 + 1 over a runtime radix d: (m * 2 + 1) % d
// here, (m * 2 + 1) / d in the next digit).
std::optional<std::vector<Expr>> split(const Expr &index, int lanes,
                                       const std::vector<Digit> &digits, const Extents &extents) {
  std::optional<Affine> a = affineOf(index);
  if (!a)
    return std::nullopt;
  const size_t n = digits.size();
  std::vector<Expr> value(n, intConst(0));
  std::vector<Poly> most(n);
  // Adds `atom * scale` (atom from 0 to `top`) to digit i.
  std::function<bool(Expr, const Poly &, const Poly &, size_t)> place =
      [&](Expr atom, const Poly &scale, const Poly &top, size_t i) {
        if (i >= n)
          return false;
        const Poly &radix = digits[i].extent;
        const Poly scaled = times(top, scale);
        std::optional<Poly> per = exactQuotient(radix, scale); // values of atom within digit i
        std::optional<Poly> carried = per ? quotientBound(top, *per) : std::nullopt;
        if (fits(scaled, radix) || !carried) {
          value[i] = add(value[i], mul(atom, exprOf(scale)));
          most[i] = plus(most[i], scaled);
          return true;
        }
        value[i] = add(value[i], mul(remainder(atom, *per), exprOf(scale)));
        most[i] = plus(most[i], times(minusOne(*per), scale));
        return place(divided(atom, *per), constantPoly(1), *carried, i + 1);
      };
  for (const auto &[name, coefficient] : a->coefficients) {
    if (coefficient.empty())
      continue;
    std::optional<Poly> extent = extentOf(extents, name);
    if (!extent || !nonNegative(coefficient))
      return std::nullopt;
    // The outermost digit whose stride divides the coefficient.
    size_t i = n;
    std::optional<Poly> scale;
    while (i-- > 0 && !(scale = exactQuotient(coefficient, digits[i].stride)))
      ;
    if (!scale || !place(var(name, ElemKind::Index), *scale, minusOne(*extent), i))
      return std::nullopt;
  }
  // The constant, term by term, from the outermost digit whose stride it holds.
  for (const auto &[sizes, coefficient] : a->constant) {
    int64_t rest = coefficient;
    for (size_t i = n; i-- > 0 && rest > 0;) {
      const Poly &stride = digits[i].stride;
      if (stride.size() != 1 || rest < stride.begin()->second)
        continue;
      std::optional<Poly> unit = exactQuotient({{sizes, 1}}, {{stride.begin()->first, 1}});
      if (!unit)
        continue;
      const Poly part = times(*unit, constantPoly(rest / stride.begin()->second));
      value[i] = add(value[i], exprOf(part));
      most[i] = plus(most[i], part);
      rest %= stride.begin()->second;
    }
    if (rest != 0)
      return std::nullopt;
  }
  most[0] = plus(most[0], constantPoly(lanes - 1));
  // The digits whose terms could pass their radix carry into the next.
  for (size_t i = 0; i < n; ++i) {
    const Poly &radix = digits[i].extent;
    if (fits(most[i], radix))
      continue;
    std::optional<Poly> carried = quotientBound(most[i], radix);
    if (i + 1 == n || (i == 0 && lanes > 1) || !carried)
      return std::nullopt;
    value[i + 1] = add(value[i + 1], divided(value[i], radix));
    most[i + 1] = plus(most[i + 1], *carried);
    value[i] = remainder(value[i], radix);
    most[i] = minusOne(radix);
  }
  return value;
}

// Whether every variable of `index` is one of the digits.
bool onlyDigits(const Affine &index, const std::vector<Digit> &digits) {
  return std::all_of(index.coefficients.begin(), index.coefficients.end(), [&](const auto &term) {
    return term.second.empty() || std::any_of(digits.begin(), digits.end(),
                                              [&](const Digit &d) { return d.var == term.first; });
  });
}

// `index` (in the digits' variables) at the given digit values.
Expr substitute(Expr index, const std::vector<Digit> &digits, const std::vector<Expr> &values) {
  // Through placeholders first, as a value may name another digit's variable.
  auto placeholder = [](size_t i) { return "digit " + std::to_string(i); };
  for (size_t i = 0; i < digits.size(); ++i)
    index = loops::substitute(index, digits[i].var, var(placeholder(i), ElemKind::Index));
  for (size_t i = 0; i < digits.size(); ++i)
    index = loops::substitute(index, placeholder(i), values[i]);
  return index;
}

// ---- Copy nests ------------------------------------------------------------------------------

// A nest of constant loops, each holding only the next, around `to[toIndex] = from[fromIndex]`.
struct CopyNest {
  std::vector<Stmt> *owner = nullptr; // the body holding `root`
  Stmt root;
  int from = -1, to = -1;
  Expr fromIndex, toIndex;
  const StmtNode *store = nullptr;
  const ExprNode *load = nullptr;
};

std::optional<CopyNest> copyNestAt(std::vector<Stmt> &owner, const Stmt &root) {
  const StmtNode *loop = root.get();
  while (loop->body.size() == 1 && loop->body[0]->kind == StmtKind::For)
    loop = loop->body[0].get();
  const std::vector<Stmt> &inner = loop->body;
  const StmtNode *st = inner.empty() ? nullptr : inner.back().get();
  if (!st || st->kind != StmtKind::Store || inner.size() > 2)
    return std::nullopt;
  Expr value = st->value;
  if (inner.size() == 2) {
    const StmtNode &l = *inner[0];
    if (l.kind != StmtKind::Let || value->kind != ExprKind::Var || value->name != l.name)
      return std::nullopt;
    value = l.value;
  }
  if (value->kind != ExprKind::Load || value->lanes != 1 || st->buffer == value->intValue)
    return std::nullopt;
  return CopyNest{&owner,     root,           static_cast<int>(value->intValue),
                  st->buffer, value->args[0], st->index,
                  st,         value.get()};
}

// Copy nests that run for every value of their loops: under loops whose extents are
// polynomials (not a causal mask's minimum) only.
void findCopyNests(std::vector<Stmt> &body, std::vector<CopyNest> &out) {
  for (const Stmt &s : body) {
    if (s->kind != StmtKind::For || !polyOf(s->value))
      continue;
    if (auto nest = copyNestAt(body, s))
      out.push_back(*nest);
    else
      findCopyNests(s->body, out);
  }
}

// ---- Accesses ----------------------------------------------------------------------------------

bool writesTo(const std::vector<Stmt> &body, int buffer) {
  auto accesses = accessesOf(body, buffer);
  return std::any_of(accesses.begin(), accesses.end(),
                     [](const BufferAccess &a) { return a.isStore(); });
}

// The digits of a copy's `index` into the temporary `buffer`, when it walks all of it densely
// and the copy's other index names no loop but them.
std::optional<std::vector<Digit>> copyDigits(const Program &p, int buffer, const Expr &index,
                                             const Expr &other, const Extents &extents) {
  std::optional<Poly> size = polyOf(p.buffers[buffer].numElements);
  std::optional<Affine> otherIndex = affineOf(other);
  if (p.buffers[buffer].role != BufferRole::Temp || !size)
    return std::nullopt;
  auto digits = denseLayout(index, extents, *size);
  if (!digits || !otherIndex || !onlyDigits(*otherIndex, *digits))
    return std::nullopt;
  return digits;
}

// Reads of `copy.to` read `copy.from` instead: the copy fills a temporary from a buffer nothing
// writes.
bool forwardReads(Program &p, const CopyNest &copy, const Extents &extents) {
  auto digits = copyDigits(p, copy.to, copy.toIndex, copy.fromIndex, extents);
  if (!digits || writesTo(p.body, copy.from))
    return false;
  for (const BufferAccess &a : accessesOf(p.body, copy.to)) {
    if (a.stmt == copy.store)
      continue;
    if (a.isStore() || !split(a.index(), a.lanes(), *digits, extents))
      return false;
  }
  auto moved = [&](const Expr &index) {
    return substitute(copy.fromIndex, *digits, *split(index, 1, *digits, extents));
  };
  forEachStmt(p.body, [&](StmtNode &s) {
    if (&s == copy.store)
      return;
    if (s.kind == StmtKind::Prefetch && s.buffer == copy.to) {
      s.buffer = copy.from;
      s.index = moved(s.index);
    }
    for (Expr *e : {&s.value, &s.index, &s.bound})
      *e = mapLoads(*e, [&](const Expr &load) {
        if (load->intValue != copy.to)
          return load;
        return loops::load(copy.from, moved(load->args[0]), load->type, load->lanes);
      });
  });
  return true;
}

// Writes of `copy.from` write `copy.to` instead: the copy empties a temporary nothing else reads,
// written before it, into a buffer nothing else touches.
bool forwardWrites(Program &p, const CopyNest &copy, const Extents &extents) {
  // A copy that widens (LoopIR.h's load) leaves the writes at their narrower type.
  if (p.buffers[copy.from].elem != p.buffers[copy.to].elem)
    return false;
  auto digits = copyDigits(p, copy.from, copy.fromIndex, copy.toIndex, extents);
  if (!digits)
    return false;
  for (const BufferAccess &a : accessesOf(p.body, copy.to))
    if (a.stmt != copy.store)
      return false;
  // Every write comes before the copy in its block, as the copy read the last of them.
  auto &owner = *copy.owner;
  std::vector<Stmt> before(owner.begin(), std::find(owner.begin(), owner.end(), copy.root));
  if (accessesOf(before, copy.from).size() + 1 != accessesOf(p.body, copy.from).size())
    return false;
  for (const BufferAccess &a : accessesOf(p.body, copy.from)) {
    if (a.load == copy.load)
      continue;
    if (!a.isStore() || !split(a.index(), a.lanes(), *digits, extents))
      return false;
  }
  forEachStmt(p.body, [&](StmtNode &s) {
    if (s.kind == StmtKind::Store && s.buffer == copy.from) {
      s.index = substitute(copy.toIndex, *digits, *split(s.index, 1, *digits, extents));
      s.buffer = copy.to;
    }
  });
  return true;
}

// Rows stay rows: the innermost loop of the copy that has more than one value has stride 1 on
// both sides (a copy that only repeats or transposes values is left to the strategy).
bool preservesRows(const CopyNest &copy, const Extents &extents) {
  auto rowVar = [&](const Expr &index) -> std::string {
    std::optional<Affine> a = affineOf(index);
    if (!a)
      return {};
    for (const auto &[name, coefficient] : a->coefficients) {
      std::optional<Poly> extent = extentOf(extents, name);
      if (coefficient == constantPoly(1) && extent && *extent != constantPoly(1))
        return name;
    }
    return {};
  };
  std::string v = rowVar(copy.toIndex);
  return !v.empty() && v == rowVar(copy.fromIndex);
}

} // namespace

int forwardCopies(Program &program) {
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    Extents extents;
    collectExtents(program.body, extents);
    std::vector<CopyNest> nests;
    findCopyNests(program.body, nests);
    for (const CopyNest &copy : nests) {
      if (program.buffers[copy.from].elem != program.buffers[copy.to].elem ||
          !preservesRows(copy, extents))
        continue;
      if (forwardReads(program, copy, extents) || forwardWrites(program, copy, extents)) {
        auto &owner = *copy.owner;
        owner.erase(std::find(owner.begin(), owner.end(), copy.root));
        ++removed;
        changed = true;
        break;
      }
    }
  }
  return removed;
}

} // namespace frank::loops
