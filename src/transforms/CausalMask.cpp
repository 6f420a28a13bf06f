// Causal masks read from the ops that compute them.
#include "transforms/CausalMask.h"
#include "ir/Ops.h"

namespace frank {
namespace {

// An index value as loop dim `dim` (-1: none) plus `constant`.
struct IndexTerm {
  int64_t dim = -1;
  int64_t constant = 0;
};

std::optional<IndexTerm> indexTermOf(const Value *v) {
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
    auto a = indexTermOf(op->operands[0]), b = indexTermOf(op->operands[1]);
    if (!a || !b || (b->dim >= 0 && (a->dim >= 0 || op->kind == OpKind::SubI)))
      return std::nullopt;
    IndexTerm sum{a->dim >= 0 ? a->dim : b->dim, 0};
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

// `key` <= `query` + offset, for a comparison of two index terms, or nullopt.
std::optional<int64_t> offsetOf(const Op &cmp, int64_t keyDim, int64_t queryDim) {
  auto lhs = indexTermOf(cmp.operands[0]), rhs = indexTermOf(cmp.operands[1]);
  if (!lhs || !rhs)
    return std::nullopt;
  std::string pred = predicate(cmp);
  // Unsigned comparisons agree with signed ones where neither side can be negative.
  if (pred[0] == 'u') {
    if (lhs->constant < 0 || rhs->constant < 0)
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
  int64_t offset = 0;
  if (__builtin_sub_overflow(larger.constant, smaller.constant, &offset) ||
      __builtin_sub_overflow(offset, strict, &offset))
    return std::nullopt;
  return offset;
}

} // namespace

std::optional<CausalBound> causalBoundOf(const Value &mask, int queryDim, int keyDim) {
  const Type &type = mask.type;
  if (!type.isTensor() || type.elem != ElemKind::I1 || queryDim == keyDim ||
      std::max(queryDim, keyDim) >= type.rank() || !type.hasStaticShape())
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
    return causalBoundOf(source, int(queryGroup.back().integer()), key);
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
  std::optional<int64_t> offset = offsetOf(*cmp, key.value, query.value);
  const int64_t period = type.shape[size_t(queryDim)];
  if (!offset || period < 1) // no queries: nothing to skip
    return std::nullopt;
  return CausalBound{period, *offset};
}

} // namespace frank
