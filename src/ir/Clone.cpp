// Cloning and use replacement.
#include "ir/Clone.h"

namespace frank {

static void cloneBlockInto(const Block &from, Block &to, ValueMap &map) {
  for (auto &arg : from.arguments)
    map[arg.get()] = to.addArgument(arg->type, arg->name, arg->loc);
  for (auto &op : from.ops) {
    auto copy = cloneOp(*op, map);
    copy->parentBlock = &to;
    to.ops.push_back(std::move(copy));
  }
}

std::unique_ptr<Op> cloneOp(const Op &op, ValueMap &map) {
  auto copy = std::make_unique<Op>(op.kind, op.loc);
  for (Value *v : op.operands) {
    auto it = map.find(v);
    copy->operands.push_back(it == map.end() ? v : it->second);
  }
  copy->attrs = op.attrs;
  for (auto &region : op.regions)
    cloneBlockInto(*region, *copy->addRegion(), map);
  for (auto &r : op.results)
    map[r.get()] = copy->addResult(r->type, r->name);
  return copy;
}

std::unique_ptr<FuncOp> cloneFunction(const FuncOp &fn) {
  auto copy = std::make_unique<FuncOp>();
  copy->name = fn.name;
  copy->isPublic = fn.isPublic;
  copy->argTypes = fn.argTypes;
  copy->resultTypes = fn.resultTypes;
  copy->loc = fn.loc;
  if (fn.body) {
    ValueMap map;
    copy->body = std::make_unique<Block>();
    cloneBlockInto(*fn.body, *copy->body, map);
  }
  return copy;
}

void replaceAllUses(Block &block, const Value *from, Value *to) {
  for (auto &op : block.ops) {
    for (Value *&v : op->operands)
      if (v == from)
        v = to;
    for (auto &region : op->regions)
      replaceAllUses(*region, from, to);
  }
}

int countUses(const Block &block, const Value *value) {
  int uses = 0;
  for (auto &op : block.ops) {
    for (Value *v : op->operands)
      uses += v == value;
    for (auto &region : op->regions)
      uses += countUses(*region, value);
  }
  return uses;
}

} // namespace frank
