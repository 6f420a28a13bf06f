// Call and dispatch-region inlining.
#include "transforms/Inline.h"
#include "ir/Clone.h"
#include "ir/Ops.h"

#include <algorithm>
#include <set>

namespace frank {
namespace {

// Replaces block.ops[at] by `ops`; returns the index of the last op inserted (at - 1 if none),
// so that a loop over the block continues after them.
size_t splice(Block &block, size_t at, std::vector<std::unique_ptr<Op>> &ops) {
  size_t count = ops.size();
  for (auto &o : ops)
    o->parentBlock = &block;
  block.ops.erase(block.ops.begin() + at);
  block.ops.insert(block.ops.begin() + at, std::make_move_iterator(ops.begin()),
                   std::make_move_iterator(ops.end()));
  return at + count - 1;
}

// `loc` as reached through `call`: the call ends its chain of callers.
Location calledFrom(const Location &loc, const std::shared_ptr<const Location> &call) {
  Location through = loc;
  through.caller =
      loc.caller ? std::make_shared<const Location>(calledFrom(*loc.caller, call)) : call;
  return through;
}

// The function `call` calls, defined, with the call's signature.
const FuncOp &calledFunction(const Op &call, const ModuleOp &module) {
  const std::string &name = callee(call);
  const FuncOp *target = module.lookup(name);
  if (!target)
    fail(call.loc, fmt::format("call to undefined function '@{}'", name));
  if (target->isDeclaration())
    fail(target->loc, fmt::format("unresolved external function '@{}'", name));
  if (target->argTypes.size() != call.operands.size())
    fail(call.loc, fmt::format("call to '@{}' passes {} arguments but it takes {}", name,
                               call.operands.size(), target->argTypes.size()));
  for (size_t a = 0; a < call.operands.size(); ++a)
    if (call.operands[a]->type != target->argTypes[a])
      fail(call.loc, fmt::format("call to '@{}': argument #{} has type '{}' but the function "
                                 "takes '{}'",
                                 name, a, call.operands[a]->type.str(), target->argTypes[a].str()));
  if (target->resultTypes.size() != call.results.size())
    fail(call.loc, fmt::format("call to '@{}' expects {} results but the function returns {}", name,
                               call.results.size(), target->resultTypes.size()));
  for (size_t r = 0; r < call.results.size(); ++r)
    if (call.results[r]->type != target->resultTypes[r])
      fail(call.loc,
           fmt::format("call to '@{}': result #{} has type '{}' but the function "
                       "returns '{}'",
                       name, r, call.results[r]->type.str(), target->resultTypes[r].str()));
  return *target;
}

// Depth first from `fn` through its calls: a call to a function on `stack` closes a cycle.
void checkCallsFrom(const FuncOp &fn, const ModuleOp &module, std::vector<std::string> &stack,
                    std::set<std::string> &done) {
  stack.push_back(fn.name);
  walk(*fn.body, [&](Op &op) {
    if (op.kind != OpKind::Call)
      return;
    const FuncOp &target = calledFunction(op, module);
    if (std::find(stack.begin(), stack.end(), target.name) != stack.end())
      fail(op.loc, fmt::format("recursive call to '@{}' is not supported", target.name));
    if (!done.count(target.name))
      checkCallsFrom(target, module, stack, done);
  });
  stack.pop_back();
  done.insert(fn.name);
}

void inlineCallsIn(Block &block, const ModuleOp &module, std::vector<std::string> &stack) {
  for (size_t i = 0; i < block.ops.size(); ++i) {
    Op &op = *block.ops[i];
    for (auto &region : op.regions)
      inlineCallsIn(*region, module, stack);
    if (op.kind != OpKind::Call)
      continue;
    const std::string &name = callee(op);
    const FuncOp *target = &calledFunction(op, module);
    for (const std::string &active : stack)
      if (active == name)
        fail(op.loc, fmt::format("recursive call to '@{}' is not supported", name));
    // Clone the callee's body with its arguments bound to the call's operands.
    ValueMap map;
    for (size_t a = 0; a < op.operands.size(); ++a)
      map[target->body->arguments[a].get()] = op.operands[a];
    // Clone the whole body, return included, so that nested inlining updates its operands too.
    Block scratch;
    for (auto &calleeOp : target->body->ops) {
      scratch.ops.push_back(cloneOp(*calleeOp, map));
      scratch.ops.back()->parentBlock = &scratch;
    }
    stack.push_back(name);
    inlineCallsIn(scratch, module, stack);
    stack.pop_back();
    // Errors at the callee's ops name the call too.
    auto call = std::make_shared<const Location>(op.loc);
    walk(scratch, [&](Op &inlined) { inlined.loc = calledFrom(inlined.loc, call); });
    std::unique_ptr<Op> ret = std::move(scratch.ops.back());
    scratch.ops.pop_back();
    for (size_t r = 0; r < op.results.size(); ++r)
      replaceAllUses(block, op.result(static_cast<int>(r)), ret->operands[r]);
    i = splice(block, i, scratch.ops);
  }
}

// Inlines the dispatch regions of `block` and of the blocks nested in it (an scf.for's body, an
// scf.if's branches, a region in a region).
void inlineDispatchRegionsIn(Block &block) {
  for (size_t i = 0; i < block.ops.size(); ++i) {
    for (auto &region : block.ops[i]->regions)
      inlineDispatchRegionsIn(*region);
    if (block.ops[i]->kind != OpKind::DispatchRegion)
      continue;
    Op &regionOp = *block.ops[i];
    Block &body = *regionOp.regions[0];
    const Op &ret = *body.ops.back();
    for (size_t r = 0; r < regionOp.results.size(); ++r)
      replaceAllUses(block, regionOp.result(static_cast<int>(r)), ret.operands[r]);
    std::unique_ptr<Op> region = std::move(block.ops[i]); // keeps `body` alive while splicing
    body.ops.pop_back();
    i = splice(block, i, body.ops);
  }
}

} // namespace

void checkCalls(const ModuleOp &module) {
  std::set<std::string> done;
  std::vector<std::string> stack;
  for (const auto &fn : module.functions)
    if (fn->body && !done.count(fn->name))
      checkCallsFrom(*fn, module, stack, done);
}

void inlineCalls(FuncOp &fn, const ModuleOp &module) {
  if (!fn.body)
    return;
  std::vector<std::string> stack{fn.name};
  inlineCallsIn(*fn.body, module, stack);
}

void inlineDispatchRegions(FuncOp &fn) {
  if (fn.body)
    inlineDispatchRegionsIn(*fn.body);
}

} // namespace frank
