// fuse-loops (FuseLoops.h). Two neighbouring loops A and B over the same extent fuse when no
// iteration of B depends on a later iteration of A: for every buffer written by one of them
// and touched by the other, each access's index is `row * S + offset` with S the same for all
// of them and the offset, over the ranges of the loops inside, within [0, S). Iteration i then
// touches only row i of that buffer, so running A's iteration i and then B's, for each i in
// turn, computes what running all of A and then all of B did. A loop that accumulates into a
// variable declared outside it (a row's sum) fuses with one that neither reads nor assigns that
// variable: the fused loop runs each loop's iterations in their order, so the sum is the same.
// Statements between the two that the first loop does not interact with move above it (a
// reduction's start: its initial value stored and loaded into its variable).
//
// With runtime extents (partial specialization) S and the offsets' bounds are polynomials in
// the runtime sizes (Polynomial.h): the offset's bounds are proved within [0, S) when `lo` and
// `S - 1 - hi` are at least 0 for any sizes. An inner loop's range counts only when it runs,
// when its extent is at least 1.
#include "loops/FuseLoops.h"
#include "loops/Polynomial.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace frank::loops {
namespace {

struct Access {
  int buffer;
  Expr index;
  int lanes;
  bool write;
};

// What a loop body reads and writes, the loops inside it and the names it binds.
struct BodyFacts {
  std::vector<Access> accesses;
  std::map<std::string, std::optional<Poly>> innerLoops;    // variable -> extent
  std::set<std::string> bound;                              // lets and locals: any value
  std::set<std::string> assignedOutside; // variables declared outside the loop it assigns
  std::set<std::string> used;            // the variables it reads
};

void collect(const Expr &e, BodyFacts &facts) {
  if (!e)
    return;
  if (e->kind == ExprKind::Load)
    facts.accesses.push_back({static_cast<int>(e->intValue), e->args[0], e->lanes, false});
  if (e->kind == ExprKind::Var)
    facts.used.insert(e->name);
  for (const Expr &a : e->args)
    collect(a, facts);
}

void collect(const std::vector<Stmt> &stmts, BodyFacts &facts) {
  for (const Stmt &s : stmts) {
    switch (s->kind) {
    case StmtKind::For: {
      // A loop whose extent a constant or a polynomial bounds (a causal mask's keys) ranges
      // within that bound.
      std::optional<Poly> extent = boundOf(s->value);
      if (std::optional<int64_t> most = mostTrips(s->value); !extent && most)
        extent = constantPoly(*most);
      facts.innerLoops[s->name] = extent;
      break;
    }
    case StmtKind::Let:
    case StmtKind::Local: facts.bound.insert(s->name); break;
    case StmtKind::Assign:
      if (!facts.bound.count(s->name))
        facts.assignedOutside.insert(s->name);
      break;
    case StmtKind::Store:
      facts.accesses.push_back({s->buffer, s->index, s->value->lanes, true});
      break;
    default: break;
    }
    collect(s->value, facts);
    collect(s->index, facts);
    collect(s->bound, facts);
    collect(s->body, facts);
    collect(s->elseBody, facts);
  }
}

// The row of a buffer an access touches in iteration `loopVar` of the loop: the stride of
// that variable, the terms of variables fixed while the loop runs, and the offset's range.
struct Row {
  Poly stride;
  std::map<std::string, Poly> fixed;
  Poly lo, hi;
};

std::optional<Row> rowOf(const Access &access, const std::string &loopVar, const BodyFacts &facts) {
  auto index = affineOf(access.index);
  if (!index)
    return std::nullopt;
  Row row;
  row.lo = index->constant;
  row.hi = plus(index->constant, constantPoly(access.lanes - 1));
  for (const auto &[name, k] : index->coefficients) {
    if (k.empty())
      continue;
    if (name == loopVar) {
      row.stride = k;
      continue;
    }
    if (facts.bound.count(name))
      return std::nullopt; // a value computed inside, a gathered index say
    auto inner = facts.innerLoops.find(name);
    if (inner == facts.innerLoops.end()) {
      row.fixed[name] = k;
      continue;
    }
    if (!inner->second)
      return std::nullopt;
    // k times the last iteration, extent - 1: at least 0 whenever the loop runs.
    const Poly span = times(k, plus(*inner->second, constantPoly(-1)));
    if (nonNegative(k))
      row.hi = plus(row.hi, span);
    else if (nonNegative(times(k, constantPoly(-1))))
      row.lo = plus(row.lo, span);
    else
      return std::nullopt;
  }
  return row;
}

// A vectorized loop fused with one that addresses memory through loads would stay scalar with
// it (see addressesThroughLoads): the MoE block's exp of its SwiGLU, fused with the read-back of
// the gate's sums from their slots, ran one element at a time.
bool keepsVectorsApart(const StmtNode &a, const StmtNode &b) {
  auto vectorized = [](const StmtNode &s) { return s.forKind == ForKind::Vectorize; };
  return (vectorized(a) && !vectorized(b) && addressesThroughLoads(b.body)) ||
         (vectorized(b) && !vectorized(a) && addressesThroughLoads(a.body));
}

// Whether `other` reads or assigns a variable declared outside `accumulating` that it assigns.
bool touchesAccumulators(const BodyFacts &accumulating, const BodyFacts &other) {
  for (const std::string &name : accumulating.assignedOutside)
    if (other.used.count(name) || other.assignedOutside.count(name))
      return true;
  return false;
}

bool canFuse(const StmtNode &a, const StmtNode &b) {
  if (print(a.value) != print(b.value) || keepsVectorsApart(a, b))
    return false;
  BodyFacts fa, fb;
  collect(a.body, fa);
  collect(b.body, fb);
  // A parallel loop's iterations run at once: an accumulation across them would race. And a
  // loop that accumulates keeps its kind: fused with a vectorized loop, a serial accumulation (a
  // recurrence no vectorizer reorders) would make that loop serial too.
  const bool accumulates = !fa.assignedOutside.empty() || !fb.assignedOutside.empty();
  if ((accumulates && (a.forKind != b.forKind || a.forKind == ForKind::Parallel)) ||
      touchesAccumulators(fa, fb) || touchesAccumulators(fb, fa))
    return false;
  std::set<int> written, inA, inB;
  for (const Access &x : fa.accesses) {
    inA.insert(x.buffer);
    if (x.write)
      written.insert(x.buffer);
  }
  for (const Access &x : fb.accesses) {
    inB.insert(x.buffer);
    if (x.write)
      written.insert(x.buffer);
  }
  for (int buffer : written) {
    if (!inA.count(buffer) || !inB.count(buffer))
      continue;
    std::optional<Row> first;
    auto rowLocal = [&](const BodyFacts &facts, const std::string &loopVar) {
      for (const Access &x : facts.accesses) {
        if (x.buffer != buffer)
          continue;
        std::optional<Row> row = rowOf(x, loopVar, facts);
        // 0 <= lo and hi <= stride - 1 (so the stride is at least 1 where anything runs).
        if (!row || !nonNegative(row->lo) ||
            !nonNegative(plus(plus(row->stride, constantPoly(-1)), row->hi, -1)))
          return false;
        if (!first)
          first = row;
        else if (row->stride != first->stride || row->fixed != first->fixed)
          return false;
      }
      return true;
    };
    if (!rowLocal(fa, a.name) || !rowLocal(fb, b.name))
      return false;
  }
  return true;
}

std::vector<Stmt> rename(const std::vector<Stmt> &stmts, const std::string &from,
                         const std::string &to) {
  return substitute(stmts, from, var(to, ElemKind::Index));
}

// A loop of one iteration becomes its body with the variable 0, so that the nests under a
// unit dim (the batch of 1 of most components) meet at the same depth and can fuse.
void dissolveUnitLoops(std::vector<Stmt> &stmts) {
  for (size_t i = 0; i < stmts.size(); ++i) {
    Stmt s = stmts[i];
    dissolveUnitLoops(s->body);
    dissolveUnitLoops(s->elseBody);
    if (s->kind != StmtKind::For || asConstant(s->value) != std::optional<int64_t>(1))
      continue;
    std::vector<Stmt> body = substitute(s->body, s->name, intConst(0));
    if (!s->chunkFirst.empty())
      body = substitute(body, s->chunkFirst, intConst(0));
    if (!body.empty() && !s->comment.empty())
      body[0]->comment =
          body[0]->comment.empty() ? s->comment : s->comment + "; " + body[0]->comment;
    stmts.erase(stmts.begin() + static_cast<std::ptrdiff_t>(i));
    stmts.insert(stmts.begin() + static_cast<std::ptrdiff_t>(i), body.begin(), body.end());
    i += body.size();
    --i;
  }
}

// A parallel loop inside the fused parallel loop would ask the thread pool from a worker.
void runInnerLoopsSerially(std::vector<Stmt> &stmts) {
  for (Stmt &s : stmts) {
    if (s->kind == StmtKind::For && s->forKind == ForKind::Parallel)
      s->forKind = ForKind::Serial;
    // Inside a parallel loop a chunk of its own is each iteration.
    if (s->kind == StmtKind::For && !s->chunkFirst.empty()) {
      s->body = rename(s->body, s->chunkFirst, s->name);
      s->chunkFirst.clear();
    }
    runInnerLoopsSerially(s->body);
    runInnerLoopsSerially(s->elseBody);
  }
}

int rank(ForKind kind) {
  switch (kind) {
  case ForKind::Parallel: return 2;
  case ForKind::Serial: return 1;
  case ForKind::Vectorize: return 0;
  }
  return 0;
}

// Loads in `second` of what `first` stored at the same index read the stored value instead, so
// the fused loop keeps no load behind its own store: LLVM proves such a pair apart only when it
// sees that the two addresses are one, and over runtime sizes it did not, ran a runtime check
// that the two never overlap, which always failed, and kept the loop scalar (partly specialized
// S5's exponentials and their sum: 10 ms against 1.5). Only top-level stores forward, until a
// later store to the buffer, and only values that cost nothing to read again (a let's variable,
// a constant, a parameter) and that no assignment in `first` changes.
void forwardStores(const std::vector<Stmt> &first, std::vector<Stmt> &second) {
  std::set<std::string> assigned;
  forEachStmt(first, [&](StmtNode &s) {
    if (s.kind == StmtKind::Assign)
      assigned.insert(s.name);
  });
  auto readsAssigned = [&](const Expr &e) {
    bool reads = false;
    forEachExpr(
        e, [&](const Expr &x) { reads |= x->kind == ExprKind::Var && assigned.count(x->name); });
    return reads;
  };
  std::map<std::string, Expr> stored; // "buffer lanes index" -> the value stored there
  auto key = [](int64_t buffer, int lanes, const Expr &index) {
    return fmt::format("{} {} {}", buffer, lanes, print(index));
  };
  auto forget = [&](int64_t buffer) {
    const std::string prefix = fmt::format("{} ", buffer);
    for (auto it = stored.begin(); it != stored.end();)
      it = it->first.compare(0, prefix.size(), prefix) == 0 ? stored.erase(it) : std::next(it);
  };
  auto forgetStoresIn = [&](const Stmt &s) {
    forEachStmt({s}, [&](StmtNode &n) {
      if (n.kind == StmtKind::Store)
        forget(n.buffer);
    });
  };
  for (const Stmt &s : first) {
    forgetStoresIn(s);
    const ExprKind kind = s->kind == StmtKind::Store ? s->value->kind : ExprKind::Load;
    const bool cheap = kind == ExprKind::Var || kind == ExprKind::IntConst ||
                       kind == ExprKind::FloatConst || kind == ExprKind::DimParam ||
                       kind == ExprKind::ScalarParam;
    if (cheap && !readsAssigned(s->value))
      stored[key(s->buffer, s->value->lanes, s->index)] = s->value;
  }
  auto forward = [&](const Expr &e) {
    return mapLoads(e, [&](const Expr &load) {
      auto it = stored.find(key(load->intValue, load->lanes, load->args[0]));
      return it == stored.end() ? load : it->second;
    });
  };
  for (Stmt &s : second) {
    if (stored.empty())
      return;
    if (s->kind == StmtKind::Let || s->kind == StmtKind::Local || s->kind == StmtKind::Assign ||
        s->kind == StmtKind::Store) {
      Stmt rewritten = std::make_shared<StmtNode>(*s);
      rewritten->value = forward(s->value);
      if (s->kind == StmtKind::Store)
        rewritten->index = forward(s->index);
      s = rewritten;
    }
    forgetStoresIn(s);
  }
}

// One loop running a's body and then b's. It keeps the variable and the kind of the more
// demanding of the two (parallel, then serial, then vectorized), and the smaller chunk.
Stmt fuse(const Stmt &a, const Stmt &b) {
  const Stmt &kept = rank(b->forKind) > rank(a->forKind) ? b : a;
  std::vector<Stmt> body = kept == a ? a->body : rename(a->body, a->name, kept->name);
  std::vector<Stmt> second = kept == b ? b->body : rename(b->body, b->name, kept->name);
  if (!second.empty() && !b->comment.empty()) {
    second[0] = std::make_shared<StmtNode>(*second[0]);
    second[0]->comment =
        second[0]->comment.empty() ? b->comment : b->comment + "; " + second[0]->comment;
  }
  // One variable for the chunk's first iteration, if either loop binds one.
  const std::string &first = a->chunkFirst.empty() ? b->chunkFirst : a->chunkFirst;
  if (!a->chunkFirst.empty() && !b->chunkFirst.empty())
    second = rename(second, b->chunkFirst, first);
  forwardStores(body, second);
  body.insert(body.end(), second.begin(), second.end());
  Stmt fused = forLoop(kept->name, kept->value, kept->forKind, std::move(body));
  fused->chunkFirst = first;
  fused->comment = a->comment;
  if (fused->forKind == ForKind::Parallel) {
    runInnerLoopsSerially(fused->body);
    fused->bound = kept->bound;
    if (a->forKind == ForKind::Parallel && b->forKind == ForKind::Parallel && a->bound &&
        b->bound) {
      auto ca = asConstant(a->bound), cb = asConstant(b->bound);
      fused->bound =
          ca && cb ? intConst(std::min(*ca, *cb)) : binary(OpKind::MinSI, a->bound, b->bound);
    }
  }
  return fused;
}

// Whether `s`, after the loop that `loop` describes, may run before it: a let, a variable or
// a store that touches no buffer the loop writes, writes none it reads, and reads no variable
// the loop assigns.
bool movableAbove(const Stmt &s, const BodyFacts &loop) {
  if (s->kind != StmtKind::Let && s->kind != StmtKind::Local && s->kind != StmtKind::Store)
    return false;
  BodyFacts facts;
  collect({s}, facts);
  for (const Access &x : facts.accesses)
    for (const Access &y : loop.accesses)
      if (x.buffer == y.buffer && (x.write || y.write))
        return false;
  for (const std::string &name : facts.used)
    if (loop.assignedOutside.count(name))
      return false;
  return true;
}

void fuseList(std::vector<Stmt> &stmts) {
  for (size_t i = 0; i < stmts.size(); ++i) {
    while (stmts[i]->kind == StmtKind::For) {
      // The statements between the two loops that may run first move above the first loop.
      BodyFacts first; // the loop's extent too
      collect(std::vector<Stmt>{stmts[i]}, first);
      size_t j = i + 1;
      while (j < stmts.size() && movableAbove(stmts[j], first))
        ++j;
      if (j == stmts.size() || stmts[j]->kind != StmtKind::For || !canFuse(*stmts[i], *stmts[j]))
        break;
      Stmt fused = fuse(stmts[i], stmts[j]);
      std::rotate(stmts.begin() + static_cast<std::ptrdiff_t>(i),
                  stmts.begin() + static_cast<std::ptrdiff_t>(i + 1),
                  stmts.begin() + static_cast<std::ptrdiff_t>(j));
      i += j - i - 1; // past the statements that moved up
      stmts[i] = fused;
      stmts.erase(stmts.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  for (Stmt &s : stmts) {
    fuseList(s->body);
    fuseList(s->elseBody);
  }
}

} // namespace

void fuseLoops(Program &program) {
  dissolveUnitLoops(program.body);
  fuseList(program.body);
}

} // namespace frank::loops
