// Reading through permuting copies.
#include "transforms/FoldCopies.h"
#include "ir/Builder.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "transforms/Specialize.h"

namespace frank {

bool isPureCopy(const Op *op) {
  if (!op || op->kind != OpKind::LinalgGeneric)
    return false;
  GenericView g{const_cast<Op &>(*op)};
  if (!g.allParallel() || g.numInputs() != 1 || !g.input(0)->type.isTensor() ||
      !g.outputMap().isPermutation())
    return false;
  const Block &body = g.body();
  return body.ops.size() == 1 && body.ops[0]->kind == OpKind::LinalgYield &&
         body.ops[0]->operands[0] == body.arguments[0].get();
}

namespace {

// Rewrites `extract` (at `block.ops[at]`) to read the copy's input; returns true if it did.
bool readThrough(Block &block, size_t &at) {
  Op &extract = *block.ops[at];
  const Op *copy = extract.operands[0]->definingOp;
  if (!isPureCopy(copy))
    return false;
  GenericView g{const_cast<Op &>(*copy)};
  const AffineMap &out = g.outputMap(), &in = g.map(0);
  // Loop dim d is read at the extract's index for the output coordinate that names d.
  std::vector<Value *> loopIndex(out.numDims);
  for (size_t r = 0; r < out.results.size(); ++r)
    loopIndex[out.results[r].value] = extract.operands[1 + r];
  Builder b(block, at, extract.loc);
  std::vector<Value *> operands{g.input(0)};
  for (const AffineResult &r : in.results)
    operands.push_back(r.isConstant ? b.constantIndex(r.value) : loopIndex[r.value]);
  at = b.position();
  block.ops[at]->operands = operands;
  return true;
}

int foldIn(Block &block) {
  int folded = 0;
  for (size_t i = 0; i < block.ops.size(); ++i) {
    Op &op = *block.ops[i];
    for (auto &region : op.regions)
      folded += foldIn(*region);
    if (op.kind == OpKind::TensorExtract && readThrough(block, i))
      ++folded;
  }
  return folded;
}

} // namespace

int foldCopiesIntoExtracts(FuncOp &fn) {
  int folded = foldIn(*fn.body);
  // Copies nobody reads any more are gone.
  auto &ops = fn.body->ops;
  for (size_t i = ops.size(); i-- > 0;)
    if (isPureCopy(ops[i].get()) && countUses(*fn.body, ops[i]->result()) == 0)
      ops.erase(ops.begin() + i);
  removeDeadOps(*fn.body);
  return folded;
}

} // namespace frank
