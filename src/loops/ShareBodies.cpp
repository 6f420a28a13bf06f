// share-bodies (ShareBodies.h).
//
// 1. Walk the body of every outermost parallel loop, writing its shape: the tree with names and
//    buffers numbered by first use (as codegen's shape match numbers them) and every scalar index
//    constant written as a hole, whose values the walk collects in order.
// 2. Group the loops by shape. In a group of two or more, the holes whose values differ between
//    its loops are the shared function's parameters.
// 3. Walk each loop's body again, the same way, putting a variable at each such hole, and bind
//    the variables to that loop's constants with lets just before it.
#include "loops/ShareBodies.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace frank::loops {
namespace {

class Walk {
public:
  /// With `holeNames`, the walk rebuilds the trees it visits with a variable of that name at
  /// each hole whose name is not empty; without, it only reads them.
  Walk(const Program &program, const std::vector<std::string> *holeNames)
      : program_(program), holeNames_(holeNames) {}

  std::string shape;
  std::vector<int64_t> holes;
  std::vector<bool> holeIsVectorizedExtent;

  std::vector<Stmt> stmts(const std::vector<Stmt> &list) {
    shape += "{ ";
    std::vector<Stmt> out;
    for (const Stmt &s : list)
      out.push_back(stmt(s));
    shape += "} ";
    return out;
  }

private:
  Stmt stmt(const Stmt &s) {
    shape += fmt::format("[{} {} {} {} ", int(s->kind), int(s->forKind), int(s->type), s->lanes);
    if (!s->name.empty())
      name(s->name);
    if (s->kind == StmtKind::Store || s->kind == StmtKind::Prefetch)
      buffer(s->buffer);
    else
      shape += fmt::format("{} ", s->buffer); // a check's id
    const bool vectorized = s->kind == StmtKind::For && s->forKind == ForKind::Vectorize;
    Expr value = expr(s->value, vectorized), index = expr(s->index), bound = expr(s->bound);
    std::vector<Stmt> body = stmts(s->body), elseBody = stmts(s->elseBody);
    shape += "] ";
    if (!holeNames_)
      return s;
    auto copy = std::make_shared<StmtNode>(*s);
    copy->value = std::move(value);
    copy->index = std::move(index);
    copy->bound = std::move(bound);
    copy->body = std::move(body);
    copy->elseBody = std::move(elseBody);
    return copy;
  }

  Expr expr(const Expr &e, bool vectorizedExtent = false) {
    if (!e) {
      shape += "- ";
      return e;
    }
    if (e->kind == ExprKind::IntConst && e->type == ElemKind::Index && e->lanes == 1) {
      shape += "K ";
      const size_t at = holes.size();
      holes.push_back(e->intValue);
      holeIsVectorizedExtent.push_back(vectorizedExtent);
      if (holeNames_ && !(*holeNames_)[at].empty())
        return var((*holeNames_)[at], ElemKind::Index);
      return e;
    }
    shape += fmt::format("({} {} {} {} {} ", int(e->kind), int(e->type), e->lanes, int(e->op),
                         e->reassoc);
    if (e->kind == ExprKind::Var)
      name(e->name);
    else if (e->kind == ExprKind::Load)
      buffer(int(e->intValue));
    else
      shape += fmt::format("{} {} {} ", e->intValue, e->floatValue, e->name);
    std::vector<Expr> args;
    bool changed = false;
    for (const Expr &a : e->args) {
      args.push_back(expr(a));
      changed |= args.back() != a;
    }
    shape += ") ";
    if (!changed)
      return e;
    auto copy = std::make_shared<ExprNode>(*e);
    copy->args = std::move(args);
    return copy;
  }

  void name(const std::string &n) {
    auto [it, fresh] = names_.emplace(n, names_.size());
    shape += fmt::format("n{} ", it->second);
  }

  void buffer(int b) {
    auto [it, fresh] = buffers_.emplace(b, buffers_.size());
    const Buffer &info = program_.buffers[size_t(b)];
    shape += fmt::format("b{}:{}:{} ", it->second, int(info.elem), info.role == BufferRole::Input);
  }

  const Program &program_;
  const std::vector<std::string> *holeNames_;
  std::unordered_map<std::string, size_t> names_;
  std::unordered_map<int, size_t> buffers_;
};

struct Member {
  std::vector<Stmt> *block; // where the loop is, for the lets
  Stmt loop;
  Walk walk;
};

// The outermost parallel loops under `block`, by the shape of their bodies.
void collect(const Program &program, std::vector<Stmt> &block,
             std::map<std::string, std::vector<Member>> &groups) {
  for (const Stmt &s : block) {
    if (s->kind == StmtKind::For && s->forKind == ForKind::Parallel) {
      Walk walk(program, nullptr);
      walk.stmts(s->body);
      std::string shape = walk.shape;
      groups[shape].push_back({&block, s, std::move(walk)});
      continue;
    }
    collect(program, s->body, groups);
    collect(program, s->elseBody, groups);
  }
}

// The parameter of each hole of the group's shape (-1 where all its loops have the same
// constant): holes with the same values in every loop share one. None if the group is to be
// left alone.
std::vector<int> parameters(const std::vector<Member> &group, size_t &count) {
  const size_t holes = group.front().walk.holes.size();
  std::vector<int> parameterOf(holes, -1);
  std::map<std::vector<int64_t>, int> byValues;
  for (size_t h = 0; h < holes; ++h) {
    std::vector<int64_t> values;
    bool vectorizedExtent = false;
    for (const Member &m : group) {
      values.push_back(m.walk.holes[h]);
      vectorizedExtent |= m.walk.holeIsVectorizedExtent[h];
    }
    if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; }))
      continue;
    if (vectorizedExtent)
      return {};
    parameterOf[h] = byValues.emplace(std::move(values), int(byValues.size())).first->second;
  }
  count = byValues.size();
  if (count == 0 || count > size_t(kMaxSharedConstants))
    return {};
  return parameterOf;
}

} // namespace

int shareBodies(Program &program) {
  std::map<std::string, std::vector<Member>> groups;
  collect(program, program.body, groups);
  // The lets to bind before each rewritten loop, by block.
  std::map<std::vector<Stmt> *, std::map<const StmtNode *, std::vector<Stmt>>> letsBefore;
  int rewritten = 0;
  for (auto &[shape, group] : groups) {
    if (group.size() < 2)
      continue;
    size_t count = 0;
    const std::vector<int> parameterOf = parameters(group, count);
    if (parameterOf.empty())
      continue; // the same constants (codegen shares them as they are), or not to be shared
    for (Member &m : group) {
      std::vector<std::string> holeNames(parameterOf.size());
      std::vector<Stmt> lets(count);
      for (size_t h = 0; h < parameterOf.size(); ++h) {
        if (parameterOf[h] < 0)
          continue;
        holeNames[h] = fmt::format("{}_const{}", m.loop->name, parameterOf[h]);
        lets[size_t(parameterOf[h])] = let(holeNames[h], intConst(m.walk.holes[h]));
      }
      letsBefore[m.block][m.loop.get()] = std::move(lets);
      Walk rewrite(program, &holeNames);
      m.loop->body = rewrite.stmts(m.loop->body);
      ++rewritten;
    }
  }
  for (auto &[block, lets] : letsBefore) {
    std::vector<Stmt> withLets;
    for (const Stmt &s : *block) {
      auto it = lets.find(s.get());
      if (it != lets.end())
        withLets.insert(withLets.end(), it->second.begin(), it->second.end());
      withLets.push_back(s);
    }
    *block = std::move(withLets);
  }
  return rewritten;
}

} // namespace frank::loops
