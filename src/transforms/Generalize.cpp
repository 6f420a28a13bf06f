// Named ops to linalg.generic.
#include "transforms/Generalize.h"
#include "ir/Builder.h"
#include "ir/Clone.h"
#include "ir/Ops.h"

#include <algorithm>
#include <limits>

namespace frank {
namespace {

using Args = std::vector<Value *>;
using DimSources = std::vector<std::pair<Value *, int64_t>>;

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

Value *contraction(Builder &b, Op &op, int batch) {
  Value *a = op.operands[0], *bm = op.operands[1], *c = op.operands[2];
  int n = 3 + batch; // [b] m n k
  std::vector<int> bd = batch ? std::vector<int>{0} : std::vector<int>{};
  auto with = [&](std::vector<int> dims) {
    dims.insert(dims.begin(), bd.begin(), bd.end());
    return mapOf(n, dims);
  };
  int m = batch, nn = batch + 1, k = batch + 2;
  std::vector<bool> red(n, false);
  red[k] = true;
  return b.generic(
      {a, bm}, c, {with({m, k}), with({k, nn}), with({m, nn})}, red,
      [](Builder &bb, const Args &x) {
        return bb.binary(OpKind::AddF, x[2], bb.binary(OpKind::MulF, x[0], x[1]));
      },
      op.result()->name);
}

Value *transpose(Builder &b, Op &op) {
  const AttrList &perm = op.attr("permutation").list();
  int n = static_cast<int>(perm.size());
  std::vector<int> inverse(n);
  for (int i = 0; i < n; ++i)
    inverse[perm[i].integer()] = i;
  return b.generic(
      {op.operands[0]}, op.operands[1], {mapOf(n, inverse), mapOf(n, iota(n))},
      std::vector<bool>(n, false), [](Builder &, const Args &x) { return x[0]; },
      op.result()->name);
}

Value *broadcast(Builder &b, Op &op) {
  const AttrList &added = op.attr("dimensions").list();
  int n = static_cast<int>(op.operands[1]->type.rank());
  std::vector<int> kept;
  for (int d = 0; d < n; ++d)
    if (std::none_of(added.begin(), added.end(),
                     [&](const Attribute &a) { return a.integer() == d; }))
      kept.push_back(d);
  return b.generic(
      {op.operands[0]}, op.operands[1], {mapOf(n, kept), mapOf(n, iota(n))},
      std::vector<bool>(n, false), [](Builder &, const Args &x) { return x[0]; },
      op.result()->name);
}

std::vector<int> keptDims(int n, const std::vector<int> &dropped) {
  std::vector<int> kept;
  for (int d = 0; d < n; ++d)
    if (std::find(dropped.begin(), dropped.end(), d) == dropped.end())
      kept.push_back(d);
  return kept;
}

Value *reduce(Builder &b, Op &op) {
  std::vector<int> dims;
  for (const Attribute &a : op.attr("dimensions").list())
    dims.push_back(static_cast<int>(a.integer()));
  int n = static_cast<int>(op.operands[0]->type.rank());
  std::vector<bool> red(n, false);
  for (int d : dims)
    red[d] = true;
  const Block &region = *op.regions[0];
  return b.generic(
      {op.operands[0]}, op.operands[1], {mapOf(n, iota(n)), mapOf(n, keptDims(n, dims))}, red,
      [&](Builder &bb, const Args &x) {
        ValueMap map{{region.arguments[0].get(), x[0]}, {region.arguments[1].get(), x[1]}};
        for (auto &inner : region.ops) {
          if (inner->kind == OpKind::LinalgYield)
            return map.count(inner->operands[0]) ? map[inner->operands[0]] : inner->operands[0];
          bb.insert(cloneOp(*inner, map));
        }
        internalError("linalg.reduce region without a yield");
      },
      op.result()->name);
}

// Reduces `x` over `dim` into a fresh tensor starting at `init`, combining with `combine`.
Value *reduceOver(Builder &b, Value *x, int dim, double init, const Args &extraInputs,
                  const std::function<Value *(Builder &, const Args &)> &combine,
                  const char *name) {
  int n = static_cast<int>(x->type.rank());
  std::vector<int> kept = keptDims(n, {dim});
  Type type = x->type;
  type.shape.erase(type.shape.begin() + dim);
  DimSources sources;
  for (int d : kept)
    sources.push_back({x, d});
  Value *start = b.fill(b.constantFloat(init, x->type.elem), b.empty(type, sources));
  Args inputs{x};
  std::vector<AffineMap> maps{mapOf(n, iota(n))};
  for (Value *e : extraInputs) {
    inputs.push_back(e);
    maps.push_back(mapOf(n, kept));
  }
  maps.push_back(mapOf(n, kept));
  std::vector<bool> red(n, false);
  red[dim] = true;
  return b.generic(inputs, start, maps, red, combine, name);
}

Value *softmax(Builder &b, Op &op) {
  Value *x = op.operands[0];
  int d = static_cast<int>(op.attr("dimension").integer());
  int n = static_cast<int>(x->type.rank());
  Value *max = reduceOver(
      b, x, d, -std::numeric_limits<double>::infinity(), {},
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::MaximumF, a[1], a[0]); },
      "softmax_max");
  std::vector<int> kept = keptDims(n, {d});
  DimSources sources;
  for (int i = 0; i < n; ++i)
    sources.push_back({x, i});
  // exp(x - max) once, kept for both the sum and the normalization.
  Value *exps = b.generic(
      {x, max}, b.empty(x->type, sources), {mapOf(n, iota(n)), mapOf(n, kept), mapOf(n, iota(n))},
      std::vector<bool>(n, false),
      [](Builder &bb, const Args &a) {
        return bb.unary(OpKind::Exp, bb.binary(OpKind::SubF, a[0], a[1]));
      },
      "softmax_exp");
  Value *sum = reduceOver(
      b, exps, d, 0.0, {},
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::AddF, a[1], a[0]); },
      "softmax_sum");
  return b.generic(
      {exps, sum}, op.operands[1], {mapOf(n, iota(n)), mapOf(n, kept), mapOf(n, iota(n))},
      std::vector<bool>(n, false),
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::DivF, a[0], a[1]); },
      op.result()->name);
}

Value *gather(Builder &b, Op &op) {
  if (op.operands.size() == 4)
    fail(op.loc, "unsupported: 'iree_linalg_ext.gather' with a mask");
  Value *src = op.operands[0], *idx = op.operands[1], *out = op.operands[2];
  const AttrList &dm = op.attr("dimension_map").list();
  int64_t depth = static_cast<int64_t>(dm.size());
  int64_t sliceRank = src->type.rank() - depth;
  int64_t batchRank = out->type.rank() - sliceRank;
  std::vector<bool> seen(depth, false);
  for (const Attribute &a : dm) {
    if (a.integer() < 0 || a.integer() >= depth || seen[a.integer()])
      fail(op.loc, fmt::format("'dimension_map' must be a permutation of 0..{}", depth - 1));
    seen[a.integer()] = true;
  }
  if (sliceRank < 0 || batchRank < 0)
    fail(op.loc, fmt::format("gather of depth {} from '{}' cannot produce '{}'", depth,
                             src->type.str(), out->type.str()));
  bool leftOut = idx->type.rank() == batchRank;
  if (!(leftOut && depth == 1) && idx->type.rank() != batchRank + 1)
    fail(op.loc, fmt::format("the indices '{}' must have rank {} (batch dims then {} coordinates)",
                             idx->type.str(), batchRank + 1, depth));
  if (!leftOut && idx->type.shape.back() != kDynamic && idx->type.shape.back() != depth)
    fail(op.loc,
         fmt::format("the last dim of the indices '{}' must be {}", idx->type.str(), depth));
  int n = static_cast<int>(out->type.rank());
  // One input per coordinate: the index tensor read at (batch..., i).
  Args inputs;
  std::vector<AffineMap> maps;
  std::vector<int> batchDims = iota(static_cast<int>(batchRank));
  for (int64_t i = 0; i < depth; ++i) {
    inputs.push_back(idx);
    AffineMap m = mapOf(n, batchDims);
    if (!leftOut)
      m.results.push_back({true, i});
    maps.push_back(m);
  }
  maps.push_back(mapOf(n, iota(n)));
  return b.generic(
      inputs, out, maps, std::vector<bool>(n, false),
      [&](Builder &bb, const Args &a) {
        std::vector<Value *> coords(src->type.rank());
        for (int64_t i = 0; i < depth; ++i) {
          Value *c = a[i];
          coords[dm[i].integer()] =
              c->type.isIndex() ? c : bb.cast(OpKind::IndexCast, c, ElemKind::Index);
        }
        for (int64_t s = 0; s < sliceRank; ++s)
          coords[depth + s] = bb.linalgIndex(batchRank + s);
        return bb.extract(src, coords);
      },
      op.result()->name);
}

// Attention roles, inferred from which operands use each dim (MLIR-SUBSET.md §4.6).
struct AttentionDims {
  std::vector<int> batch, m, k, j, n;
};

Value *attention(Builder &b, Op &op) {
  const AttrList &maps = op.attr("indexing_maps").list();
  bool hasMask = op.attr("num_inputs").integer() == 5;
  Value *q = op.operands[0], *k = op.operands[1], *v = op.operands[2], *scale = op.operands[3];
  Value *mask = hasMask ? op.operands[4] : nullptr;
  Value *init = op.operands.back();
  const Block &region = *op.regions[0];
  if (region.ops.size() != 1 || region.ops[0]->operands[0] != region.arguments[0].get())
    fail(op.loc,
         "unsupported: an 'iree_linalg_ext.attention' score region other than the identity");
  const AffineMap &qm = maps[0].map(), &km = maps[1].map(), &vm = maps[2].map();
  const AffineMap &om = maps.back().map();
  int numDims = qm.numDims;
  auto uses = [](const AffineMap &m, int d) {
    return std::any_of(m.results.begin(), m.results.end(),
                       [&](const AffineResult &r) { return !r.isConstant && r.value == d; });
  };
  AttentionDims dims;
  for (int d = 0; d < numDims; ++d) {
    bool inQ = uses(qm, d), inK = uses(km, d), inV = uses(vm, d), inO = uses(om, d);
    if (inQ && inK && inV && inO)
      dims.batch.push_back(d);
    else if (inQ && inO && !inK && !inV)
      dims.m.push_back(d);
    else if (inQ && inK && !inV && !inO)
      dims.k.push_back(d);
    else if (inK && inV && !inQ && !inO)
      dims.j.push_back(d);
    else if (inV && inO && !inQ && !inK)
      dims.n.push_back(d);
    else
      fail(op.loc,
           fmt::format("unsupported: attention dim d{} plays no role this layout supports", d));
  }
  if (dims.m.empty() || dims.k.empty() || dims.j.empty() || dims.n.empty())
    fail(op.loc, "unsupported: attention maps without query, contraction, key and value dims");
  // Where each attention dim can be measured: (operand, position in its map).
  auto source = [&](int d) -> std::pair<Value *, int64_t> {
    for (auto [m, t] : {std::pair{&qm, q}, std::pair{&km, k}, std::pair{&vm, v}})
      for (size_t r = 0; r < m->results.size(); ++r)
        if (!m->results[r].isConstant && m->results[r].value == d)
          return {t, static_cast<int64_t>(r)};
    internalError("attention dim without a source");
  };
  // Each generic numbers its loops by position in `order`; maps translate through it.
  auto remap = [](const AffineMap &m, const std::vector<int> &order) {
    AffineMap out;
    out.numDims = static_cast<int>(order.size());
    for (AffineResult r : m.results) {
      if (!r.isConstant)
        r.value = std::find(order.begin(), order.end(), r.value) - order.begin();
      out.results.push_back(r);
    }
    return out;
  };
  auto concat = [](std::initializer_list<std::vector<int>> parts) {
    std::vector<int> all;
    for (auto &p : parts)
      all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  ElemKind e = init->type.elem;
  std::vector<int> sDims = concat({dims.batch, dims.m, dims.j});
  Type sType = Type::tensor(e, {});
  DimSources sSources;
  for (int d : sDims) {
    auto [t, r] = source(d);
    sType.shape.push_back(t->type.shape[r]);
    sSources.push_back({t, r});
  }
  int sRank = static_cast<int>(sDims.size());
  AffineMap sIdentity = mapOf(sRank, iota(sRank));
  // Scores: S = scale * sum_k Q*K, masked.
  std::vector<int> scoreOrder = concat({sDims, dims.k});
  std::vector<bool> scoreRed(scoreOrder.size(), false);
  for (size_t i = sDims.size(); i < scoreOrder.size(); ++i)
    scoreRed[i] = true;
  Value *zero = b.constantFloat(0.0, e);
  Value *scores = b.generic(
      {q, k}, b.fill(zero, b.empty(sType, sSources)),
      {remap(qm, scoreOrder), remap(km, scoreOrder),
       mapOf(static_cast<int>(scoreOrder.size()), iota(sRank))},
      scoreRed,
      [](Builder &bb, const Args &a) {
        return bb.binary(OpKind::AddF, a[2], bb.binary(OpKind::MulF, a[0], a[1]));
      },
      "scores");
  Args logitInputs{scores};
  std::vector<AffineMap> logitMaps{sIdentity};
  if (mask) {
    logitInputs.push_back(mask);
    logitMaps.push_back(remap(maps[4].map(), sDims));
  }
  logitMaps.push_back(sIdentity);
  Value *logits = b.generic(
      logitInputs, b.empty(sType, sSources), logitMaps, std::vector<bool>(sRank, false),
      [&](Builder &bb, const Args &a) {
        Value *t = bb.binary(OpKind::MulF, a[0], scale);
        if (!mask)
          return t;
        if (mask->type.elem == ElemKind::I1)
          return bb.select(a[1], t, bb.constantFloat(-std::numeric_limits<double>::infinity(), e));
        return bb.binary(OpKind::AddF, t, a[1]);
      },
      "logits");
  // Softmax over the key dims: row max, then exp and row sum, then normalize.
  int rowRank = static_cast<int>(dims.batch.size() + dims.m.size());
  std::vector<int> rowDims = iota(rowRank);
  Type rowType =
      Type::tensor(e, std::vector<int64_t>(sType.shape.begin(), sType.shape.begin() + rowRank));
  DimSources rowSources(sSources.begin(), sSources.begin() + rowRank);
  std::vector<bool> keyRed(sRank, false);
  for (int i = rowRank; i < sRank; ++i)
    keyRed[i] = true;
  Value *rowMax = b.generic(
      {logits},
      b.fill(b.constantFloat(-std::numeric_limits<double>::infinity(), e),
             b.empty(rowType, rowSources)),
      {sIdentity, mapOf(sRank, rowDims)}, keyRed,
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::MaximumF, a[1], a[0]); },
      "row_max");
  // exp(s - max) once, kept: the row sum and the normalization both read it (fusing it into
  // both would compute every exponential twice).
  Value *exps = b.generic(
      {logits, rowMax}, b.empty(sType, sSources), {sIdentity, mapOf(sRank, rowDims), sIdentity},
      std::vector<bool>(sRank, false),
      [](Builder &bb, const Args &a) {
        return bb.unary(OpKind::Exp, bb.binary(OpKind::SubF, a[0], a[1]));
      },
      "exps");
  Value *rowSum = b.generic(
      {exps}, b.fill(zero, b.empty(rowType, rowSources)), {sIdentity, mapOf(sRank, rowDims)},
      keyRed, [](Builder &bb, const Args &a) { return bb.binary(OpKind::AddF, a[1], a[0]); },
      "row_sum");
  Value *probs = b.generic(
      {exps, rowSum}, b.empty(sType, sSources), {sIdentity, mapOf(sRank, rowDims), sIdentity},
      std::vector<bool>(sRank, false),
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::DivF, a[0], a[1]); }, "probs");
  // Output: O = sum_j P * V, written in O's own layout.
  std::vector<int> outOrder = concat({dims.batch, dims.m, dims.n, dims.j});
  std::vector<bool> outRed(outOrder.size(), false);
  for (size_t i = outOrder.size() - dims.j.size(); i < outOrder.size(); ++i)
    outRed[i] = true;
  AffineMap pMap;
  pMap.numDims = static_cast<int>(outOrder.size());
  for (int d : sDims)
    pMap.results.push_back(
        {false, std::find(outOrder.begin(), outOrder.end(), d) - outOrder.begin()});
  return b.generic(
      {probs, v}, b.fill(zero, init), {pMap, remap(vm, outOrder), remap(om, outOrder)}, outRed,
      [](Builder &bb, const Args &a) {
        return bb.binary(OpKind::AddF, a[2], bb.binary(OpKind::MulF, a[0], a[1]));
      },
      op.result()->name);
}

void generalizeBlock(FuncOp &fn, Block &block) {
  for (size_t i = 0; i < block.ops.size(); ++i) {
    Op &op = *block.ops[i];
    if (op.kind == OpKind::ScfIf || op.kind == OpKind::ScfFor)
      for (auto &region : op.regions)
        generalizeBlock(fn, *region);
    Builder b(block, i, op.loc);
    Value *replacement = nullptr;
    switch (op.kind) {
    case OpKind::LinalgMatmul: replacement = contraction(b, op, 0); break;
    case OpKind::LinalgBatchMatmul: replacement = contraction(b, op, 1); break;
    case OpKind::LinalgTranspose: replacement = transpose(b, op); break;
    case OpKind::LinalgBroadcast: replacement = broadcast(b, op); break;
    case OpKind::LinalgReduce: replacement = reduce(b, op); break;
    case OpKind::LinalgSoftmax: replacement = softmax(b, op); break;
    case OpKind::Gather: replacement = gather(b, op); break;
    case OpKind::Attention: replacement = attention(b, op); break;
    default: continue;
    }
    size_t at = b.position(); // the named op now sits here
    // Errors about the generics it became name the op the author wrote, and the lowering
    // choices set on it hold for each of them.
    for (size_t k = i; k < at; ++k) {
      if (block.ops[k]->kind != OpKind::LinalgGeneric)
        continue;
      block.ops[k]->attrs["origin"] = Attribute{std::string(block.ops[at]->name())};
      if (block.ops[at]->hasAttr(kConfigAttr))
        block.ops[k]->attrs[kConfigAttr] = block.ops[at]->attr(kConfigAttr);
    }
    replaceAllUses(*fn.body, block.ops[at]->result(), replacement);
    block.ops.erase(block.ops.begin() + at);
    i = at - 1;
  }
}

} // namespace

void generalizeNamedOps(FuncOp &fn) {
  if (fn.body)
    generalizeBlock(fn, *fn.body);
}

} // namespace frank
