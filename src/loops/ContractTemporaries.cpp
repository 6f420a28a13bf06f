// Contracting temporaries to one row per loop (see ContractTemporaries.h).
#include "loops/ContractTemporaries.h"

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
      if (rowsOfTheirOwn(list, depth, rowStride)) {
        dropRowTerm(program, int(buffer), list[0].loops[depth]->name);
        ++contracted;
        accesses = accessesByBuffer(program.body, program.buffers.size());
        break;
      }
    }
  }
  return contracted;
}

} // namespace frank::loops
