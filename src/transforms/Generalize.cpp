// Named ops to linalg.generic.
#include "transforms/Generalize.h"
#include "ir/Builder.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "loops/Strategy.h"
#include "transforms/CausalMask.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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
  std::vector<AffineMap> maps = {with({m, k}), with({k, nn}), with({m, nn})};
  std::vector<bool> red(n, false);
  red[k] = true;
  if (op.hasAttr("indexing_maps")) {
    // Explicit maps (transposed operands): the dim the output leaves out is the reduction.
    const AttrList &explicitMaps = op.attr("indexing_maps").list();
    for (size_t i = 0; i < 3; ++i)
      maps[i] = explicitMaps[i].map();
    std::fill(red.begin(), red.end(), true);
    for (const AffineResult &r : maps[2].results)
      red[r.value] = false;
  }
  // Float operands of another type are cast to the output's first (the verifier allows only
  // those): extf, as of bf16 weights, or truncf.
  const ElemKind outElem = c->type.elem;
  auto castToOutput = [outElem](Builder &bb, Value *v) {
    if (v->type.elem == outElem)
      return v;
    return bb.cast(elemBits(v->type.elem) < elemBits(outElem) ? OpKind::ExtF : OpKind::TruncF, v,
                   outElem);
  };
  return b.generic(
      {a, bm}, c, maps, red,
      [&](Builder &bb, const Args &x) {
        return bb.binary(OpKind::AddF, x[2],
                         bb.binary(OpKind::MulF, castToOutput(bb, x[0]), castToOutput(bb, x[1])));
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
  // 16-bit softmax computes in f32 from x - max on (the max is exact either way) and rounds
  // once: an f16 sum of ones stops at 2048, a bf16 one at 256 (a row of 3000 zeros had come out
  // as 1/2048 each), and a bf16 x - max or exp rounded on the way was 2% off.
  const ElemKind e = x->type.elem;
  const bool narrow = e == ElemKind::F16 || e == ElemKind::BF16;
  auto widened = [&](Builder &bb, Value *v) {
    return narrow ? bb.cast(OpKind::ExtF, v, ElemKind::F32) : v;
  };
  Type expType = x->type;
  if (narrow)
    expType.elem = ElemKind::F32;
  // exp(x - max) once, kept for both the sum and the normalization.
  Value *exps = b.generic(
      {x, max}, b.empty(expType, sources), {mapOf(n, iota(n)), mapOf(n, kept), mapOf(n, iota(n))},
      std::vector<bool>(n, false),
      [&](Builder &bb, const Args &a) {
        return bb.unary(OpKind::Exp, bb.binary(OpKind::SubF, widened(bb, a[0]), widened(bb, a[1])));
      },
      "softmax_exp");
  Value *sum = reduceOver(
      b, exps, d, 0.0, {},
      [](Builder &bb, const Args &a) { return bb.binary(OpKind::AddF, a[1], a[0]); },
      "softmax_sum");
  return b.generic(
      {exps, sum}, op.operands[1], {mapOf(n, iota(n)), mapOf(n, kept), mapOf(n, iota(n))},
      std::vector<bool>(n, false),
      [&](Builder &bb, const Args &a) {
        Value *p = bb.binary(OpKind::DivF, a[0], a[1]);
        return narrow ? bb.cast(OpKind::TruncF, p, e) : p;
      },
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
        Value *element = bb.extract(src, coords);
        // The output's slices are the source's whole slices (as IREE verifies): its slice
        // loops must span the source's dims, not only fit in them.
        element->definingOp->attrs[kWholeSliceAttr] = Attribute{int64_t{1}};
        return element;
      },
      op.result()->name);
}

// Attention roles, inferred from which operands use each dim (MLIR-SUBSET.md §4.6).
struct AttentionDims {
  std::vector<int> batch, m, k, j, n;
};

AttentionDims attentionDims(const Op &op) {
  const AttrList &maps = op.attr("indexing_maps").list();
  const AffineMap &qm = maps[0].map(), &km = maps[1].map(), &vm = maps[2].map();
  const AffineMap &om = maps.back().map();
  auto uses = [](const AffineMap &m, int d) {
    return std::any_of(m.results.begin(), m.results.end(),
                       [&](const AffineResult &r) { return !r.isConstant && r.value == d; });
  };
  AttentionDims dims;
  for (int d = 0; d < qm.numDims; ++d) {
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
  return dims;
}

// Where attention dim `d` can be measured: (operand, position in its map), the first of Q, K
// and V, each with its map, that names it.
using MappedOperands = std::initializer_list<std::pair<const AffineMap *, Value *>>;
std::optional<std::pair<Value *, int64_t>> dimSource(MappedOperands operands, int d) {
  for (auto [map, operand] : operands)
    for (size_t r = 0; r < map->results.size(); ++r)
      if (!map->results[r].isConstant && map->results[r].value == d)
        return std::pair{operand, static_cast<int64_t>(r)};
  return std::nullopt;
}

// The size of attention dim `d` when it is static in each of Q, K and V that reads it: one that
// is a runtime value in V alone (partial specialization) had V split into chunks of a size its
// keys need not have.
std::optional<int64_t> staticAttentionDim(const Op &op, int d) {
  const AttrList &maps = op.attr("indexing_maps").list();
  std::optional<int64_t> size;
  for (int i = 0; i < 3; ++i) {
    const AffineMap &map = maps[size_t(i)].map();
    for (size_t r = 0; r < map.results.size(); ++r)
      if (!map.results[r].isConstant && map.results[r].value == d) {
        if (op.operands[size_t(i)]->type.shape[r] == kDynamic)
          return std::nullopt;
        size = op.operands[size_t(i)]->type.shape[r];
      }
  }
  return size;
}

// The points of attention dims `ds` when their sizes are static.
std::optional<int64_t> staticAttentionSize(const Op &op, const std::vector<int> &ds) {
  int64_t points = 1;
  for (int d : ds) {
    std::optional<int64_t> size = staticAttentionDim(op, d);
    if (!size)
      return std::nullopt;
    points *= *size;
  }
  return points;
}

// Decode attention splits its keys into chunks: a handful of queries per KV head reads every
// key once, so the kernel streams K and V, and which thread reads which bytes decides its speed.
// Over heads, each thread reads 512 of every 4 KiB key row ([Skv, Hkv, D] with Hkv = 8,
// D = 128), so it fills half the sets of its L2: S6's 4 MiB of K and V, read by two threads
// this way, take 80-88 µs a call against 33-38 µs over halves of the keys (all heads of a key
// on one thread), on a 2-core Xeon with 2 MiB of L2 a core. The chunks are the outer, parallel
// loop, so the threads take runs of whole key rows. At least 256 keys a chunk: S6 in 2 chunks
// ran 63.8-64.9 µs against 68.3-69.5 in 8 chunks of 64 (one process, alternating), each chunk
// and head restarting the Q·K nest's prefetch 16 keys ahead and its P·V tiles; up to 8 chunks
// leave work for more threads over longer caches. At most 16 queries a KV head: decode, or a
// few positions at once; with more, each key row serves enough products that the tiles are
// compute-bound, and the combine's pass over every chunk's [queries, D] output would cost more
// (prefill, S5, keeps its loop over the heads; the bound itself is not measured).
constexpr int64_t kMaxSplitQueries = 16;
constexpr int64_t kMaxKeyChunks = 8;
constexpr int64_t kMinChunkKeys = 256;

// How many pieces (chunks of keys, blocks of queries) an attention op runs in, and why, for
// --explain.
struct Pieces {
  int64_t count = 1;
  std::string why;
  std::string explained() const { return count > 1 ? why : "one piece: " + why; }
};

// One piece because of `why`: an error, naming where it was set (`origin`: --config or the
// op's attribute), where `forced` (`<key>=N`) asked for more.
Pieces unsplit(const Op &op, const char *key, std::optional<int64_t> forced,
               const std::string &origin, const std::string &why) {
  if (forced && *forced > 1)
    fail(op.loc,
         fmt::format("{}: {}={} does not fit this attention: {}", origin, key, *forced, why));
  return Pieces{1, why};
}

// `forced` (`key-chunks=N`) sets the count wherever the keys split into N whole chunks.
Pieces keyChunksFor(const Op &op, const AttentionDims &dims, std::optional<int64_t> forced,
                    const std::string &origin) {
  auto onePiece = [&](const std::string &why) {
    return unsplit(op, "key-chunks", forced, origin, why);
  };
  if (forced == 1)
    return {1, "key-chunks=1"};
  bool hasMask = op.attr("num_inputs").integer() == 5;
  if (hasMask) // a chunk whose keys the mask hides all would have no softmax of its own
    return onePiece("it has a mask");
  if (dims.j.size() != 1)
    return onePiece("its keys are several dims");
  for (int d : dims.batch)
    if (!staticAttentionDim(op, d)) // the combine views its rows as one dim of a static size
      return onePiece("a batch or head count is a runtime value");
  std::optional<int64_t> queries = staticAttentionSize(op, dims.m);
  if (!queries)
    return onePiece("the query count is a runtime value");
  std::optional<int64_t> keys = staticAttentionDim(op, dims.j[0]);
  if (!keys)
    return onePiece("the key count is a runtime value");
  auto split = [&](int64_t chunks, const char *how) {
    return Pieces{chunks, fmt::format("{} chunks of {} keys ({}; {} queries a KV head)", chunks,
                                      *keys / chunks, how, *queries)};
  };
  if (forced) {
    if (*keys % *forced != 0)
      return onePiece(fmt::format("{} keys do not split into {} whole chunks", *keys, *forced));
    return split(*forced, "key-chunks");
  }
  if (*queries > kMaxSplitQueries)
    return onePiece(
        fmt::format("{} queries a KV head (at most {} split)", *queries, kMaxSplitQueries));
  for (int64_t chunks = kMaxKeyChunks; chunks >= 2; chunks /= 2)
    if (*keys % chunks == 0 && *keys / chunks >= kMinChunkKeys)
      return split(chunks, "decode");
  return onePiece(
      fmt::format("{} keys make no 2, 4 or 8 whole chunks of {} or more", *keys, kMinChunkKeys));
}

// Prefill attention with many queries a KV head runs them in blocks: each block's scores,
// softmax and P·V, one after another, while its rows of scores are in L2, instead of every
// row's scores (a KV head's 2048 queries by 512 keys: 4 MiB, four temporaries of it) streaming
// through memory between the steps. The blocks are the outer, parallel loop. A block's scores
// take at most 1 MiB, half of the Xeon's L2 (the fewest blocks that divide the queries): 512
// positions (32 heads, 8 KV heads, D = 128) took 14.5 ms in 4 blocks, 15.4 in 16 and 15.5-17.0
// in one piece; 1024 positions 65.0 ms in 8 or 16 blocks, 66.0 in 32 and 80.8 in one piece.
// Each block packs its KV head's keys again, which fewer, larger blocks pay less often.
constexpr int64_t kMaxBlockScoreBytes = 1 << 20;

Pieces queryBlocksFor(const Op &op, const AttentionDims &dims, int64_t keyChunks,
                      std::optional<int64_t> forced, const std::string &origin) {
  auto onePiece = [&](const std::string &why) {
    return unsplit(op, "query-blocks", forced, origin, why);
  };
  if (forced == 1)
    return {1, "query-blocks=1"};
  if (keyChunks > 1)
    return onePiece("its keys split into chunks");
  if (dims.m.size() != 1)
    return onePiece("its queries are several dims");
  // The blocks are views of Q, the mask and the output, which need their sizes.
  const bool hasMask = op.attr("num_inputs").integer() == 5;
  for (const Value *t :
       {op.operands[0], hasMask ? op.operands[4] : op.operands[0], op.operands.back()})
    if (!t->type.hasStaticShape())
      return onePiece(fmt::format("'%{}' has a runtime size", t->name));
  std::optional<int64_t> queries = staticAttentionDim(op, dims.m[0]);
  if (!queries)
    return onePiece("the query count is a runtime value");
  std::optional<int64_t> keys = staticAttentionSize(op, dims.j);
  if (!keys)
    return onePiece("the key count is a runtime value");
  const int64_t rowBytes = *keys * (elemBits(op.result()->type.elem) / 8);
  auto split = [&](int64_t blocks, const char *how) {
    return Pieces{blocks, fmt::format("{} blocks of {} queries ({}; {} keys)", blocks,
                                      *queries / blocks, how, *keys)};
  };
  if (forced) {
    if (*queries % *forced != 0)
      return onePiece(
          fmt::format("{} queries do not split into {} whole blocks", *queries, *forced));
    return split(*forced, "query-blocks");
  }
  if (*queries * rowBytes <= kMaxBlockScoreBytes)
    return onePiece(fmt::format("the scores of {} queries by {} keys fit in {} KiB", *queries,
                                *keys, kMaxBlockScoreBytes >> 10));
  for (int64_t blocks = 2; blocks <= *queries; ++blocks)
    if (*queries % blocks == 0 && *queries / blocks * rowBytes <= kMaxBlockScoreBytes)
      return split(blocks, "prefill");
  return onePiece(fmt::format("no whole block of queries by {} keys fits in {} KiB", *keys,
                              kMaxBlockScoreBytes >> 10));
}

// The reassociation that splits dim `r` of a rank `rank` tensor in two.
std::vector<std::vector<int64_t>> splitGroups(int64_t rank, size_t r) {
  std::vector<std::vector<int64_t>> groups;
  for (int64_t i = 0, next = 0; i < rank; ++i) {
    groups.push_back({next++});
    if (i == static_cast<int64_t>(r))
      groups.back().push_back(next++);
  }
  return groups;
}

// `t` with its dim that attention dim `d` indexes split into [parts, size / parts], a view, and
// its map, where dim `part` (a new loop dim) indexes the parts: K and V's chunks of keys, or Q's,
// the mask's and the output's blocks of queries.
std::pair<Value *, AffineMap> splitDim(Builder &b, Value *t, const AffineMap &map, int d, int part,
                                       int64_t parts, const std::string &suffix) {
  size_t r = 0;
  while (map.results[r].isConstant || map.results[r].value != d)
    ++r;
  Type to = t->type;
  to.shape[r] /= parts;
  to.shape.insert(to.shape.begin() + static_cast<long>(r), parts);
  AffineMap split = map;
  split.numDims = part + 1;
  split.results.insert(split.results.begin() + static_cast<long>(r), AffineResult{false, part});
  return {b.reshape(t, splitGroups(t->type.rank(), r), to, t->name + suffix), split};
}

// The keys an attention's i1 mask (`maskMap` over attention dims) keeps, when it is causal
// (CausalMask.h).
std::optional<CausalBound> causalBoundFor(const Value &mask, const AffineMap &maskMap,
                                          const AttentionDims &dims) {
  if (mask.type.elem != ElemKind::I1 || dims.m.size() != 1 || dims.j.size() != 1)
    return std::nullopt;
  // The mask's dims that are the query and the key (-1: none).
  auto maskDimOf = [&](int d) {
    for (size_t r = 0; r < maskMap.results.size(); ++r)
      if (!maskMap.results[r].isConstant && maskMap.results[r].value == d)
        return int(r);
    return -1;
  };
  const int query = maskDimOf(dims.m[0]), key = maskDimOf(dims.j[0]);
  if (query < 0 || key < 0)
    return std::nullopt;
  return causalBoundOf(mask, query, key);
}

// `x` as float type `to`: extended, truncated or as it is.
Value *convertFloat(Builder &b, Value *x, ElemKind to) {
  if (x->type.elem == to)
    return x;
  return b.cast(elemBits(to) > elemBits(x->type.elem) ? OpKind::ExtF : OpKind::TruncF, x, to);
}

// The attention's score region applied to natural-log logit `t`. The region sees f32 logits in
// log2 units whatever the attention's element type (MLIR-SUBSET.md §4.6, as IREE's
// decomposition computes them), so a tanh soft-cap's meaning depends on it: region(t · log2 e)
// · ln 2.
Value *applyScoreRegion(Builder &b, const Block &region, Value *t) {
  const ElemKind e = t->type.elem, r = region.arguments[0]->type.elem;
  Value *log2Units = b.binary(OpKind::MulF, convertFloat(b, t, r), b.constantFloat(M_LOG2E, r));
  ValueMap map{{region.arguments[0].get(), log2Units}};
  for (const auto &regionOp : region.ops)
    if (regionOp.get() != region.terminator())
      b.insert(cloneOp(*regionOp, map));
  Value *yielded = region.terminator()->operands[0];
  auto it = map.find(yielded);
  return convertFloat(
      b, b.binary(OpKind::MulF, it == map.end() ? yielded : it->second, b.constantFloat(M_LN2, r)),
      e);
}

// Attention as generics: scores (Q·K) scaled and masked, row max, exp, row sum, then P·V. With
// `keyChunks` > 1 (chooseKeyChunks) every step up to P·V runs per chunk of keys, a new outermost
// dim, and P·V stays unnormalized; a combine then weighs each chunk's output by
// exp(chunk max - max) over the sum of the chunks' weighted row sums.
Value *attention(Builder &b, Op &op, int64_t keyChunks, int64_t queryBlocks) {
  const AttrList &maps = op.attr("indexing_maps").list();
  bool hasMask = op.attr("num_inputs").integer() == 5;
  Value *q = op.operands[0], *k = op.operands[1], *v = op.operands[2], *scale = op.operands[3];
  Value *mask = hasMask ? op.operands[4] : nullptr;
  Value *init = op.operands.back();
  const Block &region = *op.regions[0];
  const bool identityRegion =
      region.ops.size() == 1 && region.ops[0]->operands[0] == region.arguments[0].get();
  AffineMap qm = maps[0].map(), km = maps[1].map(), vm = maps[2].map(), om = maps.back().map();
  AffineMap maskMap = mask ? maps[4].map() : AffineMap{};
  AttentionDims dims = attentionDims(op);
  const bool split = keyChunks > 1, blocked = queryBlocks > 1;
  const int chunk = qm.numDims; // the chunks' or the query blocks' dim
  std::vector<int> chunkDims = split || blocked ? std::vector<int>{chunk} : std::vector<int>{};
  if (split) {
    std::tie(k, km) = splitDim(b, k, km, dims.j[0], chunk, keyChunks, "_chunks");
    std::tie(v, vm) = splitDim(b, v, vm, dims.j[0], chunk, keyChunks, "_chunks");
    qm.numDims = chunk + 1;
  }
  // A causal mask's keys: every step but the normalization may skip the keys it hides, and the
  // mask itself is computed where it is read, from the indices.
  std::optional<CausalBound> causal = mask ? causalBoundFor(*mask, maskMap, dims) : std::nullopt;
  if (causal && causal->runtime() && (split || blocked))
    causal.reset();     // over runtime sizes the keys and queries stay whole
  Value *target = init; // what P·V writes: the output, or its blocks of queries
  if (blocked) {
    std::tie(q, qm) = splitDim(b, q, qm, dims.m[0], chunk, queryBlocks, "_blocks");
    std::tie(target, om) = splitDim(b, init, om, dims.m[0], chunk, queryBlocks, "_blocks");
    if (mask && !causal) // a causal mask is computed where it is read
      std::tie(mask, maskMap) =
          splitDim(b, mask, maskMap, dims.m[0], chunk, queryBlocks, "_blocks");
    km.numDims = vm.numDims = chunk + 1;
  }
  // Where each attention dim can be measured, through the split maps when split.
  auto source = [&](int d) {
    auto at = dimSource({{&qm, q}, {&km, k}, {&vm, v}}, d);
    if (!at)
      internalError("attention dim without a source");
    return *at;
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
  // The map of a tensor over attention dims `tensorDims` in a generic over `order`.
  auto over = [](const std::vector<int> &order, const std::vector<int> &tensorDims) {
    std::vector<int> positions;
    for (int d : tensorDims)
      positions.push_back(
          static_cast<int>(std::find(order.begin(), order.end(), d) - order.begin()));
    return mapOf(static_cast<int>(order.size()), positions);
  };
  auto concat = [](std::initializer_list<std::vector<int>> parts) {
    std::vector<int> all;
    for (auto &p : parts)
      all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  // A tensor over attention dims `tensorDims`, each sized from its source.
  ElemKind e = init->type.elem;
  auto emptyOver = [&](const std::vector<int> &tensorDims) {
    Type type = Type::tensor(e, {});
    DimSources sources;
    for (int d : tensorDims) {
      auto [t, r] = source(d);
      type.shape.push_back(t->type.shape[r]);
      sources.push_back({t, r});
    }
    return b.empty(type, sources);
  };
  // The iterator types of a generic over `order` whose last `reduced` dims are reductions.
  auto reductionFlags = [](const std::vector<int> &order, size_t reduced) {
    std::vector<bool> red(order.size(), false);
    std::fill(red.end() - static_cast<long>(reduced), red.end(), true);
    return red;
  };
  auto sum = [](Builder &bb, const Args &a) { return bb.binary(OpKind::AddF, a[1], a[0]); };
  auto weightedSum = [](Builder &bb, const Args &a) {
    return bb.binary(OpKind::AddF, a[2], bb.binary(OpKind::MulF, a[0], a[1]));
  };
  auto expOfDifference = [](Builder &bb, const Args &a) {
    return bb.unary(OpKind::Exp, bb.binary(OpKind::SubF, a[0], a[1]));
  };
  auto max = [](Builder &bb, const Args &a) { return bb.binary(OpKind::MaximumF, a[1], a[0]); };
  Value *zero = b.constantFloat(0.0, e);
  Value *minusInf = b.constantFloat(-std::numeric_limits<double>::infinity(), e);

  // Scores: S = scale * sum_k Q*K, masked.
  std::vector<int> sDims = concat({chunkDims, dims.batch, dims.m, dims.j});
  std::vector<int> rowDims = concat({chunkDims, dims.batch, dims.m});
  std::vector<int> scoreOrder = concat({sDims, dims.k});
  Value *scores = b.generic({q, k}, b.fill(zero, emptyOver(sDims)),
                            {remap(qm, scoreOrder), remap(km, scoreOrder), over(scoreOrder, sDims)},
                            reductionFlags(scoreOrder, dims.k.size()), weightedSum, "scores");
  // Each generic's loops are its order's attention dims.
  auto loopOf = [](const std::vector<int> &order, int d) {
    return int(std::find(order.begin(), order.end(), d) - order.begin());
  };
  const int64_t blockRows = blocked ? q->type.shape[size_t(source(dims.m[0]).second)] : 0;
  // Over runtime sizes, the mask's period and offset as values computed from the query and key
  // extents (CausalBound), which the generics that compute the mask read.
  Value *period = nullptr, *offset = nullptr;
  if (causal && causal->runtime()) {
    auto [queries, queryAt] = source(dims.m[0]);
    period = causal->periodDivisor ? b.binary(OpKind::DivUI, b.dim(queries, queryAt),
                                              b.constantIndex(causal->periodDivisor))
                                   : b.constantIndex(causal->period);
    offset = b.constantIndex(causal->offset);
    if (causal->keyCoef) {
      auto [keys, at] = source(dims.j[0]);
      offset = b.binary(OpKind::AddI, offset,
                        b.binary(OpKind::MulI, b.dim(keys, at), b.constantIndex(causal->keyCoef)));
    }
    if (causal->periodCoef)
      offset = b.binary(OpKind::AddI, offset,
                        b.binary(OpKind::MulI, period, b.constantIndex(causal->periodCoef)));
  }
  // A causal mask's value at a point of a generic over `order`, from its indices as the mask's
  // own generic computes it: nothing reads the mask then, and it is never made.
  auto keepAt = [&](Builder &bb, const std::vector<int> &order) {
    Value *query = bb.linalgIndex(loopOf(order, dims.m[0]));
    if (blocked)
      query = bb.binary(OpKind::AddI,
                        bb.binary(OpKind::MulI, bb.linalgIndex(loopOf(order, chunk)),
                                  bb.constantIndex(blockRows)),
                        query);
    Value *last = bb.binary(
        OpKind::AddI,
        bb.binary(OpKind::RemUI, query, period ? period : bb.constantIndex(causal->period)),
        offset ? offset : bb.constantIndex(causal->offset));
    return bb
        .create(OpKind::CmpI, {bb.linalgIndex(loopOf(order, dims.j[0])), last},
                {Type::scalar(ElemKind::I1)}, {{"predicate", Attribute{std::string("sle")}}})
        ->result();
  };
  Args logitInputs{scores};
  std::vector<AffineMap> logitMaps{over(sDims, sDims)};
  if (mask && !causal) {
    logitInputs.push_back(mask);
    logitMaps.push_back(remap(maskMap, sDims));
  }
  logitMaps.push_back(over(sDims, sDims));
  std::vector<bool> elementwise(sDims.size(), false);
  Value *logits = b.generic(
      logitInputs, emptyOver(sDims), logitMaps, elementwise,
      [&](Builder &bb, const Args &a) {
        Value *t = bb.binary(OpKind::MulF, a[0], convertFloat(bb, scale, e));
        if (!identityRegion)
          t = applyScoreRegion(bb, region, t);
        if (!mask)
          return t;
        if (mask->type.elem == ElemKind::I1)
          return bb.select(causal ? keepAt(bb, sDims) : a[1], t,
                           bb.constantFloat(-std::numeric_limits<double>::infinity(), e));
        return bb.binary(OpKind::AddF, t, a[1]);
      },
      "logits");
  // Softmax over the key dims: row max, then exp and row sum, then normalize.
  std::vector<bool> keyRed = reductionFlags(sDims, dims.j.size());
  Value *rowMax = b.generic({logits}, b.fill(minusInf, emptyOver(rowDims)),
                            {over(sDims, sDims), over(sDims, rowDims)}, keyRed, max,
                            split ? "chunk_max" : "row_max");
  // exp(s - max) once, kept: the row sum and the normalization both read it (fusing it into
  // both would compute every exponential twice).
  Value *exps = b.generic({logits, rowMax}, emptyOver(sDims),
                          {over(sDims, sDims), over(sDims, rowDims), over(sDims, sDims)},
                          elementwise, expOfDifference, "exps");
  Value *rowSum = b.generic({exps}, b.fill(zero, emptyOver(rowDims)),
                            {over(sDims, sDims), over(sDims, rowDims)}, keyRed, sum,
                            split ? "chunk_sum" : "row_sum");
  Value *probs = exps;
  // P·V reads a tile's keys past a row's own: 0 there, whatever exps holds, divided by the row's
  // sum like the rest. So a row that sees no key (its sum 0) is NaN, as a mask given as data
  // makes it (§4.6), not 0.
  if (causal)
    probs = b.generic(
        {exps, rowSum}, emptyOver(sDims),
        {over(sDims, sDims), over(sDims, rowDims), over(sDims, sDims)}, elementwise,
        [&](Builder &bb, const Args &a) {
          return bb.binary(OpKind::DivF, bb.select(keepAt(bb, sDims), a[0], zero), a[1]);
        },
        "probs");
  else if (!split)
    probs = b.generic(
        {exps, rowSum}, emptyOver(sDims),
        {over(sDims, sDims), over(sDims, rowDims), over(sDims, sDims)}, elementwise,
        [](Builder &bb, const Args &a) { return bb.binary(OpKind::DivF, a[0], a[1]); }, "probs");
  // O = sum_j P * V: in O's own layout, or per chunk.
  std::vector<int> outOrder = concat({chunkDims, dims.batch, dims.m, dims.n, dims.j});
  std::vector<int> partDims = concat({chunkDims, dims.batch, dims.m, dims.n});
  Value *outInit = b.fill(zero, split ? emptyOver(partDims) : target);
  AffineMap outMap = split ? over(outOrder, partDims) : remap(om, outOrder);
  Value *out = b.generic({probs, v}, outInit, {over(outOrder, sDims), remap(vm, outOrder), outMap},
                         reductionFlags(outOrder, dims.j.size()), weightedSum,
                         split ? "chunk_out" : op.result()->name);
  if (causal) {
    for (auto [value, order] : {std::pair<Value *, const std::vector<int> *>{scores, &scoreOrder},
                                {logits, &sDims},
                                {rowMax, &sDims},
                                {exps, &sDims},
                                {rowSum, &sDims},
                                {out, &outOrder}})
      setVisibleKeys(*value->definingOp,
                     {loopOf(*order, dims.m[0]), loopOf(*order, dims.j[0]), causal->period,
                      causal->offset, blocked ? loopOf(*order, chunk) : -1, blockRows,
                      causal->periodDivisor, causal->keyCoef, causal->periodCoef});
  }
  if (blocked) {
    const AffineMap &whole = maps.back().map();
    size_t r = 0;
    while (whole.results[r].isConstant || whole.results[r].value != dims.m[0])
      ++r;
    return b.reshape(out, splitGroups(init->type.rank(), r), init->type, op.result()->name);
  }
  if (!split)
    return out;

  // The combine: max over the chunks, each chunk's weight exp(chunk max - max) (one
  // exponential a chunk and query row, kept), the sum of the weighted chunk sums (at least 1:
  // the chunk that holds the max adds its own row sum, which counts exp(0)), then
  // O = sum over the chunks of weight / that sum * chunk output. Up to that last sum, it runs
  // over the query rows of all heads as one dim (views), which its nests vectorize along.
  const Type &rowsType = rowMax->type; // [chunks, batch..., m...], static (keyChunksFor)
  int64_t queries = 1;
  for (int64_t d = 1; d < rowsType.rank(); ++d)
    queries *= rowsType.shape[d];
  Type chunkRowsType = Type::tensor(e, {keyChunks, queries}),
       queryRowsType = Type::tensor(e, {queries});
  std::vector<std::vector<int64_t>> chunkThenRows{{0}, {}};
  for (int64_t d = 1; d < rowsType.rank(); ++d)
    chunkThenRows[1].push_back(d);
  Value *chunkMax = b.reshape(rowMax, chunkThenRows, chunkRowsType, rowMax->name + "_rows");
  Value *chunkSum = b.reshape(rowSum, chunkThenRows, chunkRowsType, rowSum->name + "_rows");
  // Generics over (query, chunk), reducing the chunks, and over (chunk, query).
  const AffineMap byQuery = mapOf(2, {1, 0}), query = mapOf(2, {0});
  const AffineMap byChunk = mapOf(2, {0, 1}), queryOfChunk = mapOf(2, {1});
  const std::vector<bool> overChunks{false, true}, elementwise2d{false, false};
  Value *rowMaxAll = b.generic({chunkMax}, b.fill(minusInf, b.empty(queryRowsType, {})),
                               {byQuery, query}, overChunks, max, "row_max");
  Value *chunkWeights =
      b.generic({chunkMax, rowMaxAll}, b.empty(chunkRowsType, {}), {byChunk, queryOfChunk, byChunk},
                elementwise2d, expOfDifference, "chunk_weights");
  Value *denominator = b.generic({chunkWeights, chunkSum}, b.fill(zero, b.empty(queryRowsType, {})),
                                 {byQuery, byQuery, query}, overChunks, weightedSum, "row_sum");
  Value *shares = b.generic(
      {chunkWeights, denominator}, b.empty(chunkRowsType, {}), {byChunk, queryOfChunk, byChunk},
      elementwise2d, [](Builder &bb, const Args &a) { return bb.binary(OpKind::DivF, a[0], a[1]); },
      "chunk_shares");
  Value *weights = b.reshape(shares, chunkThenRows, rowsType, shares->name + "_rows");
  std::vector<int> finalOrder = concat({dims.batch, dims.m, dims.n, chunkDims});
  return b.generic({weights, out}, b.fill(zero, init),
                   {over(finalOrder, rowDims), over(finalOrder, partDims), remap(om, finalOrder)},
                   reductionFlags(finalOrder, 1), weightedSum, op.result()->name);
}

// Which named ops a walk generalizes: all of them at once (generic mode), or attention apart,
// after specialization, when the sizes that decide its key chunks are known.
enum class Ops { All, AllButAttention, Attention };

// Attention's hand-set choices and the account of its chunks (generalizeAttention).
struct AttentionChoices {
  const loops::ConfigOverride *config = nullptr;
  std::vector<std::string> *explain = nullptr;
};

// `x` converted elementwise to `to` (extf or truncf) into `into`, or a fresh tensor.
Value *convertedTensor(Builder &b, Value *x, ElemKind to, Value *into, const std::string &name) {
  const int n = static_cast<int>(x->type.rank());
  if (!into) {
    Type type = x->type;
    type.elem = to;
    DimSources sources;
    for (int d = 0; d < n; ++d)
      sources.push_back({x, d});
    into = b.empty(type, sources);
  }
  return b.generic(
      {x}, into, {mapOf(n, iota(n)), mapOf(n, iota(n))}, std::vector<bool>(n, false),
      [&](Builder &bb, const Args &a) { return convertFloat(bb, a[0], to); }, name);
}

// 16-bit attention computes in f32: Q, K, V (and a float mask) widened, the output narrowed
// once. In f16 the row sums of 4096 keys stopped at 2048 and P·V's small steps were lost, so
// generic mode returned twice the mean of V.
Value *attentionInF32(Builder &b, Op &op, int64_t keyChunks, int64_t queryBlocks) {
  const std::vector<Value *> operands = op.operands;
  Value *init = op.operands.back();
  for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(4)})
    if (i + 1 < op.operands.size() && isFloatElem(op.operands[i]->type.elem))
      op.operands[i] =
          convertedTensor(b, op.operands[i], ElemKind::F32, nullptr, op.operands[i]->name + "_f32");
  Type wide = init->type;
  wide.elem = ElemKind::F32;
  DimSources sources;
  for (int64_t d = 0; d < wide.rank(); ++d)
    sources.push_back({init, d});
  op.operands.back() = b.empty(wide, sources);
  Value *out = attention(b, op, keyChunks, queryBlocks);
  op.operands = operands;
  return convertedTensor(b, out, init->type.elem, init, op.result()->name);
}

// The chunks of keys and blocks of queries `op` runs in, from the function's config and the
// op's own attribute.
std::pair<int64_t, int64_t> choosePieces(const Op &op, const AttentionChoices &choices) {
  loops::ConfigOverride config = choices.config ? *choices.config : loops::ConfigOverride{};
  if (op.hasAttr(kConfigAttr))
    config = config.overriddenBy(loops::parseConfig(op.attr(kConfigAttr).string(), kConfigAttr));
  const AttentionDims dims = attentionDims(op);
  Pieces chunks = keyChunksFor(op, dims, config.keyChunks, config.origin);
  Pieces blocks = queryBlocksFor(op, dims, chunks.count, config.queryBlocks, config.origin);
  if (choices.explain) {
    choices.explain->push_back(
        fmt::format("{} at {}: queries in {}", op.name(), op.loc.str(), blocks.explained()));
    choices.explain->push_back(
        fmt::format("{} at {}: keys in {}", op.name(), op.loc.str(), chunks.explained()));
  }
  return {chunks.count, blocks.count};
}

void generalizeBlock(FuncOp &fn, Block &block, Ops which, const AttentionChoices &choices = {}) {
  for (size_t i = 0; i < block.ops.size(); ++i) {
    Op &op = *block.ops[i];
    if (op.kind == OpKind::ScfIf || op.kind == OpKind::ScfFor)
      for (auto &region : op.regions)
        generalizeBlock(fn, *region, which, choices);
    if ((op.kind == OpKind::Attention) != (which == Ops::Attention) && which != Ops::All)
      continue;
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
    case OpKind::Attention: {
      auto [chunks, blocks] =
          which == Ops::Attention ? choosePieces(op, choices) : std::pair<int64_t, int64_t>{1, 1};
      const ElemKind e = op.operands.back()->type.elem;
      replacement = e == ElemKind::F16 || e == ElemKind::BF16
                        ? attentionInF32(b, op, chunks, blocks)
                        : attention(b, op, chunks, blocks);
      break;
    }
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

void generalizeNamedOps(FuncOp &fn, bool attention) {
  if (fn.body)
    generalizeBlock(fn, *fn.body, attention ? Ops::All : Ops::AllButAttention);
}

void generalizeAttention(FuncOp &fn, const loops::ConfigOverride &config,
                         std::vector<std::string> *explain) {
  if (fn.body)
    generalizeBlock(fn, *fn.body, Ops::Attention, {&config, explain});
}

} // namespace frank
