// fuse-loops (FuseLoops.h). Two neighbouring loops A and B over the same extent fuse when no
// iteration of B depends on a later iteration of A: for every buffer written by one of them
// and touched by the other, each access's index is `row * S + offset` with S the same for all
// of them and the offset, over the ranges of the loops inside, within [0, S). Iteration i then
// touches only row i of that buffer, so running A's iteration i and then B's, for each i in
// turn, computes what running all of A and then all of B did.
#include "loops/FuseLoops.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace frank::loops {
namespace {

// An index as `constant + sum(coefficient * variable)`.
struct Affine {
  std::map<std::string, int64_t> coefficients;
  int64_t constant = 0;
};

std::optional<Affine> affineOf(const Expr &e) {
  if (e->kind == ExprKind::IntConst)
    return Affine{{}, e->intValue};
  if (e->kind == ExprKind::Var && e->lanes == 1)
    return Affine{{{e->name, 1}}, 0};
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
    int64_t factor = a->coefficients.empty() ? a->constant : b->constant;
    for (auto &[name, k] : scaled.coefficients)
      k *= factor;
    scaled.constant *= factor;
    return scaled;
  }
  int64_t sign = e->op == OpKind::SubI ? -1 : 1;
  for (auto &[name, k] : b->coefficients)
    a->coefficients[name] += sign * k;
  a->constant += sign * b->constant;
  return a;
}

struct Access {
  int buffer;
  Expr index;
  int lanes;
  bool write;
};

// What a loop body reads and writes, the loops inside it and the names it binds.
struct BodyFacts {
  std::vector<Access> accesses;
  std::map<std::string, std::optional<int64_t>> innerLoops; // variable -> constant extent
  std::set<std::string> bound;                              // lets and locals: any value
  bool assignsOutside = false; // assigns a variable declared outside the loop
};

void collect(const Expr &e, BodyFacts &facts) {
  if (!e)
    return;
  if (e->kind == ExprKind::Load)
    facts.accesses.push_back({static_cast<int>(e->intValue), e->args[0], e->lanes, false});
  for (const Expr &a : e->args)
    collect(a, facts);
}

void collect(const std::vector<Stmt> &stmts, BodyFacts &facts) {
  for (const Stmt &s : stmts) {
    switch (s->kind) {
    case StmtKind::For: facts.innerLoops[s->name] = asConstant(s->value); break;
    case StmtKind::Let:
    case StmtKind::Local: facts.bound.insert(s->name); break;
    case StmtKind::Assign: facts.assignsOutside |= !facts.bound.count(s->name); break;
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
  int64_t stride = 0;
  std::map<std::string, int64_t> fixed;
  int64_t lo = 0, hi = 0;
};

std::optional<Row> rowOf(const Access &access, const std::string &loopVar, const BodyFacts &facts) {
  auto index = affineOf(access.index);
  if (!index)
    return std::nullopt;
  Row row;
  row.lo = index->constant;
  row.hi = index->constant + access.lanes - 1;
  for (const auto &[name, k] : index->coefficients) {
    if (k == 0)
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
    int64_t span = k * std::max<int64_t>(0, *inner->second - 1);
    row.lo += std::min<int64_t>(0, span);
    row.hi += std::max<int64_t>(0, span);
  }
  return row;
}

bool canFuse(const StmtNode &a, const StmtNode &b) {
  if (print(a.value) != print(b.value))
    return false;
  BodyFacts fa, fb;
  collect(a.body, fa);
  collect(b.body, fb);
  if (fa.assignsOutside || fb.assignsOutside)
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
        if (!row || row->stride <= 0 || row->lo < 0 || row->hi >= row->stride)
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

// Replaces variable `from` by `to` (another variable, or a constant).
Expr substitute(const Expr &e, const std::string &from, const Expr &to) {
  if (!e)
    return e;
  if (e->kind == ExprKind::Var && e->name == from)
    return to;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) {
    args.push_back(substitute(a, from, to));
    changed |= args.back() != a;
  }
  if (!changed)
    return e;
  // Index arithmetic folds again (0 * 32 + x is x).
  if (e->kind == ExprKind::Binary && e->type == ElemKind::Index && e->op == OpKind::AddI)
    return add(args[0], args[1]);
  if (e->kind == ExprKind::Binary && e->type == ElemKind::Index && e->op == OpKind::MulI)
    return mul(args[0], args[1]);
  auto copy = std::make_shared<ExprNode>(*e);
  copy->args = std::move(args);
  return copy;
}

std::vector<Stmt> substitute(const std::vector<Stmt> &stmts, const std::string &from,
                             const Expr &to) {
  std::vector<Stmt> out;
  for (const Stmt &s : stmts) {
    auto copy = std::make_shared<StmtNode>(*s);
    copy->value = substitute(s->value, from, to);
    copy->index = substitute(s->index, from, to);
    copy->bound = substitute(s->bound, from, to);
    copy->body = substitute(s->body, from, to);
    copy->elseBody = substitute(s->elseBody, from, to);
    out.push_back(std::move(copy));
  }
  return out;
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
  body.insert(body.end(), second.begin(), second.end());
  Stmt fused = forLoop(kept->name, kept->value, kept->forKind, std::move(body));
  fused->comment = a->comment;
  if (fused->forKind == ForKind::Parallel) {
    runInnerLoopsSerially(fused->body);
    fused->bound = kept->bound;
    if (a->forKind == ForKind::Parallel && b->forKind == ForKind::Parallel) {
      auto ca = asConstant(a->bound), cb = asConstant(b->bound);
      if (ca && cb)
        fused->bound = intConst(std::min(*ca, *cb));
    }
  }
  return fused;
}

bool readsMemory(const Expr &e) {
  if (!e)
    return false;
  if (e->kind == ExprKind::Load)
    return true;
  return std::any_of(e->args.begin(), e->args.end(), readsMemory);
}

void fuseList(std::vector<Stmt> &stmts) {
  for (size_t i = 0; i < stmts.size(); ++i) {
    while (stmts[i]->kind == StmtKind::For) {
      // Lets of constants and parameters between the two loops move above the first.
      size_t j = i + 1;
      while (j < stmts.size() && stmts[j]->kind == StmtKind::Let && !readsMemory(stmts[j]->value))
        ++j;
      if (j == stmts.size() || stmts[j]->kind != StmtKind::For || !canFuse(*stmts[i], *stmts[j]))
        break;
      Stmt fused = fuse(stmts[i], stmts[j]);
      std::rotate(stmts.begin() + static_cast<std::ptrdiff_t>(i),
                  stmts.begin() + static_cast<std::ptrdiff_t>(i + 1),
                  stmts.begin() + static_cast<std::ptrdiff_t>(j));
      i += j - i - 1; // past the lets that moved up
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
