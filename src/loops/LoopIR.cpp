// Loop IR construction, printing and host-side evaluation.
#include "loops/LoopIR.h"
#include "ir/IntegerSemantics.h"
#include "ir/Ops.h"
#include "loops/Polynomial.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>

namespace frank::loops {

static Expr make(ExprNode node) { return std::make_shared<const ExprNode>(std::move(node)); }

Expr intConst(int64_t v, ElemKind type) {
  ExprNode n{ExprKind::IntConst, type};
  n.intValue = v;
  return make(n);
}
Expr floatConst(double v, ElemKind type) {
  ExprNode n{ExprKind::FloatConst, type};
  n.floatValue = v;
  return make(n);
}
Expr var(const std::string &name, ElemKind type, int lanes) {
  ExprNode n{ExprKind::Var, type};
  n.lanes = lanes;
  n.name = name;
  return make(n);
}
Expr dimParam(int index) {
  ExprNode n{ExprKind::DimParam, ElemKind::Index};
  n.intValue = index;
  return make(n);
}
Expr scalarParam(int index, ElemKind type) {
  ExprNode n{ExprKind::ScalarParam, type};
  n.intValue = index;
  return make(n);
}
// Elementwise nodes take the widest operand's lanes; scalars among vectors are broadcast.
static int widen(std::vector<Expr> &args, size_t first = 0) {
  int lanes = 1;
  for (size_t i = first; i < args.size(); ++i)
    lanes = std::max(lanes, args[i]->lanes);
  for (size_t i = first; i < args.size(); ++i) {
    if (args[i]->lanes == lanes)
      continue;
    if (args[i]->lanes != 1)
      internalError("loop IR mixes vectors of different widths");
    args[i] = broadcast(args[i], lanes);
  }
  return lanes;
}

Expr unary(OpKind op, Expr a) {
  ExprNode n{ExprKind::Unary, a->type};
  n.lanes = a->lanes;
  n.op = op;
  n.args = {std::move(a)};
  return make(n);
}
Expr binary(OpKind op, Expr a, Expr b, bool reassoc) {
  ExprNode n{ExprKind::Binary, a->type};
  n.op = op;
  n.reassoc = reassoc;
  n.args = {std::move(a), std::move(b)};
  n.lanes = widen(n.args);
  return make(n);
}
Expr cmp(const std::string &pred, Expr a, Expr b) {
  ExprNode n{ExprKind::Cmp, ElemKind::I1};
  n.name = pred;
  n.args = {std::move(a), std::move(b)};
  n.lanes = widen(n.args);
  return make(n);
}
Expr select(Expr c, Expr a, Expr b) {
  ExprNode n{ExprKind::Select, a->type};
  n.args = {std::move(c), std::move(a), std::move(b)};
  n.lanes = widen(n.args);
  return make(n);
}
Expr cast(OpKind op, Expr a, ElemKind to) {
  ExprNode n{ExprKind::Cast, to};
  n.lanes = a->lanes;
  n.op = op;
  n.args = {std::move(a)};
  return make(n);
}
Expr load(int buffer, Expr index, ElemKind type, int lanes) {
  ExprNode n{ExprKind::Load, type};
  n.intValue = buffer;
  n.lanes = lanes;
  n.args = {std::move(index)};
  return make(n);
}
Expr broadcast(Expr scalar, int lanes) {
  if (scalar->lanes != 1)
    internalError("broadcast of a vector");
  if (lanes == 1)
    return scalar;
  ExprNode n{ExprKind::Broadcast, scalar->type};
  n.lanes = lanes;
  n.args = {std::move(scalar)};
  return make(n);
}
Expr reduceAdd(Expr vector) {
  if (vector->lanes == 1)
    return vector;
  return reduceAdd(std::vector<Expr>{std::move(vector)});
}
Expr reduceAdd(std::vector<Expr> vectors) {
  size_t count = vectors.size();
  int lanes = vectors.front()->lanes;
  bool powerOfTwo = (count & (count - 1)) == 0 && (lanes & (lanes - 1)) == 0;
  if (!powerOfTwo || static_cast<int>(count) > lanes)
    internalError(fmt::format("reduce_add of {} vectors of {} lanes", count, lanes));
  for (const Expr &v : vectors)
    if (v->lanes != lanes || v->type != vectors.front()->type)
      internalError("reduce_add of vectors of different types");
  ExprNode n{ExprKind::ReduceAdd, vectors.front()->type};
  n.lanes = static_cast<int>(count);
  n.reassoc = true;
  n.args = std::move(vectors);
  return make(n);
}
Expr permute(Expr vector, Expr indices) {
  if (vector->lanes > indices->lanes || vector->lanes == 1 || isFloatElem(indices->type))
    internalError("permute of a vector by indices that are not an integer vector of as many "
                  "lanes or more");
  ExprNode n{ExprKind::Permute, vector->type};
  n.lanes = indices->lanes;
  n.args = {std::move(vector), std::move(indices)};
  return make(n);
}
Expr shuffle(Expr a, Expr b, std::vector<int> picks) {
  if (a->type != b->type || a->lanes != b->lanes || a->lanes == 1 || picks.empty() ||
      std::any_of(picks.begin(), picks.end(), [&](int p) { return p < 0 || p >= 2 * a->lanes; }))
    internalError("shuffle of vectors of different types, or by lanes they do not have");
  ExprNode n{ExprKind::Shuffle, a->type};
  n.lanes = static_cast<int>(picks.size());
  n.args = {std::move(a), std::move(b)};
  n.picks = std::move(picks);
  return make(n);
}
std::vector<Expr> transposeInRegisters(std::vector<Expr> rows, std::vector<Stmt> &body,
                                       const std::function<std::string()> &freshName) {
  const int lanes = static_cast<int>(rows.size());
  if (lanes < 2 || (lanes & (lanes - 1)) != 0 ||
      std::any_of(rows.begin(), rows.end(), [&](const Expr &r) { return r->lanes != lanes; }))
    internalError("a transpose in registers of rows that are not a square of a power of two");
  for (int d = lanes / 2; d >= 1; d /= 2) {
    std::vector<int> low, high; // rows j and j + d after the round
    for (int i = 0; i < lanes; ++i) {
      const bool upper = (i & d) != 0;
      low.push_back(upper ? lanes + i - d : i);
      high.push_back(upper ? lanes + i : i + d);
    }
    for (int j = 0; j < lanes; ++j) {
      if (j & d)
        continue;
      Expr a = rows[size_t(j)], b = rows[size_t(j + d)];
      for (auto [slot, picks] : {std::pair{j, &low}, std::pair{j + d, &high}}) {
        std::string name = freshName();
        body.push_back(let(name, shuffle(a, b, *picks)));
        rows[size_t(slot)] = var(name, a->type, lanes);
      }
    }
  }
  return rows;
}
std::string typeName(ElemKind type, int lanes) {
  return lanes == 1 ? std::string(elemName(type)) : fmt::format("{}x{}", elemName(type), lanes);
}

std::optional<int64_t> asConstant(const Expr &e) {
  if (e->kind == ExprKind::IntConst)
    return e->intValue;
  return std::nullopt;
}

[[noreturn]] static void overflow(int64_t a, const char *op, int64_t b) {
  throw IndexOverflow(fmt::format("error: index arithmetic overflows 64 bits: {} {} {}", a, op, b));
}

Expr add(Expr a, Expr b) {
  auto ca = asConstant(a), cb = asConstant(b);
  if (ca && cb) {
    int64_t sum;
    if (__builtin_add_overflow(*ca, *cb, &sum))
      overflow(*ca, "+", *cb);
    return intConst(sum);
  }
  if (ca && *ca == 0)
    return b;
  if (cb && *cb == 0)
    return a;
  return binary(OpKind::AddI, std::move(a), std::move(b));
}

Expr mul(Expr a, Expr b) {
  auto ca = asConstant(a), cb = asConstant(b);
  if (ca && cb) {
    int64_t product;
    if (__builtin_mul_overflow(*ca, *cb, &product))
      overflow(*ca, "*", *cb);
    return intConst(product);
  }
  if ((ca && *ca == 0) || (cb && *cb == 0))
    return intConst(0);
  if (ca && *ca == 1)
    return b;
  if (cb && *cb == 1)
    return a;
  return binary(OpKind::MulI, std::move(a), std::move(b));
}

int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t product;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}

Expr quotient(Expr a, int64_t divisor) {
  if (divisor <= 0)
    internalError("an index divided by a constant that is not positive");
  if (auto c = asConstant(a))
    return intConst(*c / divisor);
  if (divisor == 1)
    return a;
  if (a->kind == ExprKind::Binary && a->op == OpKind::MulI)
    for (int i = 0; i < 2; ++i)
      if (auto k = asConstant(a->args[i]); k && *k % divisor == 0)
        return mul(intConst(*k / divisor), a->args[1 - i]);
  return binary(OpKind::DivSI, std::move(a), intConst(divisor));
}

static void collectLinear(const Expr &e, int64_t scale, LinearIndex &out) {
  int64_t scaled = 0;
  if (auto c = asConstant(e)) {
    if (__builtin_mul_overflow(*c, scale, &scaled) ||
        __builtin_add_overflow(out.constant, scaled, &out.constant))
      out.ok = false;
    return;
  }
  if (e->kind == ExprKind::Binary && e->op == OpKind::AddI) {
    collectLinear(e->args[0], scale, out);
    collectLinear(e->args[1], scale, out);
    return;
  }
  if (e->kind == ExprKind::Binary && e->op == OpKind::MulI)
    for (int i = 0; i < 2; ++i)
      if (auto c = asConstant(e->args[i])) {
        if (__builtin_mul_overflow(scale, *c, &scaled))
          out.ok = false;
        else
          collectLinear(e->args[1 - i], scaled, out);
        return;
      }
  if (e->kind == ExprKind::Var && e->lanes == 1) {
    out.terms.push_back({scale, e});
    return;
  }
  out.ok = false;
}

LinearIndex linearIndex(const Expr &index) {
  LinearIndex l;
  collectLinear(index, 1, l);
  return l;
}

static Stmt makeStmt(StmtNode node) { return std::make_shared<StmtNode>(std::move(node)); }

Stmt block(std::vector<Stmt> body) {
  StmtNode n{StmtKind::Block};
  n.body = std::move(body);
  return makeStmt(std::move(n));
}
Stmt forLoop(const std::string &v, Expr extent, ForKind kind, std::vector<Stmt> body) {
  StmtNode n{StmtKind::For, v};
  n.forKind = kind;
  n.value = std::move(extent);
  n.body = std::move(body);
  return makeStmt(std::move(n));
}
Stmt let(const std::string &name, Expr value) {
  StmtNode n{StmtKind::Let, name, value->type};
  n.lanes = value->lanes;
  n.value = std::move(value);
  return makeStmt(std::move(n));
}
Stmt local(const std::string &name, Expr init) {
  StmtNode n{StmtKind::Local, name, init->type};
  n.lanes = init->lanes;
  n.value = std::move(init);
  return makeStmt(std::move(n));
}
Stmt assign(const std::string &name, Expr value) {
  StmtNode n{StmtKind::Assign, name, value->type};
  n.lanes = value->lanes;
  n.value = std::move(value);
  return makeStmt(std::move(n));
}
Stmt store(int buffer, Expr index, Expr value) {
  StmtNode n{StmtKind::Store};
  n.buffer = buffer;
  n.index = std::move(index);
  n.value = std::move(value);
  return makeStmt(std::move(n));
}
Stmt ifThen(Expr condition, std::vector<Stmt> body, std::vector<Stmt> elseBody) {
  StmtNode n{StmtKind::If};
  n.value = std::move(condition);
  n.body = std::move(body);
  n.elseBody = std::move(elseBody);
  return makeStmt(std::move(n));
}
Stmt prefetch(int buffer, Expr index) {
  StmtNode n{StmtKind::Prefetch};
  n.buffer = buffer;
  n.index = std::move(index);
  return makeStmt(std::move(n));
}

Stmt check(Expr condition, int id, Expr observed, Expr bound) {
  StmtNode n{StmtKind::Check};
  n.buffer = id;
  n.value = std::move(condition);
  n.index = std::move(observed);
  n.bound = std::move(bound);
  return makeStmt(std::move(n));
}

std::vector<Stmt> rewriteExprs(const std::vector<Stmt> &stmts,
                               const std::function<Expr(const Expr &)> &rewrite) {
  auto rewritten = [&](const Expr &e) { return e ? rewrite(e) : e; };
  std::vector<Stmt> out;
  for (const Stmt &s : stmts) {
    auto copy = std::make_shared<StmtNode>(*s);
    copy->value = rewritten(s->value);
    copy->index = rewritten(s->index);
    copy->bound = rewritten(s->bound);
    copy->body = rewriteExprs(s->body, rewrite);
    copy->elseBody = rewriteExprs(s->elseBody, rewrite);
    out.push_back(std::move(copy));
  }
  return out;
}

void forEachExpr(const Expr &e, const std::function<void(const Expr &)> &visit) {
  if (!e)
    return;
  visit(e);
  for (const Expr &a : e->args)
    forEachExpr(a, visit);
}

Expr mapLoads(const Expr &e, const std::function<Expr(const Expr &)> &rewrite) {
  if (!e)
    return e;
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) {
    args.push_back(mapLoads(a, rewrite));
    changed |= args.back() != a;
  }
  Expr self = changed ? withArgs(e, std::move(args)) : e;
  return self->kind == ExprKind::Load ? rewrite(self) : self;
}

void forEachStmt(const std::vector<Stmt> &body, const std::function<void(StmtNode &)> &visit) {
  for (const Stmt &s : body) {
    visit(*s);
    forEachStmt(s->body, visit);
    forEachStmt(s->elseBody, visit);
  }
}

int BufferAccess::lanes() const {
  if (load)
    return load->lanes;
  return stmt->kind == StmtKind::Store ? stmt->value->lanes : 1;
}

// Appends each access of a buffer below `body` to `out[buffer]`; with `only` >= 0, those of that
// buffer alone. `loops` holds the loops around `body`.
static void collectAccesses(const std::vector<Stmt> &body, int only,
                            std::vector<const StmtNode *> &loops,
                            std::vector<std::vector<BufferAccess>> &out) {
  auto wanted = [&](int64_t buffer) {
    return only < 0 ? buffer >= 0 && size_t(buffer) < out.size() : buffer == only;
  };
  auto listOf = [&](int64_t buffer) -> std::vector<BufferAccess> & {
    return out[only < 0 ? size_t(buffer) : 0];
  };
  for (const Stmt &s : body) {
    if ((s->kind == StmtKind::Store || s->kind == StmtKind::Prefetch) && wanted(s->buffer))
      listOf(s->buffer).push_back({s.get(), nullptr, loops});
    for (const Expr &e : {s->value, s->index, s->bound})
      forEachExpr(e, [&](const Expr &x) {
        if (x->kind == ExprKind::Load && wanted(x->intValue))
          listOf(x->intValue).push_back({s.get(), x.get(), loops});
      });
    if (s->kind == StmtKind::For)
      loops.push_back(s.get());
    collectAccesses(s->body, only, loops, out);
    if (s->kind == StmtKind::For)
      loops.pop_back();
    collectAccesses(s->elseBody, only, loops, out);
  }
}

std::vector<BufferAccess> accessesOf(const std::vector<Stmt> &body, int buffer) {
  std::vector<std::vector<BufferAccess>> out(1);
  std::vector<const StmtNode *> loops;
  collectAccesses(body, buffer, loops, out);
  return std::move(out[0]);
}

std::vector<std::vector<BufferAccess>> accessesByBuffer(const std::vector<Stmt> &body,
                                                        size_t buffers) {
  std::vector<std::vector<BufferAccess>> out(buffers);
  std::vector<const StmtNode *> loops;
  collectAccesses(body, -1, loops, out);
  return out;
}

bool addressesThroughLoads(const std::vector<Stmt> &stmts) {
  std::function<bool(const Expr &, bool)> loads = [&](const Expr &e, bool inIndex) -> bool {
    if (!e)
      return false;
    if (e->kind == ExprKind::Load && inIndex)
      return true;
    for (size_t i = 0; i < e->args.size(); ++i)
      if (loads(e->args[i], inIndex || e->kind == ExprKind::Load))
        return true;
    return false;
  };
  for (const Stmt &st : stmts) {
    if (st->kind == StmtKind::For)
      continue;
    if (loads(st->index, true) || loads(st->value, false) || addressesThroughLoads(st->body) ||
        addressesThroughLoads(st->elseBody))
      return true;
  }
  return false;
}

Expr withArgs(const Expr &e, std::vector<Expr> args) {
  auto copy = std::make_shared<ExprNode>(*e);
  copy->args = std::move(args);
  return copy;
}

// ---- Printing ----------------------------------------------------------------------------

static const char *infixOf(OpKind op) {
  switch (op) {
  case OpKind::AddF:
  case OpKind::AddI: return "+";
  case OpKind::SubF:
  case OpKind::SubI: return "-";
  case OpKind::MulF:
  case OpKind::MulI: return "*";
  case OpKind::DivF:
  case OpKind::DivSI: return "/";
  case OpKind::RemSI:
  case OpKind::RemF: return "%";
  default: return nullptr;
  }
}

static std::string shortName(OpKind op) {
  std::string name = opName(op);
  return name.substr(name.find('.') + 1);
}

std::string print(const Expr &e, const Program *program) {
  switch (e->kind) {
  case ExprKind::IntConst:
    return e->type == ElemKind::Index ? std::to_string(e->intValue)
                                      : fmt::format("{}:{}", e->intValue, elemName(e->type));
  case ExprKind::FloatConst: return fmt::format("{}f", e->floatValue);
  case ExprKind::Var: return e->name;
  case ExprKind::DimParam: return fmt::format("dims[{}]", e->intValue);
  case ExprKind::ScalarParam: return fmt::format("scalars[{}]:{}", e->intValue, elemName(e->type));
  case ExprKind::Unary:
    if (e->op == OpKind::NegF)
      return fmt::format("-{}", print(e->args[0], program));
    return fmt::format("{}({})", shortName(e->op), print(e->args[0], program));
  case ExprKind::Binary: {
    const char *infix = infixOf(e->op);
    std::string flag = e->reassoc ? "[reassoc]" : "";
    if (infix)
      return fmt::format("({} {}{} {})", print(e->args[0], program), infix, flag,
                         print(e->args[1], program));
    return fmt::format("{}{}({}, {})", shortName(e->op), flag, print(e->args[0], program),
                       print(e->args[1], program));
  }
  case ExprKind::Cmp:
    return fmt::format("cmp.{}({}, {})", e->name, print(e->args[0], program),
                       print(e->args[1], program));
  case ExprKind::Select:
    return fmt::format("select({}, {}, {})", print(e->args[0], program), print(e->args[1], program),
                       print(e->args[2], program));
  case ExprKind::Cast:
    return fmt::format("{}<{}>({})", shortName(e->op), elemName(e->type),
                       print(e->args[0], program));
  case ExprKind::Load: {
    std::string buf =
        program ? program->buffers[e->intValue].name : fmt::format("b{}", e->intValue);
    std::string read = e->lanes > 1
                           ? fmt::format("{}[{} : {}]", buf, print(e->args[0], program), e->lanes)
                           : fmt::format("{}[{}]", buf, print(e->args[0], program));
    if (program && program->buffers[e->intValue].elem != e->type)
      read += fmt::format(" as {}", elemName(e->type));
    return read;
  }
  case ExprKind::Broadcast:
    return fmt::format("broadcast<{}>({})", e->lanes, print(e->args[0], program));
  case ExprKind::ReduceAdd: {
    std::vector<std::string> args;
    for (const Expr &a : e->args)
      args.push_back(print(a, program));
    return fmt::format("reduce_add({})", fmt::join(args, ", "));
  }
  case ExprKind::Permute:
    return fmt::format("permute({}, {})", print(e->args[0], program), print(e->args[1], program));
  case ExprKind::Shuffle:
    return fmt::format("shuffle({}, {}, [{}])", print(e->args[0], program),
                       print(e->args[1], program), fmt::join(e->picks, " "));
  }
  return "?";
}

static void printStmts(const std::vector<Stmt> &stmts, const Program &p, int indent,
                       std::string &out);

static void printStmt(const Stmt &s, const Program &p, int indent, std::string &out) {
  std::string pad(indent, ' ');
  if (!s->comment.empty())
    out += fmt::format("{}// {}\n", pad, s->comment);
  switch (s->kind) {
  case StmtKind::Block: printStmts(s->body, p, indent, out); return;
  case StmtKind::For: {
    std::string kind = s->forKind == ForKind::Vectorize ? " vectorized"
                       : s->forKind == ForKind::Parallel
                           ? fmt::format(" parallel(chunks of at least {})", print(s->bound, &p))
                           : "";
    if (!s->chunkFirst.empty())
      kind += fmt::format(" chunk from {}", s->chunkFirst);
    out += fmt::format("{}for {} in 0..{}{} {{\n", pad, s->name, print(s->value, &p), kind);
    printStmts(s->body, p, indent + 2, out);
    out += pad + "}\n";
    return;
  }
  case StmtKind::Let:
    out += fmt::format("{}let {}: {} = {}\n", pad, s->name, typeName(s->type, s->lanes),
                       print(s->value, &p));
    return;
  case StmtKind::Local:
    out += fmt::format("{}var {}: {} = {}\n", pad, s->name, typeName(s->type, s->lanes),
                       print(s->value, &p));
    return;
  case StmtKind::Assign:
    out += fmt::format("{}{} = {}\n", pad, s->name, print(s->value, &p));
    return;
  case StmtKind::Store:
    out += fmt::format("{}{}[{}{}] = {}\n", pad, p.buffers[s->buffer].name, print(s->index, &p),
                       s->value->lanes > 1 ? fmt::format(" : {}", s->value->lanes) : "",
                       print(s->value, &p));
    return;
  case StmtKind::Prefetch:
    out += fmt::format("{}prefetch {}[{}]\n", pad, p.buffers[s->buffer].name, print(s->index, &p));
    return;
  case StmtKind::Check:
    out += fmt::format("{}check {} else fail #{}({}, {})\n", pad, print(s->value, &p), s->buffer,
                       print(s->index, &p), print(s->bound, &p));
    return;
  case StmtKind::If:
    out += fmt::format("{}if {} {{\n", pad, print(s->value, &p));
    printStmts(s->body, p, indent + 2, out);
    if (!s->elseBody.empty()) {
      out += pad + "} else {\n";
      printStmts(s->elseBody, p, indent + 2, out);
    }
    out += pad + "}\n";
    return;
  }
}

static void printStmts(const std::vector<Stmt> &stmts, const Program &p, int indent,
                       std::string &out) {
  for (const Stmt &s : stmts)
    printStmt(s, p, indent, out);
}

std::string print(const Program &p) {
  std::string out = fmt::format("kernel @{}\n", p.name);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer &b = p.buffers[i];
    const char *role = b.role == BufferRole::Input    ? "input"
                       : b.role == BufferRole::Output ? "output"
                                                      : "temp";
    out += fmt::format("  {} {}: {}[{}]", role, b.name, elemName(b.elem), print(b.numElements, &p));
    if (b.role == BufferRole::Temp)
      out += fmt::format(" at workspace+{}", print(b.workspaceOffset, &p));
    out += "\n";
  }
  for (size_t i = 0; i < p.scalarParams.size(); ++i)
    out += fmt::format("  scalar scalars[{}]: {}\n", i, elemName(p.scalarParams[i]));
  if (p.numDimParams)
    out += fmt::format("  runtime dims: {}\n", p.numDimParams);
  out += "{\n";
  printStmts(p.body, p, 2, out);
  out += "}\n";
  return out;
}

int64_t evaluate(const Expr &e, const int64_t *dims, const uint64_t *scalars) {
  switch (e->kind) {
  case ExprKind::IntConst: return e->intValue;
  case ExprKind::DimParam: return dims[e->intValue];
  case ExprKind::ScalarParam: {
    int64_t v;
    std::memcpy(&v, &scalars[e->intValue], 8);
    return wrapToType(v, e->type);
  }
  case ExprKind::Binary:
  case ExprKind::Cast:
  case ExprKind::Cmp:
  case ExprKind::Select: {
    // Evaluated on every call of a kernel with runtime dims: no allocation per node.
    std::array<int64_t, 3> values{};
    if (e->args.size() > values.size())
      break;
    for (size_t i = 0; i < e->args.size(); ++i)
      values[i] = evaluate(e->args[i], dims, scalars);
    if (e->kind == ExprKind::Binary && isIntegerDivision(e->op) && values[1] == 0)
      throw Error(fmt::format("error: division by zero in a shape computation: {}", print(e)));
    OpKind op = e->kind == ExprKind::Cmp      ? OpKind::CmpI
                : e->kind == ExprKind::Select ? OpKind::Select
                                              : e->op;
    ElemKind operandType = e->kind == ExprKind::Select ? e->type : e->args[0]->type;
    if (auto v = foldInteger(op, operandType, e->type,
                             llvm::ArrayRef<int64_t>(values.data(), e->args.size()), e->name))
      return *v;
    break;
  }
  default: break;
  }
  internalError("cannot evaluate a shape expression on the host: " + print(e));
}

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
  return withArgs(e, std::move(args));
}

std::vector<Stmt> substitute(const std::vector<Stmt> &stmts, const std::string &from,
                             const Expr &to) {
  return rewriteExprs(stmts, [&](const Expr &e) { return substitute(e, from, to); });
}

std::optional<int64_t> mostTrips(const Expr &extent) {
  if (auto c = asConstant(extent))
    return c;
  if (extent->kind != ExprKind::Binary || extent->op != OpKind::MinSI)
    return std::nullopt;
  auto a = mostTrips(extent->args[0]), b = mostTrips(extent->args[1]);
  if (a && b)
    return std::min(*a, *b);
  return a ? a : b;
}

bool rowsOfTheirOwn(const std::vector<BufferAccess> &accesses, size_t depth) {
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
      // The most iterations: a constant where one bounds the extent (a causal mask's keys,
      // `minsi(128, ...)`), else a polynomial.
      const std::optional<int64_t> most = mostTrips((*around)->value);
      const std::optional<Poly> trips = most ? constantPoly(*most) : boundOf((*around)->value);
      if (!trips)
        return false;
      if (size_t(around - a.loops.begin()) < depth)
        outer[name] = {k, *trips};
      else // k times the last iteration, extent - 1: at least 0 whenever the loop runs
        hi = plus(hi, times(k, plus(*trips, constantPoly(-1))));
    }
    // lo >= 0 and hi <= S - 1 (so S >= 1 wherever the access runs).
    if (!stride || !nonNegative(lo) ||
        !nonNegative(plus(plus(*stride, constantPoly(-1)), hi, -1)) ||
        (sharedOuter && *sharedOuter != outer))
      return false;
    sharedOuter = std::move(outer);
  }
  // The outer terms, smallest first, each step past the rows and the smaller terms' reach, so
  // that different iterations outside never share a row.
  Poly reach = times(*stride, *extent);
  while (!sharedOuter->empty()) {
    auto smallest = std::find_if(sharedOuter->begin(), sharedOuter->end(), [&](const auto &t) {
      return std::all_of(sharedOuter->begin(), sharedOuter->end(), [&](const auto &u) {
        return nonNegative(plus(u.second.first, t.second.first, -1));
      });
    });
    if (smallest == sharedOuter->end() || !nonNegative(plus(smallest->second.first, reach, -1)))
      return false;
    reach = times(smallest->second.first, smallest->second.second);
    sharedOuter->erase(smallest);
  }
  return true;
}

} // namespace frank::loops
