// Contracting temporaries to one row per loop (see ContractTemporaries.h).
#include "loops/ContractTemporaries.h"

#include <algorithm>
#include <map>

namespace frank::loops {
namespace {

// The loop of `access` named `var`, innermost first, and its depth; -1 when none is.
int depthOf(const BufferAccess &access, const std::string &var) {
  for (size_t d = access.loops.size(); d-- > 0;)
    if (access.loops[d]->name == var)
      return static_cast<int>(d);
  return -1;
}

// Whether every access indexes `S * row + inner + outer` for the loop at `depth` (see the
// header); `rowStride` receives S.
bool rowsOfTheirOwn(const std::vector<BufferAccess> &accesses, size_t depth, int64_t &rowStride) {
  const StmtNode &loop = *accesses[0].loops[depth];
  auto extent = asConstant(loop.value);
  if (loop.forKind != ForKind::Serial || !extent)
    return false;
  std::optional<std::map<std::string, std::pair<int64_t, int64_t>>> sharedOuter;
  rowStride = -1;
  for (const BufferAccess &a : accesses) {
    LinearIndex l = linearIndex(a.index());
    if (!l.ok || l.constant < 0)
      return false;
    std::map<std::string, int64_t> coef;
    for (const auto &[c, v] : l.terms)
      if (__builtin_add_overflow(coef[v->name], c, &coef[v->name]))
        return false;
    auto row = coef.find(loop.name);
    if (row == coef.end() || row->second <= 0 || (rowStride >= 0 && row->second != rowStride))
      return false;
    rowStride = row->second;
    int64_t innerMost = 0;
    if (__builtin_add_overflow(l.constant, a.lanes() - 1, &innerMost))
      return false;
    std::map<std::string, std::pair<int64_t, int64_t>> outer; // coefficient, loop extent
    for (const auto &[var, c] : coef) {
      const int d = depthOf(a, var);
      if (var == loop.name || c == 0)
        continue;
      if (d < 0 || c < 0)
        return false;
      auto values = asConstant(a.loops[size_t(d)]->value);
      if (!values || *values <= 0)
        return false;
      if (d < static_cast<int>(depth)) {
        outer[var] = {c, *values};
        continue;
      }
      if (__builtin_add_overflow(innerMost, saturatingMul(c, *values - 1), &innerMost))
        return false;
    }
    if (innerMost >= rowStride || (sharedOuter && *sharedOuter != outer))
      return false;
    sharedOuter = outer;
  }
  // Each outer term steps past all the rows and the smaller outer terms, so that different
  // iterations outside never share a row.
  std::vector<std::pair<int64_t, int64_t>> steps;
  for (const auto &[var, step] : *sharedOuter)
    steps.push_back(step);
  std::sort(steps.begin(), steps.end());
  int64_t reach = saturatingMul(rowStride, *extent);
  for (const auto &[c, values] : steps) {
    if (c % saturatingMul(rowStride, *extent) != 0 || c < reach)
      return false;
    reach = saturatingMul(c, values);
  }
  return true;
}

// `index` without its terms in `var`.
Expr withoutTerm(const Expr &index, const std::string &var) {
  LinearIndex l = linearIndex(index);
  Expr sum = intConst(0);
  for (const auto &[c, v] : l.terms)
    if (v->name != var)
      sum = add(sum, mul(v, intConst(c)));
  return add(sum, intConst(l.constant));
}

void dropRowTerm(Program &p, int buffer, const std::string &var) {
  forEachStmt(p.body, [&](StmtNode &s) {
    if ((s.kind == StmtKind::Store || s.kind == StmtKind::Prefetch) && s.buffer == buffer)
      s.index = withoutTerm(s.index, var);
    for (Expr *e : {&s.value, &s.index, &s.bound})
      *e = mapLoads(*e, [&](const Expr &x) {
        return x->intValue == buffer ? load(buffer, withoutTerm(x->args[0], var), x->type, x->lanes)
                                     : x;
      });
  });
}

} // namespace

int contractTemporaries(Program &program) {
  int contracted = 0;
  for (size_t buffer = 0; buffer < program.buffers.size(); ++buffer) {
    std::vector<BufferAccess> list = accessesOf(program.body, int(buffer));
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
      if (rowsOfTheirOwn(list, depth, rowStride)) {
        dropRowTerm(program, int(buffer), list[0].loops[depth]->name);
        ++contracted;
        break;
      }
    }
  }
  return contracted;
}

} // namespace frank::loops
