// Reshaping before permuting (see CollapseBeforeCopy.h).
#include "transforms/CollapseBeforeCopy.h"
#include "ir/Builder.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "transforms/FoldCopies.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace frank {
namespace {

// For a collapse of a permuting copy of x: the groups of x's dims, in x's order, that collapse
// to the same sizes, each paired with the collapse group it becomes. Nullopt when some group is
// not a run of consecutive dims of x (unit dims aside).
struct SourceGroups {
  std::vector<std::vector<int64_t>> dims; // x's dims per group, in x's order
  std::vector<int> resultGroup;           // the collapse group each becomes
};

std::optional<SourceGroups> sourceGroups(const Op &collapse, const Op &copy) {
  GenericView g{const_cast<Op &>(copy)};
  const AffineMap &in = g.map(0), &out = g.outputMap();
  if (!in.isPermutation())
    return std::nullopt;
  const Type &x = copy.operands[0]->type;
  const Type &copied = copy.result()->type;
  // Result dim i of the copy is dim srcOf[i] of x.
  std::vector<int64_t> srcOf(out.results.size());
  for (size_t i = 0; i < out.results.size(); ++i)
    for (size_t s = 0; s < in.results.size(); ++s)
      if (in.results[s].value == out.results[i].value)
        srcOf[i] = static_cast<int64_t>(s);
  const AttrList &groups = collapse.attr("reassociation").list();
  std::vector<int> groupOf(x.rank(), -1);
  std::vector<int64_t> firstDim(groups.size(), -1);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    int64_t previous = -1;
    for (const Attribute &a : groups[gi].list()) {
      int64_t i = a.integer();
      if (copied.shape[i] == 1)
        continue;
      int64_t s = srcOf[i];
      // Consecutive in x, up to unit dims between.
      if (previous >= 0) {
        if (s <= previous)
          return std::nullopt;
        for (int64_t between = previous + 1; between < s; ++between)
          if (x.shape[between] != 1)
            return std::nullopt;
      }
      previous = s;
      groupOf[s] = static_cast<int>(gi);
      if (firstDim[gi] < 0)
        firstDim[gi] = s;
    }
    if (firstDim[gi] < 0)
      return std::nullopt; // a group of unit dims only: no dim of x to become it
  }
  // Unit dims of x join the next group in x's order (the last one when none follows).
  for (int64_t s = x.rank(); s-- > 0;)
    if (groupOf[s] < 0)
      groupOf[s] = s + 1 < x.rank() ? groupOf[s + 1] : -1;
  for (int64_t s = 0; s < x.rank(); ++s)
    if (groupOf[s] < 0)
      groupOf[s] = s > 0 ? groupOf[s - 1] : -1;
  SourceGroups result;
  for (int64_t s = 0; s < x.rank(); ++s) {
    if (s == 0 || groupOf[s] != groupOf[s - 1]) {
      // A group of x's dims must not come back after another: the runs must be contiguous.
      if (std::find(result.resultGroup.begin(), result.resultGroup.end(), groupOf[s]) !=
          result.resultGroup.end())
        return std::nullopt;
      result.dims.emplace_back();
      result.resultGroup.push_back(groupOf[s]);
    }
    result.dims.back().push_back(s);
  }
  return result;
}

// The reshape at `at`, whose result `old` the new copy `permuted` replaces, and the old copy
// go; `at` then points before where the reshape was.
void replaceReshapeAndCopy(Block &block, size_t &at, Value *old, Value *permuted, Op *copy) {
  replaceAllUses(block, old, permuted);
  block.ops.erase(block.ops.begin() + static_cast<long>(at));
  --at;
  for (size_t i = 0; i < block.ops.size(); ++i)
    if (block.ops[i].get() == copy) {
      block.ops.erase(block.ops.begin() + static_cast<long>(i));
      at -= i < at;
      break;
    }
}

bool rewrite(Block &block, size_t &at) {
  Op &collapse = *block.ops[at];
  Op *copy = collapse.operands[0]->definingOp;
  if (!isPureCopy(copy) || copy->parentBlock != &block)
    return false;
  Value *x = copy->operands[0];
  if (countUses(block, copy->result()) != 1)
    return false;
  std::optional<SourceGroups> groups = sourceGroups(collapse, *copy);
  if (!groups)
    return false;
  Type collapsedType = x->type;
  collapsedType.shape.clear();
  for (const auto &dims : groups->dims) {
    int64_t size = 1;
    for (int64_t s : dims)
      size = size == kDynamic || x->type.shape[s] == kDynamic ? kDynamic : size * x->type.shape[s];
    collapsedType.shape.push_back(size);
  }
  Builder b(block, at, collapse.loc);
  Value *collapsed = b.reshape(x, groups->dims, collapsedType, x->name + "_collapsed");
  const int rank = static_cast<int>(groups->dims.size());
  // Collapse group g is dim positionOf[g] of the collapsed x: runtime sizes are read there.
  std::vector<int64_t> positionOf(rank);
  for (int q = 0; q < rank; ++q)
    positionOf[groups->resultGroup[q]] = q;
  const Type &resultType = collapse.result()->type;
  std::vector<std::pair<Value *, int64_t>> sizes;
  for (int g = 0; g < rank; ++g)
    sizes.push_back({collapsed, positionOf[g]});
  std::vector<int> identity(rank);
  std::iota(identity.begin(), identity.end(), 0);
  Value *permuted = b.generic(
      {collapsed}, b.empty(resultType, sizes),
      {mapOf(rank, groups->resultGroup), mapOf(rank, identity)}, std::vector<bool>(rank, false),
      [](Builder &, const std::vector<Value *> &args) { return args[0]; }, collapse.result()->name);
  Value *old = collapse.result();
  at = b.position();
  // Sizes asked of the collapse are asked of the collapsed x, so that the copy keeps its one
  // reader and can fuse into it.
  for (size_t i = at + 1; i < block.ops.size(); ++i) {
    Op &dim = *block.ops[i];
    const Op *index = dim.kind == OpKind::TensorDim ? dim.operands[1]->definingOp : nullptr;
    if (dim.operands.empty() || dim.operands[0] != old || !index ||
        index->kind != OpKind::ArithConstant)
      continue;
    Builder before(block, i, dim.loc);
    Value *position = before.constantIndex(positionOf[constantValue(*index).i]);
    dim.operands = {collapsed, position};
    ++i;
  }
  replaceReshapeAndCopy(block, at, old, permuted, copy);
  return true;
}

// expand_shape(copy(x)) with a static result: x's dims expand as the copy's dims they become
// do, and a copy permutes the expanded dims. The split attention's chunks of keys arrive so.
bool rewriteExpand(Block &block, size_t &at) {
  Op &expand = *block.ops[at];
  Op *copy = expand.operands[0]->definingOp;
  if (!isPureCopy(copy) || copy->parentBlock != &block || !expand.result()->type.hasStaticShape())
    return false;
  Value *x = copy->operands[0];
  GenericView g{*copy};
  const AffineMap &in = g.map(0), &out = g.outputMap();
  if (countUses(block, copy->result()) != 1 || !in.isPermutation())
    return false;
  // Dim s of x is dim copyOf[s] of the copy, which expands into `groups[copyOf[s]]`.
  const int64_t rank = x->type.rank();
  std::vector<int64_t> copyOf(rank);
  for (int64_t i = 0; i < rank; ++i)
    for (int64_t s = 0; s < rank; ++s)
      if (in.results[s].value == out.results[i].value)
        copyOf[s] = i;
  const AttrList &groups = expand.attr("reassociation").list();
  const Type &expandedType = expand.result()->type;
  Type xType = x->type;
  xType.shape.clear();
  std::vector<std::vector<int64_t>> xGroups;
  std::vector<int> positionInExpanded; // x's expanded dims, as positions of the copy's result
  for (int64_t s = 0, next = 0; s < rank; ++s) {
    xGroups.emplace_back();
    for (const Attribute &a : groups[copyOf[s]].list()) {
      xGroups.back().push_back(next++);
      xType.shape.push_back(expandedType.shape[a.integer()]);
      positionInExpanded.push_back(static_cast<int>(a.integer()));
    }
  }
  Builder b(block, at, expand.loc);
  Value *expandedX = b.reshape(x, xGroups, xType, x->name + "_expanded");
  const int expandedRank = static_cast<int>(expandedType.rank());
  std::vector<int> identity(expandedRank);
  std::iota(identity.begin(), identity.end(), 0);
  Value *permuted = b.generic(
      {expandedX}, b.empty(expandedType, {}),
      {mapOf(expandedRank, positionInExpanded), mapOf(expandedRank, identity)},
      std::vector<bool>(expandedRank, false),
      [](Builder &, const std::vector<Value *> &args) { return args[0]; }, expand.result()->name);
  Value *old = expand.result();
  at = b.position();
  replaceReshapeAndCopy(block, at, old, permuted, copy);
  return true;
}

} // namespace

int collapseBeforeCopies(FuncOp &fn) {
  int moved = 0;
  Block &body = *fn.body;
  for (size_t i = 0; i < body.ops.size(); ++i)
    if ((body.ops[i]->kind == OpKind::TensorCollapseShape && rewrite(body, i)) ||
        (body.ops[i]->kind == OpKind::TensorExpandShape && rewriteExpand(body, i)))
      ++moved;
  return moved;
}

} // namespace frank
