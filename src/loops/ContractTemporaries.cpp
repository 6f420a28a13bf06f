// Contracting temporaries to one row per loop (see ContractTemporaries.h).
#include "loops/ContractTemporaries.h"
#include "loops/Polynomial.h"

#include <algorithm>
#include <map>

namespace frank::loops {
namespace {

// `index` without its terms in `var`.
Expr withoutTerm(const Expr &index, const std::string &var) {
  LinearIndex l = linearIndex(index);
  Expr sum = intConst(0);
  for (const auto &[c, v] : l.terms)
    if (v->name != var)
      sum = add(sum, mul(v, intConst(c)));
  return add(sum, intConst(l.constant));
}

// Every access of `buffer` with its index rewritten by `dropped`, which drops the row term.
void dropRowTerm(Program &p, int buffer, const std::function<Expr(const Expr &)> &dropped) {
  forEachStmt(p.body, [&](StmtNode &s) {
    if ((s.kind == StmtKind::Store || s.kind == StmtKind::Prefetch) && s.buffer == buffer)
      s.index = dropped(s.index);
    for (Expr *e : {&s.value, &s.index, &s.bound})
      *e = mapLoads(*e, [&](const Expr &x) {
        return x->intValue == buffer ? load(buffer, dropped(x->args[0]), x->type, x->lanes) : x;
      });
  });
}

// rowsOfTheirOwn over runtime sizes: the row stride, the inner parts' bounds and the outer
// terms' steps are polynomials in them (a partly specialized softmax's rows, each as long as
// the runtime key count). Each access is `S * i + inner + outer`, the inner part within [0, S)
// and the outer part the same for all; the outer terms, in some order, each step at least past
// the rows and the smaller terms' reach, so that different iterations outside never share a
// row (no divisibility needed: a row never reaches the next term's step).
bool rowsOfTheirOwnOverRuntimeSizes(const std::vector<BufferAccess> &accesses, size_t depth) {
  const StmtNode &loop = *accesses[0].loops[depth];
  const std::optional<Poly> extent = polyOf(loop.value);
  if (loop.forKind != ForKind::Serial || !extent)
    return false;
  std::optional<Poly> stride;
  using Terms = std::map<std::string, std::pair<Poly, Poly>>; // coefficient, loop extent
  std::optional<Terms> sharedOuter;
  for (const BufferAccess &a : accesses) {
    const std::optional<Affine> index = affineOf(a.index());
    if (!index)
      return false;
    Poly lo = index->constant, hi = plus(index->constant, constantPoly(a.lanes() - 1));
    Terms outer;
    for (const auto &[name, k] : index->coefficients) {
      if (k.empty())
        continue;
      if (name == loop.name) {
        if (stride && *stride != k)
          return false;
        stride = k;
        continue;
      }
      auto around = std::find_if(a.loops.begin(), a.loops.end(),
                                 [&](const StmtNode *l) { return l->name == name; });
      if (around == a.loops.end() || !nonNegative(k))
        return false;
      std::optional<Poly> trips = boundOf((*around)->value);
      if (!trips)
        return false;
      if (size_t(around - a.loops.begin()) < depth)
        outer[name] = {k, *trips};
      else // k times the last iteration, extent - 1: at least 0 whenever the loop runs
        hi = plus(hi, times(k, plus(*trips, constantPoly(-1))));
    }
    if (!stride || !nonNegative(lo) ||
        !nonNegative(plus(plus(*stride, constantPoly(-1)), hi, -1)) ||
        (sharedOuter && *sharedOuter != outer))
      return false;
    sharedOuter = std::move(outer);
  }
  Poly reach = times(*stride, *extent);
  while (!sharedOuter->empty()) {
    auto next = std::find_if(sharedOuter->begin(), sharedOuter->end(), [&](const auto &term) {
      return nonNegative(plus(term.second.first, reach, -1));
    });
    if (next == sharedOuter->end())
      return false;
    reach = times(next->second.first, next->second.second);
    sharedOuter->erase(next);
  }
  return true;
}

} // namespace

int contractTemporaries(Program &program) {
  int contracted = 0;
  // Collected in one walk, and again after each contraction, which rebuilds expressions.
  std::vector<std::vector<BufferAccess>> accesses =
      accessesByBuffer(program.body, program.buffers.size());
  for (size_t buffer = 0; buffer < program.buffers.size(); ++buffer) {
    const std::vector<BufferAccess> &list = accesses[buffer];
    if (program.buffers[buffer].role != BufferRole::Temp || list.empty())
      continue;
    // The loops around every access.
    size_t common = list[0].loops.size();
    for (const BufferAccess &a : list) {
      size_t d = 0;
      while (d < common && d < a.loops.size() && a.loops[d] == list[0].loops[d])
        ++d;
      common = d;
    }
    for (size_t depth = common; depth-- > 0;) {
      int64_t rowStride = 0;
      const std::string row = list[0].loops[depth]->name;
      bool contract = false;
      if (rowsOfTheirOwn(list, depth, rowStride)) {
        dropRowTerm(program, int(buffer), [&](const Expr &i) { return withoutTerm(i, row); });
        contract = true;
      } else if (program.numDimParams > 0 && rowsOfTheirOwnOverRuntimeSizes(list, depth)) {
        // Every index is affine in the row's variable: at 0 it has no row term.
        dropRowTerm(program, int(buffer),
                    [&](const Expr &i) { return substitute(i, row, intConst(0)); });
        contract = true;
      }
      if (contract) {
        ++contracted;
        accesses = accessesByBuffer(program.body, program.buffers.size());
        break;
      }
    }
  }
  return contracted;
}

} // namespace frank::loops
