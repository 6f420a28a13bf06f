// Tensor IR to loop IR.
#include "loops/LowerToLoops.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "transforms/Specialize.h"

#include <functional>
#include <set>
#include <unordered_map>

namespace frank {
namespace {

using namespace loops;

struct TensorStorage {
  int buffer = -1;
  std::vector<Expr> dims;
};

class Lowering {
public:
  Lowering(const FuncOp &fn, Mode mode, const std::string &name) : fn_(fn), mode_(mode) {
    out_.program.name = name;
  }

  LoweredKernel run() {
    bindArguments();
    planOutputs();
    for (auto &op : fn_.body->ops)
      lowerOp(*op);
    out_.program.workspaceBytes = workspaceBytes_;
    return std::move(out_);
  }

private:
  bool specialized() const { return mode_ == Mode::Specialized; }

  std::string freshName(const std::string &hint) {
    std::string base = hint.empty() ? "t" : hint;
    for (char &c : base)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
        c = '_';
    std::string name = base;
    for (int i = 1; !usedNames_.insert(name).second; ++i)
      name = fmt::format("{}_{}", base, i);
    return name;
  }

  void bindArguments() {
    int inputSlot = 0;
    for (size_t i = 0; i < fn_.body->arguments.size(); ++i) {
      const Value *arg = fn_.body->arguments[i].get();
      if (arg->type.isTensor()) {
        TensorStorage storage;
        for (int64_t d = 0; d < arg->type.rank(); ++d) {
          if (arg->type.shape[d] != kDynamic) {
            storage.dims.push_back(intConst(arg->type.shape[d]));
          } else {
            storage.dims.push_back(dimParam(out_.program.numDimParams++));
            out_.dimParamSources.push_back({static_cast<int>(i), static_cast<int>(d)});
          }
        }
        Buffer buffer{freshName(arg->name),      arg->type.elem, BufferRole::Input, inputSlot++,
                      numElements(storage.dims), nullptr};
        storage.buffer = addBuffer(buffer);
        tensors_[arg] = storage;
        out_.inputArgs.push_back(static_cast<int>(i));
      } else if (arg->type.isScalar()) {
        int slot = static_cast<int>(out_.program.scalarParams.size());
        out_.program.scalarParams.push_back(arg->type.elem);
        out_.scalarParamArgs.push_back(static_cast<int>(i));
        scalars_[arg] = scalarParam(slot, arg->type.elem);
      } else {
        fail(arg->loc, fmt::format("unsupported argument type '{}'", arg->type.str()));
      }
    }
  }

  int addBuffer(Buffer b) {
    out_.program.buffers.push_back(std::move(b));
    return static_cast<int>(out_.program.buffers.size()) - 1;
  }

  static Expr numElements(const std::vector<Expr> &dims) {
    Expr n = intConst(1);
    for (const Expr &d : dims)
      n = mul(n, d);
    return n;
  }

  bool isArgument(const Value *v) const { return v->ownerBlock == fn_.body.get(); }

  // The value whose buffer `v` is written into (see the buffer plan in the header).
  const Value *storageRoot(const Value *v) const {
    const Op *def = v->definingOp;
    if (!def || (def->kind != OpKind::LinalgFill && def->kind != OpKind::LinalgGeneric))
      return v;
    const Value *outs = def->operands.back();
    if (countUses(*fn_.body, outs) != 1)
      return v;
    const Value *root = storageRoot(outs);
    return isArgument(root) ? v : root;
  }

  void planOutputs() {
    const Op *ret = fn_.body->terminator();
    for (size_t k = 0; k < ret->operands.size(); ++k) {
      const Value *v = ret->operands[k];
      if (!v->type.isTensor())
        fail(ret->loc, "unsupported: returning a scalar");
      const Value *root = storageRoot(v);
      bool shared = isArgument(root) || outputOfRoot_.count(root);
      if (!shared)
        outputOfRoot_[root] = static_cast<int>(k);
    }
  }

  int bufferForRoot(const Value *root, const std::vector<Expr> &dims) {
    auto it = outputOfRoot_.find(root);
    Expr count = numElements(dims);
    if (it != outputOfRoot_.end())
      return addBuffer({freshName("out" + std::to_string(it->second)), root->type.elem,
                        BufferRole::Output, it->second, count, nullptr});
    Buffer temp{freshName(root->name), root->type.elem, BufferRole::Temp, 0, count,
                workspaceBytes_};
    // Keep every temporary 64-byte aligned.
    Expr bytes = mul(count, intConst(std::max(1, elemBits(root->type.elem) / 8)));
    Expr rounded = binary(
        OpKind::MulI, binary(OpKind::DivSI, add(bytes, intConst(63)), intConst(64)), intConst(64));
    if (auto c = asConstant(bytes))
      rounded = intConst((*c + 63) / 64 * 64);
    workspaceBytes_ = add(workspaceBytes_, rounded);
    return addBuffer(temp);
  }

  // Row-major linear index of `coords` in a tensor with `dims`.
  static Expr linearIndex(const std::vector<Expr> &coords, const std::vector<Expr> &dims) {
    Expr index = intConst(0);
    Expr stride = intConst(1);
    for (size_t r = coords.size(); r-- > 0;) {
      index = add(index, mul(coords[r], stride));
      stride = mul(stride, dims[r]);
    }
    return index;
  }

  Expr scalarOf(const Value *v) {
    auto it = scalars_.find(v);
    if (it == scalars_.end())
      internalError(fmt::format("no loop-IR value for '%{}'", v->name));
    return it->second;
  }

  const TensorStorage &storageOf(const Value *v) {
    auto it = tensors_.find(v);
    if (it == tensors_.end())
      internalError(fmt::format("no buffer for '%{}'", v->name));
    return it->second;
  }

  // arith and math ops on already-lowered operands.
  static Expr scalarExpr(const Op &op, const std::vector<Expr> &args) {
    ElemKind type = op.results.empty() ? ElemKind::F32 : op.result()->type.elem;
    if (op.kind == OpKind::ArithConstant) {
      const Literal &lit = constantValue(op);
      if (lit.kind == Literal::Kind::Float)
        return floatConst(lit.f, type);
      return intConst(lit.i, type);
    }
    if (isArithBinary(op.kind))
      return binary(op.kind, args[0], args[1]);
    if (isMathUnary(op.kind))
      return unary(op.kind, args[0]);
    if (op.kind == OpKind::CmpF || op.kind == OpKind::CmpI)
      return cmp(predicate(op), args[0], args[1]);
    if (op.kind == OpKind::Select)
      return select(args[0], args[1], args[2]);
    if (isCast(op.kind))
      return cast(op.kind, args[0], type);
    fail(op.loc, fmt::format("unsupported op '{}' in this position", op.name()));
  }

  void lowerOp(const Op &op) {
    auto &body = out_.program.body;
    if (isPureScalarOp(op.kind)) {
      std::vector<Expr> args;
      for (const Value *v : op.operands)
        args.push_back(scalarOf(v));
      Expr e = scalarExpr(op, args);
      // Integers stay expressions so that the host can evaluate the shapes built from them.
      if (op.kind == OpKind::ArithConstant || op.result()->type.isInteger()) {
        scalars_[op.result()] = e;
        return;
      }
      std::string name = freshName(op.result()->name);
      body.push_back(let(name, e));
      scalars_[op.result()] = var(name, e->type);
      return;
    }
    switch (op.kind) {
    case OpKind::TensorDim: {
      auto index = asConstant(scalarOf(op.operands[1]));
      const TensorStorage &t = storageOf(op.operands[0]);
      if (!index || *index < 0 || *index >= static_cast<int64_t>(t.dims.size()))
        fail(op.loc, "unsupported: 'tensor.dim' needs a constant, in-range dim index");
      scalars_[op.result()] = t.dims[*index];
      return;
    }
    case OpKind::TensorEmpty: {
      TensorStorage t;
      size_t next = 0;
      for (int64_t d : op.result()->type.shape)
        t.dims.push_back(d == kDynamic ? scalarOf(op.operands[next++]) : intConst(d));
      t.buffer = bufferForRoot(storageRoot(op.result()), t.dims);
      tensors_[op.result()] = t;
      return;
    }
    case OpKind::LinalgFill:
    case OpKind::LinalgGeneric: lowerDestinationOp(op); return;
    case OpKind::Return: lowerReturn(op); return;
    default: fail(op.loc, fmt::format("unsupported op '{}' at function scope", op.name()));
    }
  }

  // Fill and generic write into their `outs` buffer, or into a fresh one.
  void lowerDestinationOp(const Op &op) {
    const Value *outs = op.operands.back();
    const TensorStorage &init = storageOf(outs);
    TensorStorage result{init.buffer, init.dims};
    const Value *root = storageRoot(op.result());
    if (root != storageRoot(outs)) {
      result.buffer = bufferForRoot(root, init.dims);
      bool readsInit = op.kind == OpKind::LinalgGeneric &&
                       (!GenericView{const_cast<Op &>(op)}.allParallel() ||
                        countUses(*op.regions[0], op.regions[0]->arguments.back().get()) > 0);
      if (readsInit)
        emitCopy(init, result);
    }
    tensors_[op.result()] = result;
    if (op.kind == OpKind::LinalgFill)
      emitFill(scalarOf(op.operands[0]), result);
    else
      emitGeneric(op, result);
  }

  // Nested loops over `dims`, innermost vectorized in specialized mode; `inner` builds the body
  // from the loop variables.
  std::vector<Stmt>
  loopNest(const std::vector<Expr> &dims,
           const std::function<std::vector<Stmt>(const std::vector<Expr> &)> &inner) {
    std::vector<std::string> names;
    std::vector<Expr> vars;
    for (size_t d = 0; d < dims.size(); ++d) {
      names.push_back(freshName(fmt::format("i{}", d)));
      vars.push_back(var(names.back(), ElemKind::Index));
    }
    std::vector<Stmt> stmts = inner(vars);
    for (size_t d = dims.size(); d-- > 0;) {
      ForKind kind = specialized() && d + 1 == dims.size() ? ForKind::Vectorize : ForKind::Serial;
      stmts = {forLoop(names[d], dims[d], kind, std::move(stmts))};
    }
    return stmts;
  }

  void emitFill(Expr value, const TensorStorage &t) {
    const Buffer &b = out_.program.buffers[t.buffer];
    auto nest = loopNest(t.dims, [&](const std::vector<Expr> &iv) {
      return std::vector<Stmt>{store(t.buffer, linearIndex(iv, t.dims), value)};
    });
    (void)b;
    append(nest);
  }

  void emitCopy(const TensorStorage &from, const TensorStorage &to) {
    ElemKind elem = out_.program.buffers[from.buffer].elem;
    auto nest = loopNest(from.dims, [&](const std::vector<Expr> &iv) {
      Expr index = linearIndex(iv, from.dims);
      return std::vector<Stmt>{store(to.buffer, index, load(from.buffer, index, elem))};
    });
    append(nest);
  }

  void append(std::vector<Stmt> &stmts) {
    for (auto &s : stmts)
      out_.program.body.push_back(s);
  }

  void lowerReturn(const Op &op) {
    for (size_t k = 0; k < op.operands.size(); ++k) {
      const Value *v = op.operands[k];
      const TensorStorage &t = storageOf(v);
      out_.outputShapes.push_back(t.dims);
      out_.outputTypes.push_back(v->type.elem);
      auto it = outputOfRoot_.find(storageRoot(v));
      if (it != outputOfRoot_.end() && it->second == static_cast<int>(k))
        continue;
      // An argument, or a value already returned in another slot: copy it.
      TensorStorage dest{
          addBuffer({freshName("out" + std::to_string(k)), v->type.elem, BufferRole::Output,
                     static_cast<int>(k), numElements(t.dims), nullptr}),
          t.dims};
      emitCopy(t, dest);
    }
  }

  void emitGeneric(const Op &op, const TensorStorage &result) {
    GenericView g{const_cast<Op &>(op)};
    int numLoops = g.numLoops();
    auto sources = loopDimSources(op);
    std::vector<Expr> extents(numLoops);
    for (int d = 0; d < numLoops; ++d) {
      auto [operand, dim] = sources[d][0];
      extents[d] = operandDims(op, operand, result)[dim];
      for (auto [o, k] : sources[d]) {
        Expr other = operandDims(op, o, result)[k];
        if (asConstant(other) && asConstant(extents[d])) {
          if (*asConstant(other) != *asConstant(extents[d]))
            internalError("extent mismatch survived specialization");
          continue;
        }
        if (other != extents[d])
          out_.constraints.push_back(
              {extents[d], other, op.loc,
               fmt::format("loop dim d{} of 'linalg.generic' has extent {{}} from {} but {{}} "
                           "from {}",
                           d, describeOperandDim(op, operand, dim), describeOperandDim(op, o, k))});
      }
    }
    // Accumulate in a register when every reduction loop is inside every parallel loop.
    bool hasReduction = !g.allParallel();
    bool reductionsInnermost = true;
    bool seenReduction = false;
    for (int d = 0; d < numLoops; ++d) {
      if (g.isReduction(d))
        seenReduction = true;
      else if (seenReduction)
        reductionsInnermost = false;
    }
    bool accumulate = hasReduction && reductionsInnermost;

    std::vector<std::string> names;
    std::vector<Expr> iv;
    for (int d = 0; d < numLoops; ++d) {
      names.push_back(freshName(fmt::format("d{}", d)));
      iv.push_back(var(names.back(), ElemKind::Index));
    }
    ElemKind outElem = op.result()->type.elem;
    Expr outIndex = accessIndex(g.outputMap(), iv, result.dims);
    const Value *outArg = g.body().arguments.back().get();
    std::string accName = freshName("acc");
    std::vector<Stmt> inner;
    std::unordered_map<const Value *, Expr> values;
    for (int i = 0; i < g.numInputs(); ++i) {
      const Value *arg = g.body().arguments[i].get();
      if (countUses(g.body(), arg) == 0)
        continue;
      const Value *operand = g.input(i);
      Expr e;
      if (operand->type.isTensor()) {
        const TensorStorage &t = storageOf(operand);
        e = load(t.buffer, accessIndex(g.map(i), iv, t.dims), operand->type.elem);
        std::string name = freshName(arg->name);
        inner.push_back(let(name, e));
        e = var(name, operand->type.elem);
      } else {
        e = scalarOf(operand);
      }
      values[arg] = e;
    }
    values[outArg] = accumulate ? var(accName, outElem) : load(result.buffer, outIndex, outElem);
    Expr yielded;
    for (auto &bodyOp : g.body().ops) {
      if (bodyOp->kind == OpKind::LinalgYield) {
        yielded = lookupBody(values, bodyOp->operands[0]);
        break;
      }
      if (bodyOp->kind == OpKind::LinalgIndex) {
        values[bodyOp->result()] = iv[indexDim(*bodyOp)];
        continue;
      }
      std::vector<Expr> args;
      for (const Value *v : bodyOp->operands)
        args.push_back(lookupBody(values, v));
      Expr e = scalarExpr(*bodyOp, args);
      // Only the accumulation itself may be reassociated, and only when specialized.
      bool accumulates = accumulate && specialized() && e->kind == ExprKind::Binary &&
                         (bodyOp->operands[0] == outArg || bodyOp->operands[1] == outArg) &&
                         (bodyOp->kind == OpKind::AddF || bodyOp->kind == OpKind::MulF);
      if (accumulates)
        e = binary(e->op, e->args[0], e->args[1], true);
      if (bodyOp->kind == OpKind::ArithConstant) {
        values[bodyOp->result()] = e;
        continue;
      }
      std::string name = freshName(bodyOp->result()->name);
      inner.push_back(let(name, e));
      values[bodyOp->result()] = var(name, e->type);
    }
    if (accumulate) {
      inner.push_back(assign(accName, yielded));
    } else {
      inner.push_back(store(result.buffer, outIndex, yielded));
    }
    // Build the nest from the inside out.
    int innermost = numLoops - 1;
    std::vector<Stmt> stmts = std::move(inner);
    for (int d = numLoops; d-- > 0;) {
      bool vectorize = specialized() && d == innermost;
      stmts = {forLoop(names[d], extents[d], vectorize ? ForKind::Vectorize : ForKind::Serial,
                       std::move(stmts))};
      bool firstReduction = accumulate && g.isReduction(d) && (d == 0 || !g.isReduction(d - 1));
      if (firstReduction) {
        stmts.insert(stmts.begin(), local(accName, load(result.buffer, outIndex, outElem)));
        stmts.push_back(store(result.buffer, outIndex, var(accName, outElem)));
      }
    }
    if (numLoops == 0) {
      if (accumulate)
        internalError("reduction without loops");
    }
    append(stmts);
  }

  std::vector<Expr> operandDims(const Op &op, int operand, const TensorStorage &result) {
    if (operand == static_cast<int>(op.operands.size()) - 1)
      return result.dims;
    return storageOf(op.operands[operand]).dims;
  }

  static Expr accessIndex(const AffineMap &map, const std::vector<Expr> &iv,
                          const std::vector<Expr> &dims) {
    std::vector<Expr> coords;
    for (const AffineResult &r : map.results)
      coords.push_back(r.isConstant ? intConst(r.value) : iv[r.value]);
    return linearIndex(coords, dims);
  }

  Expr lookupBody(const std::unordered_map<const Value *, Expr> &values, const Value *v) {
    auto it = values.find(v);
    if (it != values.end())
      return it->second;
    return scalarOf(v); // captured from the function scope
  }

  const FuncOp &fn_;
  Mode mode_;
  LoweredKernel out_;
  std::unordered_map<const Value *, TensorStorage> tensors_;
  std::unordered_map<const Value *, Expr> scalars_;
  std::unordered_map<const Value *, int> outputOfRoot_;
  std::set<std::string> usedNames_;
  Expr workspaceBytes_ = intConst(0);
};

} // namespace

LoweredKernel lowerToLoops(const FuncOp &fn, Mode mode, const std::string &kernelName) {
  return Lowering(fn, mode, kernelName).run();
}

} // namespace frank
