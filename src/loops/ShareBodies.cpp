// share-bodies (ShareBodies.h).
//
// 1. Walk the body of every outermost parallel loop, writing its shape as codegen's shape match
//    does (TreeShape.h) but with every scalar index constant written as a hole, whose values the
//    walk collects in order.
// 2. Group the loops by shape. In a group of two or more, the holes whose values differ between
//    its loops are the shared function's parameters.
// 3. Walk each loop's body again, the same way, putting a variable at each such hole, and bind
//    the variables to that loop's constants with lets just before it.
#include "loops/ShareBodies.h"
#include "loops/TreeShape.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace frank::loops {
namespace {

struct Member {
  std::vector<Stmt> *block; // where the loop is, for the lets
  Stmt loop;
  TreeWalk walk;
};

// The outermost parallel loops under `block`, by the shape of their bodies.
void collect(const Program &program, std::vector<Stmt> &block,
             std::map<std::string, std::vector<Member>> &groups) {
  for (const Stmt &s : block) {
    if (s->kind == StmtKind::For && s->forKind == ForKind::Parallel) {
      TreeWalk walk(program, /*withShape=*/true, TreeWalk::Constants::Holes);
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
      TreeWalk rewrite(program, /*withShape=*/false, TreeWalk::Constants::Holes, &holeNames);
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
