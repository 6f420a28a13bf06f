// Shape specialization (see Specialize.h for the algorithm).
#include "transforms/Specialize.h"
#include "ir/Builder.h"
#include "ir/Clone.h"
#include "ir/IntegerSemantics.h"
#include "ir/Ops.h"

#include <tuple>
#include <unordered_map>

namespace frank {
namespace {

class Specializer {
public:
  /// With `shapes` false only flags are bound and branches folded (generic mode).
  Specializer(FuncOp &fn, bool shapes) : fn_(fn), shapes_(shapes) {}

  void bindArguments(const std::vector<ArgSpec> &args) {
    Block &body = *fn_.body;
    std::vector<std::unique_ptr<Op>> prologue;
    for (size_t i = 0; i < args.size(); ++i) {
      Value *arg = body.arguments[i].get();
      if (args[i].type.isTensor()) {
        if (shapes_) {
          arg->type = args[i].type;
          fn_.argTypes[i] = args[i].type;
        }
      } else if (args[i].intValue && (shapes_ || arg->type.elem == ElemKind::I1)) {
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
      if (op.kind == OpKind::ScfIf && constantOf(op.operands[0])) {
        i = inlineBranch(block, i, *constantOf(op.operands[0]) != 0);
        continue;
      }
      // Tensor results say the branch is outside a linalg body, where no kernel can take it;
      // refining its regions' types would only make them disagree with its results'.
      if (op.kind == OpKind::ScfIf && shapes_ &&
          std::any_of(op.results.begin(), op.results.end(),
                      [](const auto &r) { return r->type.isTensor(); }))
        fail(op.loc, kUnknownBranchError);
      if (op.kind == OpKind::ScfFor && shapes_)
        for (size_t a = 3; a < op.operands.size(); ++a)
          op.regions[0]->arguments[a - 2]->type = op.operands[a]->type;
      // An scf.if's regions run only where its condition holds: a division there that would
      // trap stays for the kernel to check under the condition.
      conditional_ += op.kind == OpKind::ScfIf;
      for (auto &region : op.regions)
        run(*region);
      conditional_ -= op.kind == OpKind::ScfIf;
      if (op.kind == OpKind::ScfFor && shapes_)
        castYieldsToCarriedTypes(*op.regions[0]);
      std::optional<int64_t> folded = fold(op);
      if (folded) {
        auto constant = makeConstant(op.result()->type, *folded, op.loc, &block);
        constant->result()->name = op.result()->name;
        replaceAllUses(*fn_.body, op.result(), constant->result());
        block.ops[i] = std::move(constant);
        continue;
      }
      if (shapes_)
        refineTypes(op);
    }
  }

  // An scf.for's yielded tensors and its carried ones, refined apart (one dim static where a
  // runtime dim of the other stands: partial specialization), meet through a tensor.cast before
  // the yield, which checks a static dim it casts to when the kernel runs. Sizes that differ
  // stay as they are, for the lowering to report.
  void castYieldsToCarriedTypes(Block &body) {
    Op &yield = *body.ops.back();
    for (size_t r = 0; r < yield.operands.size(); ++r) {
      const Type &carried = body.arguments[r + 1]->type, &yielded = yield.operands[r]->type;
      if (!carried.isTensor() || carried == yielded || carried.rank() != yielded.rank() ||
          carried.elem != yielded.elem)
        continue;
      bool compatible = true;
      for (int64_t d = 0; d < carried.rank(); ++d)
        compatible &= carried.shape[d] == yielded.shape[d] || carried.shape[d] == kDynamic ||
                      yielded.shape[d] == kDynamic;
      if (!compatible)
        continue;
      Builder b(body, body.ops.size() - 1, yield.loc);
      yield.operands[r] = b.create(OpKind::TensorCast, {yield.operands[r]}, {carried})->result();
    }
  }

  // Splices the chosen region of the scf.if at `block.ops[at]` in its place; returns the index
  // before the first spliced op, so that the walk specializes them next.
  size_t inlineBranch(Block &block, size_t at, bool takeThen) {
    Op &op = *block.ops[at];
    Block &chosen = *op.regions[takeThen ? 0 : 1];
    if (!op.results.empty()) {
      const Op &yield = *chosen.ops.back();
      for (size_t r = 0; r < op.results.size(); ++r)
        replaceAllUses(*fn_.body, op.result(static_cast<int>(r)), yield.operands[r]);
    }
    std::unique_ptr<Op> keep = std::move(block.ops[at]); // owns `chosen` while splicing
    if (!chosen.ops.empty() && chosen.ops.back()->kind == OpKind::ScfYield)
      chosen.ops.pop_back();
    for (auto &o : chosen.ops)
      o->parentBlock = &block;
    block.ops.erase(block.ops.begin() + at);
    block.ops.insert(block.ops.begin() + at, std::make_move_iterator(chosen.ops.begin()),
                     std::make_move_iterator(chosen.ops.end()));
    return at - 1;
  }

  // The sizes of a mixed static/dynamic list, SSA entries taken from operands[next...]. An
  // entry that does not fold (it depends on a runtime dim) stays kDynamic; a negative one is an
  // error worded by `negative` (the entry's position, then its value).
  std::vector<int64_t> mixedSizes(const Op &op, const char *attr, size_t &next,
                                  const char *negative) {
    std::vector<int64_t> values;
    for (const Attribute &a : op.attr(attr).list()) {
      std::optional<int64_t> v =
          a.integer() == kDynamic ? constantOf(op.operands[next++]) : a.integer();
      if (v && *v < 0)
        fail(op.loc, fmt::format(fmt::runtime(negative), values.size(), *v));
      values.push_back(v.value_or(kDynamic));
    }
    return values;
  }

  // Static sizes that disagree; a runtime dim agrees with anything here (the kernel checks it).
  static bool differ(int64_t a, int64_t b) { return a != kDynamic && b != kDynamic && a != b; }

  void refineView(Op &op) {
    const Type &from = op.operands[0]->type;
    Type to = op.result()->type;
    const AttrList &groups = op.attr("reassociation").list();
    bool expand = op.kind == OpKind::TensorExpandShape;
    std::vector<int64_t> shape;
    if (expand) {
      size_t next = 1;
      shape = mixedSizes(op, "static_output_shape", next,
                         "'tensor.expand_shape' output dim {} is negative ({})");
    }
    size_t dim = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      // Checked: the sizes may come from index arguments of any value.
      int64_t product = 1;
      for (size_t k = 0; k < groups[g].list().size(); ++k, ++dim) {
        int64_t size = expand ? shape[dim] : from.shape[dim];
        if (size == kDynamic || product == kDynamic)
          product = kDynamic;
        else if (__builtin_mul_overflow(product, size, &product))
          fail(op.loc, fmt::format("'{}' group {} has more than 2^63 elements", op.name(), g));
      }
      if (expand && differ(product, from.shape[g]))
        fail(op.loc, fmt::format("'tensor.expand_shape' splits dim {} of size {} into {} elements",
                                 g, from.shape[g], product));
      if (!expand)
        shape.push_back(product);
    }
    for (int64_t d = 0; d < to.rank(); ++d)
      if (differ(to.shape[d], shape[d]))
        fail(op.loc, fmt::format("dim {} of '{}' is {} but the reshape gives {}", d, to.str(),
                                 to.shape[d], shape[d]));
    op.result()->type.shape = keepDeclaredDims(to.shape, shape);
  }

  // The computed shape, with the static dims the type declares where the computed ones are
  // runtime values: the lowering checks those when the kernel is called.
  static std::vector<int64_t> keepDeclaredDims(const std::vector<int64_t> &declared,
                                               std::vector<int64_t> computed) {
    for (size_t d = 0; d < computed.size(); ++d)
      if (computed[d] == kDynamic)
        computed[d] = declared[d];
    return computed;
  }

  void refineSlice(Op &op) {
    bool insert = op.kind == OpKind::TensorInsertSlice;
    const Type &full = insert ? op.operands[1]->type : op.operands[0]->type;
    size_t next = insert ? 2 : 1;
    // Offsets may stay unknown (a loop variable): the kernel checks those windows at run time,
    // as it does windows of runtime sizes.
    std::vector<std::optional<int64_t>> offsets;
    for (const Attribute &a : op.attr("static_offsets").list())
      offsets.push_back(a.integer() == kDynamic ? constantOf(op.operands[next++])
                                                : std::optional<int64_t>(a.integer()));
    std::vector<int64_t> sizes =
        mixedSizes(op, "static_sizes", next, "slice dim {} has negative size {}");
    const AttrList &strides = op.attr("static_strides").list();
    for (int64_t d = 0; d < full.rank(); ++d) {
      if (!offsets[d] || sizes[d] == kDynamic || full.shape[d] == kDynamic)
        continue;
      // Checked: an offset, size or stride from an index argument may be of any value.
      int64_t last = 0;
      bool overflow = __builtin_mul_overflow(sizes[d] - 1, strides[d].integer(), &last) ||
                      __builtin_add_overflow(last, *offsets[d], &last);
      if (*offsets[d] < 0 || (sizes[d] > 0 && (overflow || last >= full.shape[d])))
        fail(op.loc, fmt::format("slice dim {} (offset {}, size {}, stride {}) is out of bounds "
                                 "for '{}'",
                                 d, *offsets[d], sizes[d], strides[d].integer(), full.str()));
    }
    const Type &declared = insert ? op.operands[0]->type : op.result()->type;
    std::vector<int64_t> sliceShape = droppedUnitDims(op, sizes, declared);
    if (insert) {
      const std::vector<int64_t> &inserted = op.operands[0]->type.shape;
      for (size_t d = 0; d < sliceShape.size(); ++d)
        if (differ(inserted[d], sliceShape[d]))
          fail(op.loc, fmt::format("the inserted '{}' does not match the window sizes [{}]",
                                   op.operands[0]->type.str(), fmt::join(sizes, ", ")));
      op.result()->type = full;
    } else {
      op.result()->type.shape = keepDeclaredDims(declared.shape, sliceShape);
    }
  }

  // The slice's shape: the sizes, less the unit dims a rank-reducing slice drops (the first
  // static unit dims that must go for the ranks to match).
  std::vector<int64_t> droppedUnitDims(const Op &op, const std::vector<int64_t> &sizes,
                                       const Type &slice) {
    std::optional<std::vector<bool>> dropped = droppedSliceDims(op, sizes);
    if (!dropped)
      fail(op.loc, notRankReducible(sizes, slice));
    std::vector<int64_t> shape;
    for (size_t d = 0; d < sizes.size(); ++d)
      if (!(*dropped)[d])
        shape.push_back(sizes[d]);
    for (int64_t d = 0; d < slice.rank(); ++d)
      if (differ(slice.shape[d], shape[d]))
        fail(op.loc, fmt::format("dim {} of '{}' is {} but the slice size is {}", d, slice.str(),
                                 slice.shape[d], shape[d]));
    return shape;
  }

  void finish() {
    removeDeadOps(*fn_.body);
    if (!shapes_)
      return;
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
    if (op.kind == OpKind::ArithConstant && op.result()->type.isScalar()) {
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
    if (op.kind == OpKind::AssumeInt) {
      std::optional<int64_t> v = constantOf(op.operands[0]);
      if (!v)
        return std::nullopt;
      auto bound = [&](const char *key) { return op.hasAttr(key) ? op.attr(key).integer() : -1; };
      // The bounds are unsigned: a negative value is above any umax.
      std::string broken;
      if (bound("umin") >= 0 && *v < bound("umin"))
        broken = fmt::format("it is below umin = {}", bound("umin"));
      else if (bound("umax") >= 0 && (*v < 0 || *v > bound("umax")))
        broken = fmt::format("it is above umax = {}", bound("umax"));
      else if (bound("udiv") > 0 && *v % bound("udiv") != 0)
        broken = fmt::format("it is not a multiple of udiv = {}", bound("udiv"));
      if (!broken.empty())
        fail(op.loc, fmt::format("%{} = {} violates its 'util.assume.int' range: {}",
                                 op.operands[0]->name, *v, broken));
      return v;
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
    // select's operand 0 is its i1 condition; the chosen values have the result's type.
    ElemKind operandType =
        op.kind == OpKind::Select ? op.result()->type.elem : op.operands[0]->type.elem;
    // As the kernel reports it when the values are known only as it runs.
    const bool traps =
        isIntegerDivision(op.kind) &&
        (values[1] == 0 || signedDivisionOverflows(op.kind, operandType, values[0], values[1]));
    if (traps && conditional_ > 0)
      return std::nullopt;
    if (traps && values[1] == 0)
      fail(op.loc, fmt::format("division by zero in '{}'", op.name()));
    if (traps)
      fail(op.loc, fmt::format("'{}' of {} by {} overflows {}", op.name(), values[0], values[1],
                               elemName(op.result()->type.elem)));
    return foldInteger(op.kind, operandType, op.result()->type.elem, values,
                       op.kind == OpKind::CmpI ? predicate(op) : std::string());
  }

  void refineTypes(Op &op) {
    switch (op.kind) {
    case OpKind::TensorEmpty: {
      // Sizes that fold are baked in; a size that depends on a runtime dim stays an operand.
      Type type = op.result()->type;
      std::vector<Value *> runtimeSizes;
      size_t next = 0;
      for (int64_t d = 0; d < type.rank(); ++d) {
        if (type.shape[d] != kDynamic)
          continue;
        Value *size = op.operands[next++];
        std::optional<int64_t> c = constantOf(size);
        if (!c) {
          runtimeSizes.push_back(size);
          continue;
        }
        if (*c < 0)
          fail(op.loc,
               fmt::format("'tensor.empty' dim {} has negative size {} (%{})", d, *c, size->name));
        type.shape[d] = *c;
      }
      op.operands = runtimeSizes;
      op.result()->type = type;
      return;
    }
    case OpKind::LinalgFill: op.result()->type = op.operands[1]->type; return;
    case OpKind::TensorExpandShape:
    case OpKind::TensorCollapseShape: refineView(op); return;
    case OpKind::TensorExtractSlice:
    case OpKind::TensorInsertSlice: refineSlice(op); return;
    case OpKind::TensorConcat: {
      const Type &declared = op.result()->type;
      op.result()->type.shape = keepDeclaredDims(declared.shape, concatShape(op, declared));
      return;
    }
    case OpKind::TensorCast: {
      const Type &from = op.operands[0]->type, &to = op.result()->type;
      for (int64_t d = 0; d < to.rank(); ++d)
        if (differ(to.shape[d], from.shape[d]))
          fail(op.loc,
               fmt::format("'tensor.cast' to '{}': dim {} is {}", to.str(), d, from.shape[d]));
      op.result()->type.shape = keepDeclaredDims(to.shape, from.shape);
      return;
    }
    case OpKind::TopK: {
      int64_t d = op.attr("dimension").integer();
      int64_t ins = op.attr("num_inputs").integer();
      const Type &x = op.operands[0]->type;
      for (int r = 0; r < 2; ++r) {
        const Type &out = op.operands[ins + r]->type;
        for (int64_t k = 0; k < x.rank(); ++k)
          if (k != d && differ(out.shape[k], x.shape[k]))
            fail(op.loc, fmt::format("topk output dim {} is {} but the input's is {}", k,
                                     out.shape[k], x.shape[k]));
        op.result(r)->type = out;
      }
      if (x.shape[d] != kDynamic && op.operands[ins]->type.shape[d] > x.shape[d])
        fail(op.loc, fmt::format("topk selects {} of only {} elements along dim {}",
                                 op.operands[ins]->type.shape[d], x.shape[d], d));
      return;
    }
    case OpKind::ScfFor:
      for (size_t r = 0; r < op.results.size(); ++r)
        op.result(static_cast<int>(r))->type = op.operands[3 + r]->type;
      return;
    case OpKind::LinalgGeneric:
    case OpKind::Attention:
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
      // Compared with the first static size: runtime sizes are checked by the kernel.
      auto [firstOperand, firstDim] = sources[d][0];
      for (auto [operand, dim] : sources[d])
        if (op.operands[operand]->type.shape[dim] != kDynamic) {
          std::tie(firstOperand, firstDim) = std::pair(operand, dim);
          break;
        }
      int64_t extent = op.operands[firstOperand]->type.shape[firstDim];
      for (auto [operand, dim] : sources[d]) {
        int64_t size = op.operands[operand]->type.shape[dim];
        if (differ(size, extent))
          fail(op.loc, fmt::format("loop dim d{} of '{}' has extent {} from {} but "
                                   "{} from {}",
                                   d, displayName(op), extent,
                                   describeOperandDim(op, firstOperand, firstDim), size,
                                   describeOperandDim(op, operand, dim)));
      }
    }
    // Constant map results must fall inside the operand.
    for (size_t i = 0; i < maps.size(); ++i) {
      const AffineMap &map = maps[i].map();
      for (size_t r = 0; r < map.results.size(); ++r)
        if (map.results[r].isConstant && op.operands[i]->type.shape[r] != kDynamic &&
            map.results[r].value >= op.operands[i]->type.shape[r])
          fail(op.loc, fmt::format("indexing map #{} reads index {} of {}, which has size {}", i,
                                   map.results[r].value,
                                   describeOperandDim(op, static_cast<int>(i), static_cast<int>(r)),
                                   op.operands[i]->type.shape[r]));
    }
  }

  FuncOp &fn_;
  bool shapes_;
  int conditional_ = 0; // how many scf.if regions enclose the ops being folded
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

// A collapse, or a generic of no tensor inputs whose body cannot stop the kernel: they do
// nothing but make their result (a causal mask that every reader computes from its indices
// instead). Not an expand, which checks that its sizes multiply to its source's, nor a generic
// of tensor inputs, whose extents must agree, nor an integer division, which checks its divisor,
// nor a tensor.extract, which checks its indices: a call reports those wherever their result
// goes.
static bool onlyMakesItsResult(const Op &op) {
  if (op.kind == OpKind::TensorCollapseShape)
    return true;
  if (op.kind != OpKind::LinalgGeneric)
    return false;
  GenericView g{const_cast<Op &>(op)};
  for (int i = 0; i < g.numInputs(); ++i)
    if (g.input(i)->type.isTensor())
      return false;
  bool canStop = false;
  walk(*op.regions[0], [&](const Op &inner) {
    canStop |= inner.kind == OpKind::DivSI || inner.kind == OpKind::DivUI ||
               inner.kind == OpKind::RemSI || inner.kind == OpKind::RemUI ||
               inner.kind == OpKind::TensorExtract;
  });
  return !canStop;
}

void removeDeadOps(Block &block) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = block.ops.size(); i-- > 0;) {
      Op &op = *block.ops[i];
      bool removable = isPureScalarOp(op.kind) || op.kind == OpKind::TensorDim ||
                       op.kind == OpKind::TensorEmpty || onlyMakesItsResult(op);
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
  Specializer s(*copy, true);
  s.bindArguments(args);
  s.run(*copy->body);
  s.finish();
  if (explain) {
    for (size_t i = 0; i < args.size(); ++i) {
      std::string arg = argumentName(fn, i);
      const Type &declared = fn.argTypes[i];
      if (declared.isTensor()) {
        std::vector<std::string> baked, runtime;
        for (int64_t d = 0; d < declared.rank(); ++d) {
          if (args[i].type.shape[d] == kDynamic)
            runtime.push_back(fmt::format("dim {}", d));
          else if (declared.shape[d] == kDynamic)
            baked.push_back(fmt::format("dim {} = {}", d, args[i].type.shape[d]));
        }
        std::string line = fmt::format("{}: {} -> {}", arg, declared.str(), args[i].type.str());
        if (!baked.empty())
          line += fmt::format(", baked in: {}", fmt::join(baked, ", "));
        if (!runtime.empty())
          line += fmt::format(", runtime: {}", fmt::join(runtime, ", "));
        explain->push_back(line);
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

std::unique_ptr<FuncOp> bindFlags(const FuncOp &fn, const std::vector<ArgSpec> &args) {
  checkArguments(fn, args);
  auto copy = cloneFunction(fn);
  Specializer s(*copy, false);
  s.bindArguments(args);
  s.run(*copy->body);
  s.finish();
  return copy;
}

} // namespace frank
