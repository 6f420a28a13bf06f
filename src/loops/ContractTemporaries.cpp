// Contracting temporaries to one row per loop (see ContractTemporaries.h).
#include "loops/ContractTemporaries.h"

#include <algorithm>
#include <map>

namespace frank::loops {
namespace {

// Every access of `buffer` without its term in the row's variable `row`: each index is affine
// in it (rowsOfTheirOwn), so at row 0 it has none.
void dropRowTerm(Program &p, int buffer, const std::string &row) {
  auto dropped = [&](const Expr &index) { return substitute(index, row, intConst(0)); };
  forEachStmt(p.body, [&](StmtNode &s) {
    if ((s.kind == StmtKind::Store || s.kind == StmtKind::Prefetch) && s.buffer == buffer)
      s.index = dropped(s.index);
    for (Expr *e : {&s.value, &s.index, &s.bound})
      *e = mapLoads(*e, [&](const Expr &x) {
        return x->intValue == buffer ? load(buffer, dropped(x->args[0]), x->type, x->lanes) : x;
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
      if (rowsOfTheirOwn(list, depth)) {
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
