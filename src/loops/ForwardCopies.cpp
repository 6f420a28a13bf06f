// Forwarding permuting copies into their readers and writers (see ForwardCopies.h).
#include "loops/ForwardCopies.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace frank::loops {
namespace {

// ---- Index arithmetic ------------------------------------------------------------------------

// Loop variables and their constant extents; -1 for a name bound twice or not by a constant loop.
using Extents = std::map<std::string, int64_t>;

void collectExtents(const std::vector<Stmt> &body, Extents &extents) {
  for (const Stmt &s : body) {
    if (s->kind == StmtKind::For || s->kind == StmtKind::Let || s->kind == StmtKind::Local) {
      auto c = s->kind == StmtKind::For ? asConstant(s->value) : std::nullopt;
      auto [it, fresh] = extents.insert({s->name, c.value_or(-1)});
      if (!fresh || !c || *c <= 0)
        it->second = -1;
    }
    collectExtents(s->body, extents);
    collectExtents(s->elseBody, extents);
  }
}

// One loop of a copy nest: digit `var` of a buffer's index, `extent` values at `stride`.
struct Digit {
  std::string var;
  int64_t extent, stride;
};

// The digits of a store index that walks `size` elements densely (strides 1, e0, e0 e1, ...),
// innermost first; nullopt otherwise (a copy of one element, with no loop in its index, too).
std::optional<std::vector<Digit>> denseLayout(const Expr &index, const Extents &extents,
                                              int64_t size) {
  LinearIndex l = linearIndex(index);
  if (!l.ok || l.constant != 0 || l.terms.empty())
    return std::nullopt;
  std::vector<Digit> digits;
  for (const auto &[coef, atom] : l.terms) {
    auto e = extents.find(atom->name);
    if (e == extents.end() || e->second < 0)
      return std::nullopt;
    digits.push_back({atom->name, e->second, coef});
  }
  std::sort(digits.begin(), digits.end(),
            [](const Digit &a, const Digit &b) { return a.stride < b.stride; });
  std::set<std::string> vars;
  int64_t stride = 1;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (digits[i].stride != stride || !vars.insert(digits[i].var).second)
      return std::nullopt;
    stride = saturatingMul(stride, digits[i].extent);
  }
  if (stride != size)
    return std::nullopt;
  return digits;
}

// The value of each digit at `index` (a vector access of `lanes` stays within digit 0), or
// nullopt when some digit's terms could exceed its radix (a carry this does not model).
std::optional<std::vector<Expr>> split(const Expr &index, int lanes,
                                       const std::vector<Digit> &digits, const Extents &extents) {
  LinearIndex l = linearIndex(index);
  if (!l.ok || l.constant < 0)
    return std::nullopt;
  const size_t n = digits.size();
  std::vector<Expr> value(n, intConst(0));
  std::vector<int64_t> most(n, 0);
  // Adds `atom * scale` (atom in [0, extent)) to digit i, carrying what passes its radix.
  std::function<bool(Expr, int64_t, int64_t, size_t)> place = [&](Expr atom, int64_t scale,
                                                                  int64_t extent, size_t i) {
    if (i >= n)
      return false;
    const int64_t radix = digits[i].extent;
    if ((extent - 1) <= (radix - 1) / scale) {
      value[i] = add(value[i], mul(atom, intConst(scale)));
      most[i] += (extent - 1) * scale;
      return true;
    }
    if (radix % scale != 0)
      return false;
    const int64_t per = radix / scale; // values of atom within this digit
    value[i] = add(value[i], mul(binary(OpKind::RemSI, atom, intConst(per)), intConst(scale)));
    most[i] += (per - 1) * scale;
    return place(quotient(atom, per), 1, (extent + per - 1) / per, i + 1);
  };
  for (const auto &[coef, atom] : l.terms) {
    auto e = extents.find(atom->name);
    if (coef <= 0 || e == extents.end() || e->second < 0)
      return std::nullopt;
    size_t i = 0;
    while (i + 1 < n && digits[i + 1].stride <= coef)
      ++i;
    if (coef % digits[i].stride != 0 || !place(atom, coef / digits[i].stride, e->second, i))
      return std::nullopt;
  }
  int64_t rest = l.constant;
  for (size_t i = n; i-- > 0;) {
    value[i] = add(value[i], intConst(rest / digits[i].stride));
    most[i] += rest / digits[i].stride;
    rest %= digits[i].stride;
  }
  most[0] += lanes - 1;
  for (size_t i = 0; i < n; ++i)
    if (most[i] >= digits[i].extent)
      return std::nullopt;
  return value;
}

// Whether every variable of `index` is one of the digits.
bool onlyDigits(const LinearIndex &index, const std::vector<Digit> &digits) {
  return index.ok && std::all_of(index.terms.begin(), index.terms.end(), [&](const auto &term) {
           return std::any_of(digits.begin(), digits.end(),
                              [&](const Digit &d) { return d.var == term.second->name; });
         });
}

// `index` (linear in the digits' variables) at the given digit values.
Expr substitute(const LinearIndex &index, const std::vector<Digit> &digits,
                const std::vector<Expr> &values) {
  Expr sum = intConst(index.constant);
  for (const auto &[coef, atom] : index.terms) {
    Expr v = atom;
    for (size_t i = 0; i < digits.size(); ++i)
      if (digits[i].var == atom->name)
        v = values[i];
    sum = add(sum, mul(v, intConst(coef)));
  }
  return sum;
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

// Copy nests that run for every value of their loops: under loops of constant extents only.
void findCopyNests(std::vector<Stmt> &body, std::vector<CopyNest> &out) {
  for (const Stmt &s : body) {
    if (s->kind != StmtKind::For || !asConstant(s->value))
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
                                             const LinearIndex &other, const Extents &extents) {
  auto size = asConstant(p.buffers[buffer].numElements);
  if (p.buffers[buffer].role != BufferRole::Temp || !size)
    return std::nullopt;
  auto digits = denseLayout(index, extents, *size);
  if (!digits || !onlyDigits(other, *digits))
    return std::nullopt;
  return digits;
}

// Reads of `copy.to` read `copy.from` instead: the copy fills a temporary from a buffer nothing
// writes.
bool forwardReads(Program &p, const CopyNest &copy, const Extents &extents) {
  LinearIndex from = linearIndex(copy.fromIndex);
  auto digits = copyDigits(p, copy.to, copy.toIndex, from, extents);
  if (!digits || writesTo(p.body, copy.from))
    return false;
  for (const BufferAccess &a : accessesOf(p.body, copy.to)) {
    if (a.stmt == copy.store)
      continue;
    if (a.isStore() || !split(a.index(), a.lanes(), *digits, extents))
      return false;
  }
  auto moved = [&](const Expr &index) {
    return substitute(from, *digits, *split(index, 1, *digits, extents));
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
  LinearIndex to = linearIndex(copy.toIndex);
  auto digits = copyDigits(p, copy.from, copy.fromIndex, to, extents);
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
      s.index = substitute(to, *digits, *split(s.index, 1, *digits, extents));
      s.buffer = copy.to;
    }
  });
  return true;
}

// Rows stay rows: the innermost loop of the copy that has more than one value has stride 1 on
// both sides (a copy that only repeats or transposes values is left to the strategy).
bool preservesRows(const CopyNest &copy, const Extents &extents) {
  auto rowVar = [&](const Expr &index) -> std::string {
    for (const auto &[coef, atom] : linearIndex(index).terms)
      if (coef == 1 && extents.count(atom->name) && extents.at(atom->name) != 1)
        return atom->name;
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
