// The verifier.
#include "ir/Verifier.h"
#include "ir/Ops.h"

namespace frank {
namespace {

// What a region holds: tensor ops (function bodies, dispatch regions, scf at function scope)
// or only scalar ops (generic, reduce, topk and attention bodies, and scf inside them).
struct RegionContext {
  bool scalarOnly = false;
  OpKind terminator = OpKind::Return;
  const Op *generic = nullptr; // the enclosing linalg.generic, for linalg.index
  const Op *owner = nullptr;   // the op whose region this is (null for a function body)
};

void verifyBlock(const Block &block, const RegionContext &context);

void verifyTerminator(const Block &block, OpKind want, const std::vector<Type> &types,
                      const Location &ownerLoc, const std::string &owner, bool optional = false) {
  const Op *term = block.terminator();
  if (!term || term->kind != want) {
    if (optional && types.empty())
      return;
    fail(term ? term->loc : ownerLoc, fmt::format("{} must end with '{}'", owner, opName(want)));
  }
  if (term->operands.size() != types.size())
    fail(term->loc, fmt::format("'{}' returns {} value{} but {} expects {}", term->name(),
                                term->operands.size(), term->operands.size() == 1 ? "" : "s", owner,
                                types.size()));
  for (size_t i = 0; i < types.size(); ++i)
    if (term->operands[i]->type != types[i])
      fail(term->loc,
           fmt::format("'{}' operand #{} has type '{}' but {} expects '{}'", term->name(), i,
                       term->operands[i]->type.str(), owner, types[i].str()));
}

void verifyRegion(const Op &op, int region, RegionContext context, std::vector<Type> yields,
                  bool optionalTerminator = false) {
  const Block &block = *op.regions[region];
  context.owner = &op;
  verifyBlock(block, context);
  verifyTerminator(block, context.terminator, yields, op.loc,
                   fmt::format("the '{}' {}", op.name(), context.scalarOnly ? "body" : "region"),
                   optionalTerminator);
}

void verifyGeneric(const Op &op) {
  GenericView g{const_cast<Op &>(op)};
  const AttrList &maps = op.attr("indexing_maps").list();
  const AttrList &iters = op.attr("iterator_types").list();
  if (maps.size() != op.operands.size())
    fail(op.loc,
         fmt::format("'linalg.generic' has {} operand{} but {} indexing map{}", op.operands.size(),
                     op.operands.size() == 1 ? "" : "s", maps.size(), maps.size() == 1 ? "" : "s"));
  int numLoops = static_cast<int>(iters.size());
  std::vector<bool> indexedPlainly(numLoops, false);
  for (size_t i = 0; i < maps.size(); ++i) {
    const AffineMap &map = maps[i].map();
    const Type &type = op.operands[i]->type;
    if (map.numDims != numLoops)
      fail(op.loc, fmt::format("indexing map #{} has {} dims but there are {} iterator types", i,
                               map.numDims, numLoops));
    int64_t rank = type.isTensor() ? type.rank() : 0;
    if (static_cast<int64_t>(map.results.size()) != rank)
      fail(op.loc, fmt::format("indexing map #{} has {} results but operand #{} ('{}') has rank {}",
                               i, map.results.size(), i, type.str(), rank));
    for (size_t r = 0; r < map.results.size(); ++r) {
      const AffineResult &res = map.results[r];
      if (!res.isConstant) {
        indexedPlainly[res.value] = true;
        continue;
      }
      int64_t dim = type.shape[r];
      if (dim != kDynamic && res.value >= dim)
        fail(op.loc, fmt::format("indexing map #{} reads constant index {} of dim {} of '{}', "
                                 "which has size {}",
                                 i, res.value, r, type.str(), dim));
    }
  }
  const AffineMap &out = g.outputMap();
  if (!out.isProjectedPermutation())
    fail(op.loc, "the output indexing map must be a projected permutation (no constants, no "
                 "repeated dims)");
  std::vector<bool> inOutput(numLoops, false);
  for (const AffineResult &r : out.results)
    inOutput[r.value] = true;
  for (int d = 0; d < numLoops; ++d) {
    if (g.isReduction(d) && inOutput[d])
      fail(op.loc, fmt::format("reduction dim d{} appears in the output indexing map", d));
    if (!g.isReduction(d) && !inOutput[d])
      fail(op.loc, fmt::format("parallel dim d{} is missing from the output indexing map", d));
    if (!indexedPlainly[d])
      fail(op.loc, fmt::format("unsupported: loop dim d{} is not indexed by any operand", d));
  }
  if (auto keys = visibleKeys(op);
      keys && (keys->query == keys->key || std::max(keys->query, keys->key) >= numLoops ||
               std::min(keys->query, keys->key) < 0 || keys->period < 1 ||
               keys->block >= numLoops || (keys->block >= 0 && keys->blockRows < 1)))
    fail(op.loc, fmt::format("'{}' names loops {} and {} with period {} (block loop {} of {} "
                             "rows) in a generic of {} loops",
                             kVisibleKeysAttr, keys->query, keys->key, keys->period, keys->block,
                             keys->blockRows, numLoops));
  verifyRegion(op, 0, {true, OpKind::LinalgYield, &op}, {Type::scalar(g.output()->type.elem)});
}

// Ops that build or reshape tensors: legal only where tensors flow.
bool isTensorOp(OpKind kind) {
  switch (kind) {
  case OpKind::LinalgGeneric:
  case OpKind::LinalgFill:
  case OpKind::TensorEmpty:
  case OpKind::TensorDim:
  case OpKind::Call:
  case OpKind::DispatchRegion:
  case OpKind::TensorExpandShape:
  case OpKind::TensorCollapseShape:
  case OpKind::TensorExtractSlice:
  case OpKind::TensorInsertSlice:
  case OpKind::TensorCast:
  case OpKind::TensorConcat:
  case OpKind::LinalgMatmul:
  case OpKind::LinalgBatchMatmul:
  case OpKind::LinalgTranspose:
  case OpKind::LinalgBroadcast:
  case OpKind::LinalgSoftmax:
  case OpKind::LinalgReduce:
  case OpKind::Gather:
  case OpKind::TopK:
  case OpKind::Attention:
  case OpKind::ScfFor: return true;
  default: return false;
  }
}

std::vector<Type> resultTypesOf(const Op &op) {
  std::vector<Type> types;
  for (auto &r : op.results)
    types.push_back(r->type);
  return types;
}

// The contractions compute in one element type. matmul and batch_matmul cast float operands of
// another float type to the output's (linalg's implicit cast: bf16 weights into an f32 product);
// attention's operands must share its output's type, and gather's indices are integers.
void verifyElementTypes(const Op &op) {
  std::vector<size_t> same; // operands that must share the output's element type
  bool floatsCast = false;  // float operands of another float type are cast to it
  switch (op.kind) {
  case OpKind::LinalgMatmul:
  case OpKind::LinalgBatchMatmul:
    same = {0, 1};
    floatsCast = true;
    break;
  case OpKind::Attention: same = {0, 1, 2}; break; // query, key, value
  case OpKind::Gather: {
    same = {0};
    const Type &indices = op.operands[1]->type;
    if (isFloatElem(indices.elem) || indices.elem == ElemKind::I1)
      fail(op.loc, fmt::format("'{}' takes integer indices, not '{}'", op.name(), indices.str()));
    break;
  }
  default: return;
  }
  const Type &out = op.operands.back()->type;
  for (size_t i : same) {
    const ElemKind elem = op.operands[i]->type.elem;
    if (elem == out.elem || (floatsCast && isFloatElem(elem) && isFloatElem(out.elem)))
      continue;
    fail(op.loc,
         fmt::format("unsupported: '{}' with operand '%{}' of type '{}' into '{}': its "
                     "operands and output must have one element type",
                     op.name(), op.operands[i]->name, op.operands[i]->type.str(), out.str()));
  }
}

void verifyOp(const Op &op, const RegionContext &context) {
  if (isTensorOp(op.kind) && context.scalarOnly)
    fail(op.loc, fmt::format("'{}' may not appear in a '{}' body", op.name(),
                             context.owner ? context.owner->name() : "scalar"));
  if (isTerminator(op.kind) && op.kind != context.terminator) {
    const char *where = op.kind == OpKind::LinalgYield
                            ? "a 'linalg.generic' or 'linalg.reduce' body"
                        : op.kind == OpKind::FlowReturn ? "a 'flow.dispatch.region'"
                        : op.kind == OpKind::Return     ? "a function body"
                        : op.kind == OpKind::ScfYield   ? "an 'scf.if' or 'scf.for' region"
                                                        : "an 'iree_linalg_ext' region";
    fail(op.loc, fmt::format("'{}' may only end {}", op.name(), where));
  }
  verifyElementTypes(op);
  switch (op.kind) {
  case OpKind::LinalgIndex:
    if (!context.generic)
      fail(op.loc, "'linalg.index' may only appear in a 'linalg.generic' body");
    if (indexDim(op) >= GenericView{const_cast<Op &>(*context.generic)}.numLoops())
      fail(op.loc,
           fmt::format("'linalg.index {}' is out of range: the generic has {} loop dims",
                       indexDim(op), GenericView{const_cast<Op &>(*context.generic)}.numLoops()));
    return;
  case OpKind::LinalgGeneric: verifyGeneric(op); return;
  case OpKind::LinalgReduce:
    verifyRegion(op, 0, {true, OpKind::LinalgYield, nullptr},
                 {Type::scalar(op.operands.back()->type.elem)});
    return;
  case OpKind::TopK:
    verifyRegion(op, 0, {true, OpKind::ExtYield, nullptr}, {Type::scalar(ElemKind::I1)});
    return;
  case OpKind::Attention:
    verifyRegion(op, 0, {true, OpKind::ExtYield, nullptr}, {Type::scalar(ElemKind::F32)});
    return;
  case OpKind::DispatchRegion:
    verifyRegion(op, 0, {false, OpKind::FlowReturn, nullptr}, resultTypesOf(op));
    return;
  case OpKind::ScfIf:
    for (int r = 0; r < 2; ++r)
      verifyRegion(op, r, {context.scalarOnly, OpKind::ScfYield, context.generic},
                   resultTypesOf(op), true);
    return;
  case OpKind::ScfFor:
    verifyRegion(op, 0, {false, OpKind::ScfYield, nullptr}, resultTypesOf(op), true);
    return;
  default: return; // scalar arith, math and tensor.extract are legal everywhere
  }
}

// The kernels' index arithmetic is 64-bit: a tensor's bytes must count in it (sizes from index
// arguments of any value, after specialization, included; runtime dims count later).
void verifySizes(const Op &op) {
  for (const auto &result : op.results) {
    const Type &type = result->type;
    if (!type.isTensor())
      continue;
    if (stridesOverflow(std::max(1, elemBits(type.elem) / 8), type.shape))
      fail(op.loc, fmt::format("'{}' has more than 2^63 bytes", type.str()));
  }
}

void verifyBlock(const Block &block, const RegionContext &context) {
  // Where an op may appear is checked first: a misplaced terminator is reported as misplaced,
  // not as one that comes too early.
  for (size_t i = 0; i < block.ops.size(); ++i) {
    const Op &op = *block.ops[i];
    verifySizes(op);
    verifyOp(op, context);
    if (isTerminator(op.kind) && i + 1 != block.ops.size())
      fail(op.loc, fmt::format("'{}' must be the last op of its block", op.name()));
  }
}

} // namespace

void verifyFunction(const FuncOp &fn) {
  if (!fn.body)
    return;
  verifyBlock(*fn.body, {false, OpKind::Return, nullptr});
  verifyTerminator(*fn.body, OpKind::Return, fn.resultTypes, fn.loc,
                   fmt::format("function '@{}'", fn.name));
}

void verifyModule(const ModuleOp &module) {
  for (auto &fn : module.functions)
    verifyFunction(*fn);
}

} // namespace frank
