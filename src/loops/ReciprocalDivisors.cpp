// Divisions by values a loop does not change as products with their reciprocals (see
// ReciprocalDivisors.h).
#include "loops/ReciprocalDivisors.h"
#include "loops/Strategy.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>

namespace frank::loops {
namespace {

bool containsLoop(const std::vector<Stmt> &stmts) {
  for (const Stmt &s : stmts)
    if (s->kind == StmtKind::For || containsLoop(s->body) || containsLoop(s->elseBody))
      return true;
  return false;
}

// Calls `visit` on each expression the statements hold directly (value, index, bound).
void forEachStmtExpr(const std::vector<Stmt> &stmts,
                     const std::function<void(const Expr &)> &visit) {
  forEachStmt(stmts, [&](StmtNode &s) {
    for (const Expr &e : {s.value, s.index, s.bound})
      if (e)
        visit(e);
  });
}

void collectNames(const Expr &e, std::set<std::string> &names) {
  if (e->kind == ExprKind::Var)
    names.insert(e->name);
  for (const Expr &a : e->args)
    collectNames(a, names);
}

// Every name the statements bind or read.
void collectNames(const std::vector<Stmt> &stmts, std::set<std::string> &names) {
  forEachStmt(stmts, [&](StmtNode &s) {
    if (!s.name.empty())
      names.insert(s.name);
  });
  forEachStmtExpr(stmts, [&](const Expr &e) { collectNames(e, names); });
}

// One innermost loop: which of its expressions keep their value across its iterations, and its
// divisions by such values rewritten as products with reciprocals bound before it.
class LoopDivisors {
public:
  explicit LoopDivisors(const StmtNode &loop) {
    changed_.insert(loop.name);
    collectChanges(loop.body);
  }

  // The divisor `e` divides by, a scalar the loop does not change (looking through a
  // broadcast), or null.
  Expr invariantDivisor(const Expr &e) {
    if (e->kind != ExprKind::Binary || e->op != OpKind::DivF)
      return nullptr;
    Expr d = e->args[1];
    if (d->kind == ExprKind::Broadcast)
      d = d->args[0];
    if (d->lanes != 1 || (d->type != ElemKind::F32 && d->type != ElemKind::F64) ||
        d->kind == ExprKind::FloatConst || !invariant(d))
      return nullptr;
    return inlined(d);
  }

  bool invariant(const Expr &e) {
    if (e->kind == ExprKind::Var) {
      if (changed_.count(e->name))
        return false;
      auto let = lets_.find(e->name);
      return let == lets_.end() || invariant(let->second);
    }
    if (e->kind == ExprKind::Load && written_.count(int(e->intValue)))
      return false;
    for (const Expr &a : e->args)
      if (!invariant(a))
        return false;
    return true;
  }

  // `e` with the loop's own lets replaced by their values, to evaluate before the loop.
  Expr inlined(const Expr &e) {
    if (e->kind == ExprKind::Var)
      if (auto let = lets_.find(e->name); let != lets_.end())
        return inlined(let->second);
    std::vector<Expr> args;
    for (const Expr &a : e->args)
      args.push_back(inlined(a));
    return e->args.empty() ? e : withArgs(e, std::move(args));
  }

private:
  void collectChanges(const std::vector<Stmt> &stmts) {
    for (const Stmt &s : stmts) {
      if (s->kind == StmtKind::Let && !lets_.emplace(s->name, s->value).second)
        changed_.insert(s->name); // bound twice: not one value
      if (s->kind == StmtKind::Local || s->kind == StmtKind::Assign || s->kind == StmtKind::For)
        changed_.insert(s->name);
      if (s->kind == StmtKind::Store)
        written_.insert(s->buffer);
      collectChanges(s->body);
      collectChanges(s->elseBody);
    }
  }

  std::set<std::string> changed_; // names the body assigns or binds to more than one value
  std::set<int> written_;         // buffers the body stores to
  std::map<std::string, Expr> lets_;
};

constexpr int64_t kMinIterations = 4096;

class Rewriter {
public:
  explicit Rewriter(const Program &program) { collectNames(program.body, used_); }

  // `runs`: how many times a call runs `stmts`, a runtime extent counting kNominalExtent.
  void rewrite(std::vector<Stmt> &stmts, int64_t runs = 1) {
    for (size_t i = 0; i < stmts.size(); ++i) {
      Stmt &s = stmts[i];
      if (s->kind != StmtKind::For) {
        rewrite(s->body, runs);
        rewrite(s->elseBody, runs);
        continue;
      }
      const int64_t iterations = saturatingMul(runs, asConstant(s->value).value_or(kNominalExtent));
      if (containsLoop(s->body) || s->forKind == ForKind::Parallel) {
        rewrite(s->body, iterations);
        continue;
      }
      // A loop that runs its body a few times a call divides a few vectors: a second copy of
      // it would cost more to compile than the divisions (rope's 64 frequencies).
      if (iterations < kMinIterations)
        continue;
      std::vector<Stmt> versioned = version(*s);
      if (versioned.empty())
        continue;
      ++count;
      stmts.erase(stmts.begin() + std::ptrdiff_t(i));
      stmts.insert(stmts.begin() + std::ptrdiff_t(i), versioned.begin(), versioned.end());
      i += versioned.size() - 1;
    }
  }

  int count = 0;

private:
  // The loop's divisors and reciprocals bound before it, then the loop twice: multiplying
  // when every reciprocal is a normal number, dividing as written otherwise.
  std::vector<Stmt> version(const StmtNode &loop) {
    LoopDivisors divisors(loop);
    std::map<std::string, Expr> reciprocals; // by the printed divisor
    std::vector<Stmt> before;
    Expr normal;
    forEachStmtExpr(loop.body,
                    [&](const Expr &e) { find(e, divisors, reciprocals, before, normal); });
    if (reciprocals.empty())
      return {};
    auto multiplying = std::make_shared<StmtNode>(loop);
    multiplying->body =
        rewriteExprs(loop.body, [&](const Expr &e) { return rewritten(e, divisors, reciprocals); });
    auto dividing = std::make_shared<StmtNode>(loop);
    before.push_back(ifThen(normal, {multiplying}, {dividing}));
    // The divisors are read before the loop: with a runtime extent, only if it runs at all (an
    // empty row's divisor may lie past its buffer).
    if (!asConstant(loop.value))
      return {ifThen(cmp("sgt", loop.value, intConst(0)), std::move(before))};
    return before;
  }

  // Binds the reciprocal of each new invariant divisor under `e`, and what makes it normal.
  void find(const Expr &e, LoopDivisors &divisors, std::map<std::string, Expr> &reciprocals,
            std::vector<Stmt> &before, Expr &normal) {
    for (const Expr &a : e->args)
      find(a, divisors, reciprocals, before, normal);
    Expr d = divisors.invariantDivisor(e);
    if (!d || reciprocals.count(print(d)))
      return;
    const ElemKind type = d->type;
    Expr divisor = var(fresh("divisor"), type), reciprocal = var(fresh("reciprocal"), type);
    before.push_back(let(divisor->name, d));
    before.push_back(let(reciprocal->name, binary(OpKind::DivF, floatConst(1, type), divisor)));
    reciprocals[print(d)] = reciprocal;
    const int exponent = type == ElemKind::F32 ? 126 : 1022;
    Expr magnitude = unary(OpKind::AbsF, divisor);
    Expr inRange =
        binary(OpKind::AndI, cmp("oge", magnitude, floatConst(std::ldexp(1.0, -exponent), type)),
               cmp("ole", magnitude, floatConst(std::ldexp(1.0, exponent), type)));
    normal = normal ? binary(OpKind::AndI, normal, inRange) : inRange;
  }

  Expr rewritten(const Expr &e, LoopDivisors &divisors,
                 const std::map<std::string, Expr> &reciprocals) {
    std::vector<Expr> args;
    for (const Expr &a : e->args)
      args.push_back(rewritten(a, divisors, reciprocals));
    if (Expr d = divisors.invariantDivisor(e)) {
      Expr reciprocal = reciprocals.at(print(d));
      if (e->args[1]->kind == ExprKind::Broadcast)
        reciprocal = broadcast(reciprocal, e->args[1]->lanes);
      return binary(OpKind::MulF, args[0], reciprocal, e->reassoc);
    }
    return e->args.empty() ? e : withArgs(e, std::move(args));
  }

  std::string fresh(const std::string &base) {
    std::string name = base;
    for (int n = 1; used_.count(name); ++n)
      name = base + "_" + std::to_string(n);
    used_.insert(name);
    return name;
  }

  std::set<std::string> used_;
};

} // namespace

int reciprocalDivisors(Program &program) {
  Rewriter rewriter(program);
  rewriter.rewrite(program.body);
  return rewriter.count;
}

} // namespace frank::loops
