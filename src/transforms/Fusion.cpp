// Elementwise producer-consumer fusion.
#include "transforms/Fusion.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "transforms/FoldCopies.h"
#include "transforms/Specialize.h"

#include <algorithm>
#include <functional>

namespace frank {
namespace {

// Whether each of the consumer's loop dims is still indexed by an operand once the producer's
// inputs replace `input`: the lowering takes a loop's extent from an operand it indexes. A
// broadcast, or a producer without inputs, may have been the only one (a sum over broadcast
// rows); it then stays a tensor of its own.
bool leavesEveryDimIndexed(const GenericView &p, const GenericView &c, int input) {
  std::vector<bool> indexed(size_t(c.numLoops()), false);
  auto mark = [&](const AffineMap &map, const std::function<int64_t(int64_t)> &dim) {
    for (const AffineResult &r : map.results)
      if (!r.isConstant)
        indexed[size_t(dim(r.value))] = true;
  };
  for (int k = 0; k <= c.numInputs(); ++k) // the inputs, then the output
    if (k != input)
      mark(c.map(k), [](int64_t d) { return d; });
  const AffineMap &out = p.outputMap(), &read = c.map(input);
  std::vector<int64_t> toConsumer(size_t(p.numLoops()));
  for (size_t r = 0; r < out.results.size(); ++r)
    toConsumer[size_t(out.results[r].value)] = read.results[r].value;
  for (int j = 0; j < p.numInputs(); ++j)
    mark(p.map(j), [&](int64_t d) { return toConsumer[size_t(d)]; });
  return std::all_of(indexed.begin(), indexed.end(), [](bool b) { return b; });
}

// Whether consumer `c` may take producer `p`'s body in place of its input `input`. A copy's body
// costs nothing, so the consumer may read it at any point: through any map of plain dims (a
// projection, as a contraction reads its operands). Other producers fuse only where the consumer
// reads each of their points once.
bool consumerTakesBody(const GenericView &p, const GenericView &c, int input) {
  const AffineMap &read = c.map(input);
  if (std::any_of(read.results.begin(), read.results.end(),
                  [](const AffineResult &r) { return r.isConstant; }) ||
      !leavesEveryDimIndexed(p, c, input))
    return false;
  return isPureCopy(&p.op) || read.isPermutation();
}

// The most ops (other than constants and indices) a producer with several consumers may have.
constexpr int kMaxRecomputedOps = 6;

// Whether recomputing `p`'s body in each of its consumers costs less than storing its result
// and reading it back: a few ops, none of them a transcendental function or a division by a
// value, over at most one input, which the consumers then read in its place (so that they read
// no more than before). A 4096x4096 input scaled and then centred by its column sums (its
// copy read by the sums and by the subtraction) ran 10.0-13.7 ms against 16.9-19.6 (four
// alternating runs; x read twice instead of the copy written and read twice, all in DRAM).
// Attention's scaled (and causally masked) scores, which the softmax reads for the row maximum
// and for the exponentials, are no longer stored either, though a block of rows of them stayed
// in L1 and S5 runs in the same time.
//
// A copy (a transpose, a broadcast) that several consumers read stays made: the contractions
// that read it choose their strategy for its layout (the MoE block's router and expert
// projections read its tokens transposed once, and reading them in place changed both).
bool recomputesCheaply(const GenericView &p) {
  if (p.numInputs() > 1 || isPureCopy(&p.op))
    return false;
  int ops = 0;
  for (const auto &op : p.body().ops) {
    switch (op->kind) {
    case OpKind::ArithConstant:
    case OpKind::LinalgIndex:
    case OpKind::LinalgYield: continue;
    case OpKind::DivSI:
    case OpKind::DivUI:
    case OpKind::RemSI:
    case OpKind::RemUI:
      if (!op->operands[1]->definingOp ||
          op->operands[1]->definingOp->kind != OpKind::ArithConstant)
        return false;
      break;
    case OpKind::AbsF:
    case OpKind::NegF: break;
    case OpKind::DivF:
    case OpKind::RemF:
    case OpKind::PowF: return false;
    default:
      if (isMathUnary(op->kind) || !op->regions.empty())
        return false;
    }
    ++ops;
  }
  return ops <= kMaxRecomputedOps;
}

// Whether every use of `result` (of producer `p`) is an input of a generic that may take `p`'s
// body in its place.
bool everyConsumerTakesBody(const FuncOp &fn, const GenericView &p, const Value *result) {
  int taking = 0;
  for (const auto &op : fn.body->ops) {
    if (op->kind != OpKind::LinalgGeneric)
      continue;
    GenericView c{*op};
    for (int k = 0; k < c.numInputs(); ++k)
      if (op->operands[k] == result) {
        if (!consumerTakesBody(p, c, k))
          return false;
        ++taking;
      }
  }
  return taking == countUses(*fn.body, result);
}

bool canFuse(const FuncOp &fn, const Op &consumer, int input) {
  const Value *operand = consumer.operands[input];
  const Op *producer = operand->definingOp;
  if (!producer || producer->kind != OpKind::LinalgGeneric ||
      producer->parentBlock != fn.body.get())
    return false;
  GenericView p{const_cast<Op &>(*producer)};
  GenericView c{const_cast<Op &>(consumer)};
  if (!p.allParallel() || !p.outputMap().isPermutation())
    return false;
  if (countUses(p.body(), p.body().arguments.back().get()) > 0)
    return false;
  if (countUses(*fn.body, operand) == 1)
    return consumerTakesBody(p, c, input);
  return recomputesCheaply(p) && everyConsumerTakesBody(fn, p, operand);
}

void fuse(Op &consumer, int input) {
  Op &producer = *consumer.operands[input]->definingOp;
  GenericView p{producer};
  GenericView c{consumer};
  // P loop dim q is C loop dim toConsumer[q]: both index the same coordinate of P's result.
  std::vector<int64_t> toConsumer(p.numLoops());
  const AffineMap &out = p.outputMap();
  const AffineMap &read = c.map(input);
  for (size_t r = 0; r < out.results.size(); ++r)
    toConsumer[out.results[r].value] = read.results[r].value;

  std::vector<Value *> operands;
  AttrList maps;
  auto block = std::make_unique<Block>();
  block->parentOp = &consumer;
  ValueMap map;
  for (int k = 0; k < c.numInputs(); ++k) {
    if (k == input)
      continue;
    operands.push_back(consumer.operands[k]);
    maps.push_back(Attribute{c.map(k)});
    const Value *arg = c.body().arguments[k].get();
    map[arg] = block->addArgument(arg->type, arg->name, arg->loc);
  }
  for (int j = 0; j < p.numInputs(); ++j) {
    operands.push_back(producer.operands[j]);
    AffineMap composed;
    composed.numDims = c.numLoops();
    for (AffineResult r : p.map(j).results) {
      if (!r.isConstant)
        r.value = toConsumer[r.value];
      composed.results.push_back(r);
    }
    maps.push_back(Attribute{composed});
    const Value *arg = p.body().arguments[j].get();
    map[arg] = block->addArgument(arg->type, arg->name, arg->loc);
  }
  operands.push_back(consumer.operands.back());
  maps.push_back(Attribute{c.outputMap()});
  const Value *outArg = c.body().arguments.back().get();
  map[outArg] = block->addArgument(outArg->type, outArg->name, outArg->loc);

  for (auto &op : p.body().ops) {
    if (op->kind == OpKind::LinalgYield) {
      map[c.body().arguments[input].get()] =
          map.count(op->operands[0]) ? map[op->operands[0]] : op->operands[0];
      break;
    }
    auto copy = cloneOp(*op, map);
    if (copy->kind == OpKind::LinalgIndex)
      copy->attrs["dim"] = Attribute{toConsumer[indexDim(*copy)]};
    copy->parentBlock = block.get();
    block->ops.push_back(std::move(copy));
  }
  for (auto &op : c.body().ops) {
    auto copy = cloneOp(*op, map);
    copy->parentBlock = block.get();
    block->ops.push_back(std::move(copy));
  }
  consumer.operands = operands;
  consumer.attrs["indexing_maps"] = Attribute{maps};
  consumer.attrs["num_inputs"] = Attribute{static_cast<int64_t>(operands.size() - 1)};
  consumer.regions.clear();
  consumer.regions.push_back(std::move(block));
}

} // namespace

int fuseElementwise(FuncOp &fn) {
  int fused = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto &op : fn.body->ops) {
      if (op->kind != OpKind::LinalgGeneric)
        continue;
      GenericView c{*op};
      for (int i = 0; i < c.numInputs() && !changed; ++i) {
        if (!canFuse(fn, *op, i))
          continue;
        const Value *result = op->operands[i];
        const Op *producer = result->definingOp;
        fuse(*op, i);
        auto &ops = fn.body->ops;
        if (countUses(*fn.body, result) == 0) // its last consumer
          for (size_t k = 0; k < ops.size(); ++k)
            if (ops[k].get() == producer) {
              ops.erase(ops.begin() + k);
              break;
            }
        ++fused;
        changed = true;
      }
      if (changed)
        break;
    }
  }
  removeDeadOps(*fn.body);
  return fused;
}

} // namespace frank
