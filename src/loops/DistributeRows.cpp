// Distributing short row loops over blocks of rows (see DistributeRows.h).
#include "loops/DistributeRows.h"

#include <algorithm>
#include <optional>
#include <set>

namespace frank::loops {
namespace {

// Rows run in blocks of this many. Attention's softmax (S5) took 10-11% of the kernel's samples
// with blocks of 2, 4 or 8 rows alike, against 15% one row at a time; 4 keeps 4 x 128 floats of
// each temporary the groups pass on, 2 KiB, in L1.
constexpr int64_t kRowsPerBlock = 4;
// A row is short when its innermost statements run at most this many times: a row of 128 floats
// is 8 vectors of AVX-512.
constexpr int64_t kMaxRowTrips = 128;

// The variables `stmt` and the statements it holds read or assign.
std::set<std::string> namesUsed(const Stmt &stmt) {
  std::set<std::string> names;
  forEachStmt(std::vector<Stmt>{stmt}, [&](StmtNode &s) {
    if (s.kind == StmtKind::Assign)
      names.insert(s.name);
    for (const Expr *e : {&s.value, &s.index, &s.bound})
      if (*e)
        forEachExpr(*e, [&](const Expr &x) {
          if (x->kind == ExprKind::Var)
            names.insert(x->name);
        });
  });
  return names;
}

// The most trips of the innermost statements of `body` (the product of the extents of the loops
// around them, at most: a causal mask's keys stop early), or nullopt when no constant bounds an
// extent.
std::optional<int64_t> tripsOf(const std::vector<Stmt> &body) {
  int64_t most = 1;
  for (const Stmt &s : body) {
    auto inner = tripsOf(s->body), orElse = tripsOf(s->elseBody);
    auto extent = s->kind == StmtKind::For ? mostTrips(s->value) : std::optional<int64_t>(1);
    if (!inner || !orElse || !extent)
      return std::nullopt;
    most = std::max({most, saturatingMul(*extent, *inner), *orElse});
  }
  return most;
}

// Whether `body` is one short row's work: few trips, a reduction among them, every local it
// assigns declared in it, and no check (a failing check must not find later rows' groups
// already run).
bool isRowBody(const std::vector<Stmt> &body) {
  auto trips = tripsOf(body);
  bool ok = trips && *trips <= kMaxRowTrips, reduces = false;
  std::set<std::string> locals, assigned;
  forEachStmt(body, [&](StmtNode &s) {
    ok &= s.kind != StmtKind::Check;
    if (s.kind == StmtKind::Local)
      locals.insert(s.name);
    if (s.kind == StmtKind::Assign) {
      assigned.insert(s.name);
      reduces = true;
    }
  });
  return ok && reduces &&
         std::includes(locals.begin(), locals.end(), assigned.begin(), assigned.end());
}

// The starts of the groups of `body`: a group ends where no let or local of the statements before
// is used after.
std::vector<size_t> groupStarts(const std::vector<Stmt> &body) {
  std::vector<std::set<std::string>> usedFrom(body.size() + 1);
  for (size_t j = body.size(); j-- > 0;) {
    usedFrom[j] = usedFrom[j + 1];
    usedFrom[j].merge(namesUsed(body[j]));
  }
  std::vector<size_t> starts{0};
  std::set<std::string> defined;
  for (size_t j = 0; j + 1 < body.size(); ++j) {
    if (body[j]->kind == StmtKind::Let || body[j]->kind == StmtKind::Local)
      defined.insert(body[j]->name);
    if (std::none_of(defined.begin(), defined.end(),
                     [&](const std::string &name) { return usedFrom[j + 1].count(name); }))
      starts.push_back(j + 1);
  }
  return starts;
}

// The statements of each group of `body`.
std::vector<std::vector<Stmt>> groupsOf(const std::vector<Stmt> &body,
                                        const std::vector<size_t> &starts) {
  std::vector<std::vector<Stmt>> groups;
  for (size_t g = 0; g < starts.size(); ++g) {
    const size_t end = g + 1 < starts.size() ? starts[g + 1] : body.size();
    groups.emplace_back(body.begin() + std::ptrdiff_t(starts[g]),
                        body.begin() + std::ptrdiff_t(end));
  }
  return groups;
}

// Whether the groups of `loop` pass each row on through temporaries and may run over a block of
// rows one after the other: a buffer that two groups touch, one writing it, exists, and each such
// buffer gives every row a part of its own.
bool chainedByRows(const Program &program, const StmtNode &loop,
                   const std::vector<size_t> &starts) {
  // Each group's accesses, and the program's once a buffer needs them: a walk each, not one per
  // buffer.
  const size_t buffers = program.buffers.size();
  std::vector<std::vector<std::vector<BufferAccess>>> byGroup;
  for (const std::vector<Stmt> &group : groupsOf(loop.body, starts))
    byGroup.push_back(accessesByBuffer(group, buffers));
  std::optional<std::vector<std::vector<BufferAccess>>> all;
  bool chained = false;
  for (size_t buffer = 0; buffer < buffers; ++buffer) {
    int touching = 0;
    bool written = false;
    for (const std::vector<std::vector<BufferAccess>> &groupAccesses : byGroup) {
      const std::vector<BufferAccess> &accesses = groupAccesses[buffer];
      touching += !accesses.empty();
      written |= std::any_of(accesses.begin(), accesses.end(),
                             [](const BufferAccess &a) { return a.isStore(); });
    }
    if (touching < 2 || !written)
      continue;
    if (!all)
      all = accessesByBuffer(program.body, buffers);
    std::vector<BufferAccess> inLoop;
    size_t depth = 0;
    for (BufferAccess &a : (*all)[buffer]) {
      auto at = std::find(a.loops.begin(), a.loops.end(), &loop);
      if (at == a.loops.end())
        continue;
      depth = size_t(at - a.loops.begin());
      inLoop.push_back(std::move(a));
    }
    if (!rowsOfTheirOwn(inLoop, depth))
      return false;
    chained = true;
  }
  return chained;
}

// Whether any loop, let or local of `body` is named `name`.
bool nameTaken(const std::vector<Stmt> &body, const std::string &name) {
  bool taken = false;
  forEachStmt(body, [&](StmtNode &s) {
    taken |= (s.kind == StmtKind::For || s.kind == StmtKind::Let || s.kind == StmtKind::Local) &&
             s.name == name;
  });
  return taken;
}

void distribute(Program &program, StmtNode &loop, const std::vector<size_t> &starts) {
  std::string blockName = loop.name + "_block";
  for (int n = 2; nameTaken(program.body, blockName); ++n)
    blockName = loop.name + "_block" + std::to_string(n);
  const Expr row = add(mul(var(blockName, ElemKind::Index), intConst(kRowsPerBlock)),
                       var(loop.name, ElemKind::Index));
  std::vector<Stmt> groups;
  for (const std::vector<Stmt> &group : groupsOf(loop.body, starts))
    groups.push_back(forLoop(loop.name, intConst(kRowsPerBlock), ForKind::Serial,
                             substitute(group, loop.name, row)));
  loop.value = intConst(*asConstant(loop.value) / kRowsPerBlock);
  loop.name = blockName;
  loop.body = std::move(groups);
}

int distributeIn(Program &program, std::vector<Stmt> &stmts) {
  int distributed = 0;
  for (Stmt &s : stmts) {
    if (s->kind == StmtKind::For && s->forKind == ForKind::Serial) {
      auto trips = asConstant(s->value);
      if (trips && *trips >= kRowsPerBlock && *trips % kRowsPerBlock == 0 && isRowBody(s->body)) {
        std::vector<size_t> starts = groupStarts(s->body);
        if (starts.size() >= 2 && chainedByRows(program, *s, starts)) {
          distribute(program, *s, starts);
          ++distributed;
          continue;
        }
      }
    }
    distributed += distributeIn(program, s->body) + distributeIn(program, s->elseBody);
  }
  return distributed;
}

} // namespace

int distributeRows(Program &program) { return distributeIn(program, program.body); }

} // namespace frank::loops
