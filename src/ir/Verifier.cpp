// The verifier.
#include "ir/Verifier.h"
#include "ir/Ops.h"

namespace frank {
namespace {

enum class Scope { Function, GenericBody, DispatchBody };

void verifyBlock(const Block &block, Scope scope, const Op *generic);

void verifyTerminator(const Block &block, OpKind want, const std::vector<Type> &types,
                      const Location &ownerLoc, const char *owner) {
  const Op *term = block.terminator();
  if (!term || term->kind != want)
    fail(term ? term->loc : ownerLoc, fmt::format("{} must end with '{}'", owner, opName(want)));
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
  verifyBlock(g.body(), Scope::GenericBody, &op);
  verifyTerminator(g.body(), OpKind::LinalgYield, {Type::scalar(g.output()->type.elem)}, op.loc,
                   "the 'linalg.generic' body");
}

void verifyOp(const Op &op, Scope scope, const Op *generic) {
  bool inBody = scope == Scope::GenericBody;
  switch (op.kind) {
  case OpKind::LinalgIndex:
    if (!generic)
      fail(op.loc, "'linalg.index' may only appear in a 'linalg.generic' body");
    if (indexDim(op) >= GenericView{const_cast<Op &>(*generic)}.numLoops())
      fail(op.loc, fmt::format("'linalg.index {}' is out of range: the generic has {} loop dims",
                               indexDim(op), GenericView{const_cast<Op &>(*generic)}.numLoops()));
    return;
  case OpKind::LinalgYield:
    if (scope != Scope::GenericBody)
      fail(op.loc, "'linalg.yield' may only end a 'linalg.generic' body");
    return;
  case OpKind::FlowReturn:
    if (scope != Scope::DispatchBody)
      fail(op.loc, "'flow.return' may only end a 'flow.dispatch.region'");
    return;
  case OpKind::Return:
    if (scope != Scope::Function)
      fail(op.loc, "'util.return' may only end a function body");
    return;
  case OpKind::LinalgGeneric:
  case OpKind::LinalgFill:
  case OpKind::TensorEmpty:
  case OpKind::TensorDim:
  case OpKind::Call:
  case OpKind::DispatchRegion:
    if (inBody)
      fail(op.loc, fmt::format("'{}' may not appear in a 'linalg.generic' body", op.name()));
    if (op.kind == OpKind::LinalgGeneric)
      verifyGeneric(op);
    if (op.kind == OpKind::DispatchRegion) {
      std::vector<Type> types;
      for (auto &r : op.results)
        types.push_back(r->type);
      verifyBlock(*op.regions[0], Scope::DispatchBody, nullptr);
      verifyTerminator(*op.regions[0], OpKind::FlowReturn, types, op.loc,
                       "the 'flow.dispatch.region' body");
    }
    return;
  default: return; // scalar arith and math are legal everywhere
  }
}

void verifyBlock(const Block &block, Scope scope, const Op *generic) {
  for (size_t i = 0; i < block.ops.size(); ++i) {
    const Op &op = *block.ops[i];
    // Where an op may appear is checked first: a misplaced terminator is reported as
    // misplaced, not as one that comes too early.
    verifyOp(op, scope, generic);
    if (isTerminator(op.kind) && i + 1 != block.ops.size())
      fail(op.loc, fmt::format("'{}' must be the last op of its block", op.name()));
  }
}

} // namespace

void verifyFunction(const FuncOp &fn) {
  if (!fn.body)
    return;
  verifyBlock(*fn.body, Scope::Function, nullptr);
  verifyTerminator(*fn.body, OpKind::Return, fn.resultTypes, fn.loc,
                   fmt::format("function '@{}'", fn.name).c_str());
}

void verifyModule(const ModuleOp &module) {
  for (auto &fn : module.functions)
    verifyFunction(*fn);
}

} // namespace frank
