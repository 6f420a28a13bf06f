// Shape specialization (see Specialize.h for the algorithm).
#include "transforms/Specialize.h"
#include "ir/Clone.h"
#include "ir/IntegerSemantics.h"
#include "ir/Ops.h"

#include <unordered_map>

namespace frank {
namespace {

class Specializer {
public:
  explicit Specializer(FuncOp &fn) : fn_(fn) {}

  void bindArguments(const std::vector<ArgSpec> &args) {
    Block &body = *fn_.body;
    std::vector<std::unique_ptr<Op>> prologue;
    for (size_t i = 0; i < args.size(); ++i) {
      Value *arg = body.arguments[i].get();
      if (args[i].type.isTensor()) {
        arg->type = args[i].type;
        fn_.argTypes[i] = args[i].type;
      } else if (args[i].intValue) {
        auto op = makeConstant(arg->type, *args[i].intValue, arg->loc, &body);
        op->result()->name = arg->name;
        replaceAllUses(body, arg, op->result());
        prologue.push_back(std::move(op));
      }
    }
    body.ops.insert(body.ops.begin(), std::make_move_iterator(prologue.begin()),
                    std::make_move_iterator(prologue.end()));
  }

  void run(Block &block) {
    for (size_t i = 0; i < block.ops.size(); ++i) {
      Op &op = *block.ops[i];
      for (auto &region : op.regions)
        run(*region);
      std::optional<int64_t> folded = fold(op);
      if (folded) {
        auto constant = makeConstant(op.result()->type, *folded, op.loc, &block);
        constant->result()->name = op.result()->name;
        replaceAllUses(*fn_.body, op.result(), constant->result());
        block.ops[i] = std::move(constant);
        continue;
      }
      refineTypes(op);
    }
  }

  void finish() {
    removeDeadOps(*fn_.body);
    const Op *ret = fn_.body->terminator();
    for (size_t i = 0; i < fn_.resultTypes.size(); ++i)
      fn_.resultTypes[i] = ret->operands[i]->type;
  }

private:
  std::unique_ptr<Op> makeConstant(const Type &type, int64_t value, const Location &loc,
                                   Block *parent) {
    auto op = std::make_unique<Op>(OpKind::ArithConstant, loc);
    Literal lit{type.elem == ElemKind::I1 ? Literal::Kind::Bool : Literal::Kind::Int,
                wrapToType(value, type.elem), 0};
    op->attrs["value"] = Attribute{lit};
    op->addResult(type);
    op->parentBlock = parent;
    constants_[op->result()] = lit.i;
    return op;
  }

  std::optional<int64_t> constantOf(const Value *v) const {
    auto it = constants_.find(v);
    if (it == constants_.end())
      return std::nullopt;
    return it->second;
  }

  std::optional<int64_t> fold(Op &op) {
    if (op.kind == OpKind::ArithConstant) {
      const Literal &lit = constantValue(op);
      if (lit.kind != Literal::Kind::Float)
        constants_[op.result()] = lit.i;
      return std::nullopt;
    }
    if (op.kind == OpKind::TensorDim) {
      const Type &t = op.operands[0]->type;
      std::optional<int64_t> d = constantOf(op.operands[1]);
      if (!d)
        fail(op.loc, "unsupported: 'tensor.dim' with a dim index that is not a constant");
      if (*d < 0 || *d >= t.rank())
        fail(op.loc, fmt::format("'tensor.dim' index {} is out of range for '{}'", *d, t.str()));
      if (t.shape[*d] == kDynamic)
        return std::nullopt;
      return t.shape[*d];
    }
    if (op.results.size() != 1 || !op.result()->type.isInteger() || op.operands.empty())
      return std::nullopt;
    std::vector<int64_t> values;
    for (Value *v : op.operands) {
      std::optional<int64_t> c = constantOf(v);
      if (!c)
        return std::nullopt;
      values.push_back(*c);
    }
    if (isIntegerDivision(op.kind) && values[1] == 0)
      fail(op.loc, fmt::format("division by zero in '{}'", op.name()));
    // select's operand 0 is its i1 condition; the chosen values have the result's type.
    ElemKind operandType =
        op.kind == OpKind::Select ? op.result()->type.elem : op.operands[0]->type.elem;
    return foldInteger(op.kind, operandType, op.result()->type.elem, values,
                       op.kind == OpKind::CmpI ? predicate(op) : std::string());
  }

  void refineTypes(Op &op) {
    switch (op.kind) {
    case OpKind::TensorEmpty: {
      Type type = op.result()->type;
      size_t next = 0;
      for (int64_t d = 0; d < type.rank(); ++d) {
        if (type.shape[d] != kDynamic)
          continue;
        Value *size = op.operands[next++];
        std::optional<int64_t> c = constantOf(size);
        if (!c)
          fail(op.loc, fmt::format("unsupported: size of dim {} of 'tensor.empty' (%{}) does not "
                                   "fold to a constant",
                                   d, size->name));
        if (*c < 0)
          fail(op.loc,
               fmt::format("'tensor.empty' dim {} has negative size {} (%{})", d, *c, size->name));
        type.shape[d] = *c;
      }
      op.operands.clear();
      op.result()->type = type;
      return;
    }
    case OpKind::LinalgFill: op.result()->type = op.operands[1]->type; return;
    case OpKind::LinalgGeneric:
      checkExtents(op);
      op.result()->type = op.operands.back()->type;
      return;
    default: return;
    }
  }

  void checkExtents(const Op &op) {
    auto sources = loopDimSources(op);
    const AttrList &maps = op.attr("indexing_maps").list();
    for (size_t d = 0; d < sources.size(); ++d) {
      auto [firstOperand, firstDim] = sources[d][0];
      int64_t extent = op.operands[firstOperand]->type.shape[firstDim];
      for (auto [operand, dim] : sources[d]) {
        int64_t size = op.operands[operand]->type.shape[dim];
        if (size != extent)
          fail(op.loc, fmt::format("loop dim d{} of 'linalg.generic' has extent {} from {} but "
                                   "{} from {}",
                                   d, extent, describeOperandDim(op, firstOperand, firstDim), size,
                                   describeOperandDim(op, operand, dim)));
      }
    }
    // Constant map results must fall inside the operand.
    for (size_t i = 0; i < maps.size(); ++i) {
      const AffineMap &map = maps[i].map();
      for (size_t r = 0; r < map.results.size(); ++r)
        if (map.results[r].isConstant && map.results[r].value >= op.operands[i]->type.shape[r])
          fail(op.loc, fmt::format("indexing map #{} reads index {} of {}, which has size {}", i,
                                   map.results[r].value,
                                   describeOperandDim(op, static_cast<int>(i), static_cast<int>(r)),
                                   op.operands[i]->type.shape[r]));
    }
  }

  FuncOp &fn_;
  std::unordered_map<const Value *, int64_t> constants_;
};

} // namespace

std::vector<std::vector<std::pair<int, int>>> loopDimSources(const Op &generic) {
  const AttrList &maps = generic.attr("indexing_maps").list();
  int numLoops = maps[0].map().numDims;
  std::vector<std::vector<std::pair<int, int>>> sources(numLoops);
  for (size_t i = 0; i < maps.size(); ++i) {
    const AffineMap &map = maps[i].map();
    for (size_t r = 0; r < map.results.size(); ++r)
      if (!map.results[r].isConstant)
        sources[map.results[r].value].push_back({static_cast<int>(i), static_cast<int>(r)});
  }
  return sources;
}

std::string describeOperandDim(const Op &op, int operand, int dim) {
  const Value *v = op.operands[operand];
  return fmt::format("operand #{} (%{}) dim {}", operand, v->name.empty() ? "?" : v->name, dim);
}

void removeDeadOps(Block &block) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = block.ops.size(); i-- > 0;) {
      Op &op = *block.ops[i];
      bool removable =
          isPureScalarOp(op.kind) || op.kind == OpKind::TensorDim || op.kind == OpKind::TensorEmpty;
      if (!removable)
        continue;
      bool used = false;
      for (auto &r : op.results) {
        Block *root = &block;
        while (root->parentOp && root->parentOp->parentBlock)
          root = root->parentOp->parentBlock;
        used |= countUses(*root, r.get()) > 0;
      }
      if (!used) {
        block.ops.erase(block.ops.begin() + i);
        changed = true;
      }
    }
  }
  for (auto &op : block.ops)
    for (auto &region : op->regions)
      removeDeadOps(*region);
}

std::unique_ptr<FuncOp> specialize(const FuncOp &fn, const std::vector<ArgSpec> &args,
                                   std::vector<std::string> *explain) {
  checkArguments(fn, args);
  auto copy = cloneFunction(fn);
  Specializer s(*copy);
  s.bindArguments(args);
  s.run(*copy->body);
  s.finish();
  if (explain) {
    for (size_t i = 0; i < args.size(); ++i) {
      std::string arg = argumentName(fn, i);
      const Type &declared = fn.argTypes[i];
      if (declared.isTensor()) {
        std::vector<std::string> baked;
        for (int64_t d = 0; d < declared.rank(); ++d)
          if (declared.shape[d] == kDynamic)
            baked.push_back(fmt::format("dim {} = {}", d, args[i].type.shape[d]));
        explain->push_back(fmt::format(
            "{}: {} -> {}{}{}", arg, declared.str(), args[i].type.str(),
            baked.empty() ? "" : ", baked in: ", fmt::format("{}", fmt::join(baked, ", "))));
      } else if (args[i].intValue) {
        explain->push_back(
            fmt::format("{}: {} = {} baked in", arg, declared.str(), *args[i].intValue));
      } else {
        explain->push_back(fmt::format("{}: {} stays a runtime value", arg, declared.str()));
      }
    }
  }
  return copy;
}

} // namespace frank
