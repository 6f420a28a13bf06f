// Causal masks read from the ops that compute them.
#include "transforms/CausalMask.h"
#include "ir/Ops.h"

namespace frank {
namespace {

// The values that size a mask generic's query and key dims, where they are runtime sizes (its
// tensor.empty's operands), else null.
struct ExtentValues {
  const Value *query = nullptr, *key = nullptr;
};

// An index value as loop dim `dim` (-1: none) plus `constant`, plus multiples of the query's and
// the key's runtime extents.
struct IndexTerm {
  int64_t dim = -1;
  int64_t constant = 0;
  int64_t queryExtent = 0, keyExtent = 0;
};

std::optional<IndexTerm> indexTermOf(const Value *v, const ExtentValues &extents) {
  // One value that sizes both dims is one extent, counted once (as the query's).
  if (v == extents.query)
    return IndexTerm{-1, 0, 1, 0};
  if (v == extents.key)
    return IndexTerm{-1, 0, 0, 1};
  const Op *op = v->definingOp;
  if (!op || !v->type.isIndex())
    return std::nullopt;
  switch (op->kind) {
  case OpKind::LinalgIndex: return IndexTerm{indexDim(*op), 0};
  case OpKind::ArithConstant:
    if (constantValue(*op).kind != Literal::Kind::Int)
      return std::nullopt;
    return IndexTerm{-1, constantValue(*op).i};
  case OpKind::AddI:
  case OpKind::SubI: {
    auto a = indexTermOf(op->operands[0], extents), b = indexTermOf(op->operands[1], extents);
    if (!a || !b || (b->dim >= 0 && (a->dim >= 0 || op->kind == OpKind::SubI)))
      return std::nullopt;
    const int64_t sign = op->kind == OpKind::AddI ? 1 : -1;
    IndexTerm sum{a->dim >= 0 ? a->dim : b->dim, 0, a->queryExtent + sign * b->queryExtent,
                  a->keyExtent + sign * b->keyExtent};
    bool overflow = op->kind == OpKind::AddI
                        ? __builtin_add_overflow(a->constant, b->constant, &sum.constant)
                        : __builtin_sub_overflow(a->constant, b->constant, &sum.constant);
    if (overflow)
      return std::nullopt;
    return sum;
  }
  default: return std::nullopt;
  }
}

// `key` <= `query` + offset, for a comparison of two index terms, or nullopt. The offset is a
// term of no loop dim.
std::optional<IndexTerm> offsetOf(const Op &cmp, int64_t keyDim, int64_t queryDim,
                                  const ExtentValues &extents) {
  auto lhs = indexTermOf(cmp.operands[0], extents), rhs = indexTermOf(cmp.operands[1], extents);
  if (!lhs || !rhs)
    return std::nullopt;
  std::string pred = predicate(cmp);
  // Unsigned comparisons agree with signed ones where neither side can be negative.
  if (pred[0] == 'u') {
    if (lhs->constant < 0 || rhs->constant < 0 || lhs->queryExtent || lhs->keyExtent ||
        rhs->queryExtent || rhs->keyExtent)
      return std::nullopt;
    pred[0] = 's';
  }
  // As smaller <= larger + strict, the strict forms taking one off.
  IndexTerm smaller = *lhs, larger = *rhs;
  if (pred == "sge" || pred == "sgt")
    std::swap(smaller, larger);
  else if (pred != "sle" && pred != "slt")
    return std::nullopt;
  const int64_t strict = pred == "slt" || pred == "sgt" ? 1 : 0;
  if (smaller.dim != keyDim || larger.dim != queryDim)
    return std::nullopt;
  IndexTerm offset{-1, 0, larger.queryExtent - smaller.queryExtent,
                   larger.keyExtent - smaller.keyExtent};
  if (__builtin_sub_overflow(larger.constant, smaller.constant, &offset.constant) ||
      __builtin_sub_overflow(offset.constant, strict, &offset.constant))
    return std::nullopt;
  return offset;
}

// The value that sizes dim `dim` of `tensor` when it is a tensor.empty's runtime size, or null.
const Value *runtimeSizeOf(const Value &tensor, int dim) {
  const Op *empty = tensor.definingOp;
  if (!empty || empty->kind != OpKind::TensorEmpty || tensor.type.shape[size_t(dim)] != kDynamic)
    return nullptr;
  size_t operand = 0;
  for (int d = 0; d < dim; ++d)
    operand += tensor.type.shape[size_t(d)] == kDynamic ? 1 : 0;
  return operand < empty->operands.size() ? empty->operands[operand] : nullptr;
}

} // namespace

std::optional<CausalBound> causalBoundOf(const Value &mask, int queryDim, int keyDim) {
  const Type &type = mask.type;
  if (!type.isTensor() || type.elem != ElemKind::I1 || queryDim == keyDim ||
      std::max(queryDim, keyDim) >= type.rank())
    return std::nullopt;
  const Op *op = mask.definingOp;
  if (!op)
    return std::nullopt;
  if (op->kind == OpKind::TensorCollapseShape) {
    // The query's index is the last dim of its group (g * S + s: s is the index mod S); the
    // key's is the one dim of its group that is not 1.
    const Value &source = *op->operands[0];
    const AttrList &groups = op->attr("reassociation").list();
    const AttrList &queryGroup = groups[size_t(queryDim)].list();
    int key = -1;
    for (const Attribute &d : groups[size_t(keyDim)].list())
      if (source.type.shape[size_t(d.integer())] != 1) {
        if (key >= 0)
          return std::nullopt;
        key = int(d.integer());
      }
    if (key < 0 || queryGroup.empty())
      return std::nullopt;
    std::optional<CausalBound> bound = causalBoundOf(source, int(queryGroup.back().integer()), key);
    // A runtime S is the merged dim's extent over the group's other (constant) dims.
    for (size_t i = 0; bound && bound->periodDivisor && i + 1 < queryGroup.size(); ++i) {
      const int64_t extent = source.type.shape[size_t(queryGroup[i].integer())];
      if (extent == kDynamic)
        return std::nullopt;
      bound->periodDivisor *= extent;
    }
    return bound;
  }
  if (op->kind != OpKind::LinalgGeneric)
    return std::nullopt;
  GenericView g{const_cast<Op &>(*op)};
  const AffineMap &out = g.outputMap();
  const AffineResult &query = out.results[size_t(queryDim)], &key = out.results[size_t(keyDim)];
  if (query.isConstant || key.isConstant)
    return std::nullopt;
  const Op *yield = g.body().terminator();
  if (!yield || yield->operands.size() != 1)
    return std::nullopt;
  const Op *cmp = yield->operands[0]->definingOp;
  if (!cmp || cmp->kind != OpKind::CmpI)
    return std::nullopt;
  const ExtentValues extents{runtimeSizeOf(*g.output(), queryDim),
                             runtimeSizeOf(*g.output(), keyDim)};
  std::optional<IndexTerm> offset = offsetOf(*cmp, key.value, query.value, extents);
  if (!offset)
    return std::nullopt;
  const int64_t period = type.shape[size_t(queryDim)];
  if (period == kDynamic) // runtime queries: the period is their extent
    return CausalBound{1, offset->constant, 1, offset->keyExtent, offset->queryExtent};
  if (period < 1 || offset->queryExtent) // no queries: nothing to skip
    return std::nullopt;
  return CausalBound{period, offset->constant, 0, offset->keyExtent, 0};
}

} // namespace frank
