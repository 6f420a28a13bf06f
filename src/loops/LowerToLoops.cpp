// Tensor IR to loop IR.
#include "loops/LowerToLoops.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "loops/Polynomial.h"
#include "transforms/Generalize.h"
#include "transforms/Specialize.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace frank {
namespace {

using namespace loops;

// Software prefetches of keys far apart at decode (contraction.dot's B rows, 512 bytes every
// 4 KiB) ask for one line in this many: the L2's own prefetchers bring the rest of a short row
// (the other line of its 128-byte pair, the next lines of the page) without taking an L1 fill
// buffer each, which the tile's loads need. Attention at decode (S6) took 84.2-86.7 µs with one
// prefetch per 512-byte key against 92.2-96.8 with 8 and 84.2-85.2 with none (the 2-core Xeon,
// alternating runs, one process each); on the 5th-generation Xeon 68.7-83.9 µs against 80.1-91.7
// with 8, slower in three rounds of three in one process. A packed panel's rows take a prefetch
// per line instead (emitContraction).
constexpr int64_t kLinesPerPrefetch = 8;
// A transposing pack moves square blocks of at most this many lanes through registers. S5's pack
// of K took 13% of its nest element by element (a scalar store and an extract each); 8 x 8
// blocks took S5 to 757-801 µs against 803-843 (alternating one-process runs, the Xeon), and
// 16 x 16 blocks ran as fast, but their 64 shuffles took 10 ms of machine code to compile where
// 8 x 8 blocks' 24 took 6 (element by element: 4): the causal prefill compiled in 27.5-27.9 ms,
// 22.7-22.9 and 17.9-18.2.
constexpr int kTransposeSide = 8;

constexpr int64_t kLineBytes = 64;
// A loop over a causal mask's keys runs whole vectors of this many (16 f32 with AVX-512).
constexpr int64_t kKeysAVector = 16;
// How far ahead of its reads a tile that streams several rows side by side prefetches each of
// them (see prefetchRowsAhead), farther where it computes less per line. Cold on the Xeon
// (alternating runs): contraction.ranks, S9 at 32 tokens and the MoE block at 32 tokens, took
// 4.16-4.24 and 12.6-13.1 ms at 256 bytes, 3.87-3.91 and 11.8-12.0 at 512, 3.68-3.79 and
// 11.3-11.6 at 1 KiB, 3.88-3.97 and 11.8-12.2 at 2 KiB, 4.0-4.05 and 12.2-12.6 at 4 KiB (their
// plain reads 3.7-3.8 and 11.2-11.6); contraction.choices, S9 and the MoE block at one token,
// 3.79-3.87 and 11.4-11.7 at 1 KiB, 3.61-3.64 and 10.6-11.2 at 2 KiB, 3.83-3.87 and 11.5-11.6
// at 4 KiB (plain reads 3.96-4.07 and 11.8-12.2).
constexpr int64_t kRanksPrefetchBytes = 1024;
constexpr int64_t kChoicesPrefetchBytes = 2048;

// Elements of `elem` in a cache line.
int64_t lineElemsOf(ElemKind elem) { return kLineBytes / std::max(1, elemBits(elem) / 8); }

struct TensorStorage {
  int buffer = -1;
  std::vector<Expr> dims;
};

class Lowering {
public:
  Lowering(const FuncOp &fn, Mode mode, const std::string &name, const LoweringOptions &options)
      : fn_(fn), mode_(mode), boundsChecks_(options.boundsChecks), options_(options) {
    out_.program.name = name;
  }

  LoweredKernel run() {
    current_ = &out_.program.body;
    bindArguments();
    planOutputs();
    for (auto &op : fn_.body->ops) {
      try {
        lowerOp(*op);
      } catch (const IndexOverflow &e) {
        fail(op->loc, unlocatedMessage(e));
      }
    }
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
    // Suffixes below a base's counter were taken when it last counted, and names stay taken: a
    // kernel with thousands of `t`s does not try them all again.
    std::string name = base;
    int &suffix = nextSuffix_[base];
    while (!usedNames_.insert(name).second)
      name = fmt::format("{}_{}", base, ++suffix);
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
        // The calling convention passes f32, f64 and integers; say so before compiling rather
        // than when the kernel is called.
        if (isFloatElem(arg->type.elem) && arg->type.elem != ElemKind::F32 &&
            arg->type.elem != ElemKind::F64)
          fail(arg->loc, fmt::format("unsupported argument type '{}': scalar float arguments "
                                     "must be f32 or f64",
                                     arg->type.str()));
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

  static bool isView(const Op *op) {
    return op && (op->kind == OpKind::TensorExpandShape ||
                  op->kind == OpKind::TensorCollapseShape || op->kind == OpKind::TensorCast);
  }

  // The op writes its result into this operand's storage when it may (destination passing).
  static const Value *destinationOf(const Op *op) {
    if (!op)
      return nullptr;
    switch (op->kind) {
    case OpKind::LinalgFill:
    case OpKind::LinalgGeneric: return op->operands.back();
    case OpKind::TensorInsertSlice: return op->operands[1];
    default: return nullptr;
    }
  }

  // Writing `writer`'s result into `v`'s storage is invisible to the program: every other use
  // of `v` (and of what `v` views) comes earlier in the same block and makes no alias of it.
  bool canWriteInPlace(const Value *v, const Op *writer) const {
    bool ok = true;
    auto check = [&](const Op &user) {
      for (const Value *operand : user.operands) {
        if (operand != v || &user == writer)
          continue;
        ok &= !isView(&user) && user.parentBlock == writer->parentBlock &&
              positionOf(user) < positionOf(*writer);
      }
    };
    walk(*fn_.body, check);
    if (!ok)
      return false;
    const Op *def = v->definingOp;
    return !isView(def) || canWriteInPlace(def->operands[0], def);
  }

  // Whether `writer`, writing into `v`, reads `v` only where it writes, each element before
  // it overwrites it: as an input of an all-parallel generic through the output's own map.
  // Any other read (a matmul accumulating into its own input, a transpose into its source,
  // an insert of a tensor into itself) would see elements it has already written.
  static bool readsOnlyWhereItWrites(const Op &writer, const Value *destination) {
    // The operand it writes through (destinationOf's): an insert's second, otherwise the last.
    const size_t written =
        writer.kind == OpKind::TensorInsertSlice ? 1 : writer.operands.size() - 1;
    for (size_t i = 0; i < writer.operands.size(); ++i) {
      if (i == written || writer.operands[i] != destination)
        continue;
      if (writer.kind != OpKind::LinalgGeneric)
        return false;
      GenericView g{const_cast<Op &>(writer)};
      if (!g.allParallel() || g.map(static_cast<int>(i)) != g.outputMap())
        return false;
    }
    return true;
  }

  static size_t positionOf(const Op &op) {
    const auto &ops = op.parentBlock->ops;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].get() == &op)
        return i;
    return ops.size();
  }

  // The value whose buffer `v` lives in (see the buffer plan in the header).
  const Value *storageRoot(const Value *v) const {
    const Op *def = v->definingOp;
    if (isView(def))
      return storageRoot(def->operands[0]);
    if (def && def->kind == OpKind::ScfFor) // a loop result lives in its carry
      return def->regions[0]->arguments[v->index + 1].get();
    const Value *destination = destinationOf(def);
    if (!destination || !readsOnlyWhereItWrites(*def, destination) ||
        !canWriteInPlace(destination, def))
      return v;
    const Value *root = storageRoot(destination);
    return isArgument(root) ? v : root;
  }

  void planOutputs() {
    const Op *ret = fn_.body->terminator();
    for (size_t k = 0; k < ret->operands.size(); ++k) {
      const Value *v = ret->operands[k];
      if (!v->type.isTensor())
        continue; // returned through a one-element output (see lowerReturn)
      const Value *root = storageRoot(v);
      bool shared = isArgument(root) || outputOfRoot_.count(root);
      if (!shared)
        outputOfRoot_[root] = static_cast<int>(k);
    }
  }

  void requireEqual(const Op &op, Expr a, Expr b, std::string message, bool lessOrEqual = false) {
    auto ca = asConstant(a), cb = asConstant(b);
    if (ca && cb) {
      if (lessOrEqual ? *ca > *cb : *ca != *cb)
        fail(op.loc, fmt::format(fmt::runtime(message), *ca, *cb));
      return;
    }
    // An argument's extent (dims[i]) is never negative: nothing to check when the kernel runs.
    if (lessOrEqual && ca && *ca <= 0 && b->kind == ExprKind::DimParam)
      return;
    out_.constraints.push_back(
        {std::move(a), std::move(b), op.loc, std::move(message), lessOrEqual});
  }

  static bool readsVariable(const Expr &e) {
    if (e->kind == ExprKind::Var)
      return true;
    for (const Expr &a : e->args)
      if (readsVariable(a))
        return true;
    return false;
  }

  // Whether the host can evaluate `e` from a call's dims and scalars (loops::evaluate): integer
  // arithmetic on them, nothing that reads a float.
  static bool hostEvaluable(const Expr &e) {
    if (isFloatElem(e->type))
      return false;
    switch (e->kind) {
    case ExprKind::IntConst:
    case ExprKind::DimParam:
    case ExprKind::ScalarParam: return true;
    case ExprKind::Binary:
    case ExprKind::Cmp:
    case ExprKind::Select:
    case ExprKind::Cast:
      return std::all_of(e->args.begin(), e->args.end(),
                         [](const Expr &a) { return hostEvaluable(a); });
    default: return false;
    }
  }

  static constexpr const char *kSizeChangesInLoop =
      "unsupported: a tensor whose size changes across 'scf.for' iterations";

  // A dynamic size of `op`'s result. The host evaluates sizes before each call, from the
  // call's dims and integer scalars alone.
  Expr sizeOperand(const Op &op, const Value *size) {
    Expr e = scalarOf(size);
    if (hostEvaluable(e))
      return e;
    if (current_ != &out_.program.body && readsVariable(e))
      fail(op.loc, kSizeChangesInLoop);
    fail(op.loc, fmt::format("unsupported: the size %{} is known only when the kernel runs "
                             "(sizes come from dims, integer arguments and constants, not from "
                             "floats, tensor data or loop results)",
                             size->name));
  }

  int bufferForRoot(const Value *root, const std::vector<Expr> &dims) {
    auto it = outputOfRoot_.find(root);
    Expr count = numElements(dims);
    if (readsVariable(count))
      fail(root->loc, kSizeChangesInLoop);
    if (it != outputOfRoot_.end())
      return addBuffer({freshName("out" + std::to_string(it->second)), root->type.elem,
                        BufferRole::Output, it->second, count, nullptr});
    return addTemp(root->name, root->type.elem, count);
  }

  int addTemp(const std::string &name, ElemKind elem, Expr count) {
    Buffer temp{freshName(name), elem, BufferRole::Temp, 0, count, workspaceBytes_};
    // Keep every temporary 64-byte aligned.
    Expr bytes = mul(count, intConst(std::max(1, elemBits(elem) / 8)));
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

  // Integer division by zero, and the signed division of the smallest value by -1, trap on the
  // host. A division that runs where the source runs it is checked first (checkDivision); one
  // that runs where the source might not (both branches of an scf.if in a body, a table of
  // hoisted values) divides by 1 in those cases instead (`speculative`), its result unused.
  static bool isIntegerDivision(OpKind kind) {
    return kind == OpKind::DivSI || kind == OpKind::DivUI || kind == OpKind::RemSI ||
           kind == OpKind::RemUI;
  }
  static bool isSigned(OpKind kind) { return kind == OpKind::DivSI || kind == OpKind::RemSI; }
  static Expr smallestInteger(ElemKind type) {
    return intConst(std::numeric_limits<int64_t>::min() >> (64 - elemBits(type)), type);
  }
  // Whether the divisor is a constant that can trap with no dividend.
  static bool divisionCannotTrap(const Op &op, const Expr &divisor) {
    auto c = asConstant(divisor);
    return c && *c != 0 && !(isSigned(op.kind) && *c == -1);
  }

  // Stops the kernel at `op` when its division would trap, where `guard` holds (the source runs
  // the op only there; nullptr: always).
  void checkDivision(const Op &op, const std::vector<Expr> &args, std::vector<Stmt> &into,
                     const Expr &guard = nullptr) {
    if (!isIntegerDivision(op.kind) || divisionCannotTrap(op, args[1]))
      return;
    const ElemKind type = op.result()->type.elem;
    checkInKernel(op, unlessGuard(guard, cmp("ne", args[1], intConst(0, type))), args[0], args[1],
                  fmt::format("division by zero in '{}'", op.name()), into);
    if (isSigned(op.kind))
      checkInKernel(
          op,
          unlessGuard(guard, binary(OpKind::OrI, cmp("ne", args[0], smallestInteger(type)),
                                    cmp("ne", args[1], intConst(-1, type)))),
          args[0], args[1],
          fmt::format("'{}' of {{}} by {{}} overflows {}", op.name(), elemName(type)), into);
  }

  // `holds` where `guard` holds: true where it does not (nullptr: always `holds`).
  static Expr unlessGuard(const Expr &guard, Expr holds) {
    return guard ? binary(OpKind::OrI, negation(guard), std::move(holds)) : holds;
  }
  static Expr negation(const Expr &condition) {
    return binary(OpKind::XOrI, condition, intConst(1, ElemKind::I1));
  }
  // Both conditions; nullptr stands for true.
  static Expr conjunction(const Expr &a, const Expr &b) {
    return a ? binary(OpKind::AndI, a, b) : b;
  }

  // Stops the kernel at `op` unless `holds`, with `message` formatted with `a` and `b`. A check
  // the kernel's entry always runs on values the host knows from the call's dims and scalars is
  // made on the host too, before the call: the host evaluates the output shapes first, and a
  // shape built from a value that breaks the check (a division by zero, a slice past its
  // tensor's end) would fail there without naming the op.
  void checkInKernel(const Op &op, const Expr &holds, const Expr &a, const Expr &b,
                     const std::string &message, std::vector<Stmt> &into) {
    auto &checks = out_.program.checks;
    checks.push_back({op.loc, message});
    into.push_back(check(holds, static_cast<int>(checks.size()) - 1, a, b));
    if (&into == &out_.program.body && hostEvaluable(holds) && hostEvaluable(a) && hostEvaluable(b))
      out_.constraints.push_back({a, b, op.loc, message, false, holds});
  }

  // arith and math ops on already-lowered operands.
  static Expr scalarExpr(const Op &op, const std::vector<Expr> &args, bool speculative = false) {
    ElemKind type = op.results.empty() ? ElemKind::F32 : op.result()->type.elem;
    if (op.kind == OpKind::ArithConstant) {
      const Literal &lit = constantValue(op);
      if (lit.kind == Literal::Kind::Float)
        return floatConst(lit.f, type);
      return intConst(lit.i, type);
    }
    if (speculative && isIntegerDivision(op.kind) && !divisionCannotTrap(op, args[1])) {
      Expr traps = cmp("eq", args[1], intConst(0, type));
      if (isSigned(op.kind))
        traps = binary(OpKind::OrI, traps,
                       binary(OpKind::AndI, cmp("eq", args[0], smallestInteger(type)),
                              cmp("eq", args[1], intConst(-1, type))));
      return binary(op.kind, args[0], select(traps, intConst(1, type), args[1]));
    }
    if (isArithBinary(op.kind))
      return binary(op.kind, args[0], args[1]);
    if (isMathUnary(op.kind))
      return unary(op.kind, args[0]);
    if (op.kind == OpKind::CmpF || op.kind == OpKind::CmpI)
      return cmp(predicate(op), args[0], args[1]);
    if (op.kind == OpKind::Select)
      return select(args[0], args[1], args[2]);
    // An extf of an input read at its wider type already (widensTo).
    if (op.kind == OpKind::ExtF && args[0]->type == type)
      return args[0];
    if (isCast(op.kind))
      return cast(op.kind, args[0], type);
    fail(op.loc, fmt::format("unsupported op '{}' in this position", op.name()));
  }

  void lowerOp(const Op &op) {
    if (pendingFill_ && pendingFill_->consumer != &op)
      flushPendingFill();
    auto &body = *current_;
    if (op.kind == OpKind::ArithConstant && op.result()->type.isTensor()) {
      lowerDenseConstant(op);
      return;
    }
    if (isPureScalarOp(op.kind)) {
      std::vector<Expr> args;
      for (const Value *v : op.operands)
        args.push_back(scalarOf(v));
      checkDivision(op, args, body);
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
      const auto &shape = op.result()->type.shape;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] != kDynamic) {
          t.dims.push_back(intConst(shape[d]));
          continue;
        }
        const Value *size = op.operands[next++];
        t.dims.push_back(sizeOperand(op, size));
        // Specialization rejects a negative size when it folds; a runtime size is checked per
        // call, with the same message.
        requireEqual(
            op, intConst(0), t.dims.back(),
            fmt::format("'tensor.empty' dim {} has negative size {{1}} (%{})", d, size->name),
            true);
      }
      t.buffer = bufferForRoot(storageRoot(op.result()), t.dims);
      tensors_[op.result()] = t;
      return;
    }
    case OpKind::LinalgFill:
    case OpKind::LinalgGeneric: lowerDestinationOp(op); return;
    case OpKind::TensorExtract:
      scalars_[op.result()] = bindLet(op.result(), extractExpr(op, {}, *current_), *current_);
      return;
    case OpKind::AssumeInt: scalars_[op.result()] = scalarOf(op.operands[0]); return;
    case OpKind::TensorExpandShape:
    case OpKind::TensorCollapseShape:
    case OpKind::TensorCast: lowerView(op); return;
    case OpKind::TensorExtractSlice:
    case OpKind::TensorInsertSlice: lowerSlice(op); return;
    case OpKind::TensorConcat: lowerConcat(op); return;
    case OpKind::TopK: lowerTopK(op); return;
    case OpKind::ScfIf: fail(op.loc, kUnknownBranchError);
    case OpKind::ScfFor: lowerFor(op); return;
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
      flushPendingFill(); // the copy reads the filled init
      result.buffer = bufferForRoot(root, init.dims);
      bool readsInit = op.kind == OpKind::LinalgGeneric &&
                       (!GenericView{const_cast<Op &>(op)}.allParallel() ||
                        countUses(*op.regions[0], op.regions[0]->arguments.back().get()) > 0);
      if (readsInit)
        emitCopy(init, result);
    }
    tensors_[op.result()] = result;
    if (op.kind != OpKind::LinalgFill)
      emitGeneric(op, result);
    else if (const Op *consumer = soleNextConsumer(op); consumer && specialized())
      pendingFill_ = PendingFill{consumer, scalarOf(op.operands[0]), result};
    else
      emitFill(scalarOf(op.operands[0]), result);
  }

  // A fill whose result only the next op reads, as its `outs`: the tensor a contraction
  // accumulates into. The fill waits for that op (pendingFill_): a contraction whose tiles
  // run the whole reduction at once starts its accumulators at the fill's value instead of
  // loading them, and the fill is never written (attention at S5 fills 4 MiB a call so); one
  // whose tiles run k block after k block starts them so on the first k block (S7's 2 MiB
  // fill ran on one thread before the matmul). Anything else writes the fill first.
  struct PendingFill {
    const Op *consumer;
    Expr value;
    TensorStorage storage;
  };

  static const Op *soleNextConsumer(const Op &fill) {
    const Block *block = fill.parentBlock;
    if (!block || countUses(*block, fill.result()) != 1)
      return nullptr;
    for (size_t i = 0; i + 1 < block->ops.size(); ++i)
      if (block->ops[i].get() == &fill) {
        const Op *next = block->ops[i + 1].get();
        bool accumulates = next->kind == OpKind::LinalgGeneric &&
                           next->operands.back() == fill.result() &&
                           !GenericView{const_cast<Op &>(*next)}.allParallel();
        return accumulates ? next : nullptr;
      }
    return nullptr;
  }

  void flushPendingFill() {
    if (auto fill = std::exchange(pendingFill_, std::nullopt))
      emitFill(fill->value, fill->storage);
  }

  // The fill the contraction lowering `op` may start from instead of its output, or null (and
  // any fill waiting is written).
  Expr takeFillFor(const Op &op, bool tilesStartFromFill) {
    if (!pendingFill_ || pendingFill_->consumer != &op || !tilesStartFromFill) {
      flushPendingFill();
      return nullptr;
    }
    return std::exchange(pendingFill_, std::nullopt)->value;
  }

  // The outermost loop of a specialized nest runs on several threads when it is a parallel dim
  // and the nest is large: each thread gets at least kMinChunkElements points, since waking a
  // thread costs microseconds. Generic mode stays single-threaded, as a baseline should.
  static constexpr int64_t kMinParallelElements = 1 << 16;
  static constexpr int64_t kMinChunkElements = 1 << 14;
  // k-blocked slot tiles run in parallel over this many parts of their rows, each part's k
  // blocks inside (emitSlotTiles): a few per thread, rows contiguous within each.
  static constexpr int64_t kRowParts = 8;
  static constexpr int64_t kMinRuntimeRowElements = 1 << 8;

  // The cost of one point of a body in units of a load, an add and a store: exp or a libm call
  // is some 12 to 30 vector instructions per vector (MathFunctions.cpp), a divide or a square
  // root a few.
  static int64_t pointCost(const Block &body) {
    int64_t cost = 1;
    for (const auto &op : body.ops) {
      switch (op->kind) {
      case OpKind::Exp:
      case OpKind::Exp2:
      case OpKind::Log:
      case OpKind::Tanh:
      case OpKind::Sin:
      case OpKind::Cos:
      case OpKind::Erf:
      case OpKind::PowF: cost += 8; break;
      case OpKind::DivF:
      case OpKind::RemF:
      case OpKind::Sqrt:
      case OpKind::Rsqrt: cost += 2; break;
      default: break;
      }
    }
    return cost;
  }

  // result[index] += value: how the gather and dot pipelines add a finished sum to the output.
  static Stmt addToOutput(const TensorStorage &result, Expr index, Expr value, ElemKind elem) {
    return store(result.buffer, index,
                 binary(OpKind::AddF, load(result.buffer, index, elem), std::move(value)));
  }

  // The fewest iterations of a parallel loop worth giving one thread, for iterations of
  // `perIteration` points: a number when that is a constant, else computed when the kernel
  // runs, where a nest too small for two chunks then runs on one thread.
  static Expr chunkFor(const Expr &perIteration) {
    if (auto points = asConstant(perIteration))
      return intConst(std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(1, *points)));
    auto atLeast1 = [](Expr x) { return binary(OpKind::MaxSI, std::move(x), intConst(1)); };
    return atLeast1(binary(OpKind::DivSI, intConst(kMinChunkElements), atLeast1(perIteration)));
  }

  // The same for a parallel loop of `extent` trips in a nest of `total` points.
  static Expr minChunk(int64_t total, int64_t extent) { return chunkFor(intConst(total / extent)); }
  static Expr runtimeChunk(const Expr &total, const Expr &extent) {
    auto t = asConstant(total), e = asConstant(extent);
    if (t && e)
      return minChunk(*t, *e);
    return chunkFor(binary(OpKind::DivSI, total, binary(OpKind::MaxSI, extent, intConst(1))));
  }

  // The loop to parallelize is the first of extent >= 2 under loops of extent 1 (a [1, 32, N]
  // nest parallelizes over the 32); it must be a parallel dim. With runtime extents (partial
  // specialization) the loop is the first whose extent is not the constant 1, and the chunk
  // size is computed when the kernel runs: a nest too small for two chunks runs on one thread.
  // `pointCost` weighs each point by its body (pointCost below), so that a short nest of
  // exponentials (a decode softmax) runs on every thread while a short copy does not.
  void markParallel(std::vector<Stmt> &nest, const std::vector<Expr> &extents,
                    const std::vector<bool> &reductions, int64_t pointCost = 1) const {
    if (!specialized() || extents.empty())
      return;
    int64_t constantTotal = pointCost;
    bool runtime = false;
    for (const Expr &e : extents) {
      auto c = asConstant(e);
      runtime = runtime || !c;
      constantTotal = saturatingMul(constantTotal, c.value_or(1));
    }
    if (constantTotal == 0 || (!runtime && constantTotal < kMinParallelElements))
      return;
    std::vector<Stmt> *level = &nest;
    for (size_t d = 0; d < extents.size(); ++d) {
      if (reductions[d] || level->size() != 1 || (*level)[0]->kind != StmtKind::For)
        return;
      Stmt loop = (*level)[0];
      auto extent = asConstant(extents[d]);
      if (!extent || *extent >= 2) {
        if (!runtime) {
          loop->forKind = ForKind::Parallel;
          loop->bound = minChunk(constantTotal, *extent);
          return;
        }
        // kMinChunkElements / (the points under one iteration, at least 1). A loop over
        // runtime rows of a few points each stays serial: it would take rows by the thousand
        // to be worth two threads.
        Expr inner = intConst(pointCost);
        for (size_t k = d + 1; k < extents.size(); ++k)
          inner = mul(inner, extents[k]);
        const std::optional<int64_t> points = asConstant(inner);
        if (points && *points < kMinRuntimeRowElements)
          return;
        loop->forKind = ForKind::Parallel;
        loop->bound = chunkFor(inner);
        return;
      }
      level = &loop->body;
    }
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

  std::vector<Stmt> fillNest(const Expr &value, const TensorStorage &t) {
    return loopNest(t.dims, [&](const std::vector<Expr> &iv) {
      return std::vector<Stmt>{store(t.buffer, linearIndex(iv, t.dims), value)};
    });
  }

  void emitFill(Expr value, const TensorStorage &t) {
    std::vector<Stmt> nest = fillNest(value, t);
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
      current_->push_back(s);
  }

  void lowerReturn(const Op &op) {
    for (size_t k = 0; k < op.operands.size(); ++k) {
      const Value *v = op.operands[k];
      if (v->type.isScalar()) {
        // A scalar result is a rank-0 output tensor.
        int buffer = addBuffer({freshName(fmt::format("out{}", k)), v->type.elem,
                                BufferRole::Output, static_cast<int>(k), intConst(1), nullptr});
        current_->push_back(store(buffer, intConst(0), scalarOf(v)));
        out_.outputShapes.push_back({});
        out_.outputTypes.push_back(v->type.elem);
        continue;
      }
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
      // Specialization makes the extents agree, but for those a runtime dim stands between
      // (partial specialization): two constants it must equal are then an error here, and a
      // constant and a runtime extent a check when the kernel is called.
      for (auto [o, k] : sources[d]) {
        Expr other = operandDims(op, o, result)[k];
        if (other != extents[d])
          requireEqual(op, extents[d], other,
                       fmt::format("loop dim d{} of '{}' has extent {{}} from {} but {{}} from {}",
                                   d, displayName(op), describeOperandDim(op, operand, dim),
                                   describeOperandDim(op, o, k)));
      }
    }
    Strategy strategy = chooseStrategy(g, extents, result);
    if (emitOneTokenBranch(g, result, strategy, extents))
      return;
    // Only outer tiles run k blocks (their first starts from the fill). The gathers' sums read
    // back from their slots add to the fill instead of the output.
    const bool startsFromFill =
        strategy.pipeline == Pipeline::ContractionOuter ||
        (strategy.pipeline == Pipeline::ContractionDot && !strategy.blockK) ||
        strategy.pipeline == Pipeline::ContractionRanks ||
        strategy.pipeline == Pipeline::ContractionGather;
    Expr fill = takeFillFor(op, startsFromFill);
    if (strategy.pipeline == Pipeline::ContractionRanks) {
      emitRanksByTokens(g, result, strategy, extents, fill);
      return;
    }
    if (strategy.pipeline == Pipeline::ContractionGather) {
      emitCheckedGather(g, result, strategy, extents, fill);
      return;
    }
    if (strategy.pipeline == Pipeline::ContractionChoices) {
      emitChoiceLanes(g, result, strategy, extents);
      return;
    }
    if (strategy.pipeline == Pipeline::ContractionStream) {
      emitStream(g, result, strategy, extents);
      return;
    }
    if (strategy.isContraction()) {
      emitContraction(g, result, strategy, extents, fill);
      return;
    }
    const std::vector<int> order = loopOrder(g, extents, result);
    // Accumulate in a register when every reduction loop is inside every parallel loop.
    bool hasReduction = !g.allParallel();
    bool reductionsInnermost = true;
    bool seenReduction = false;
    for (int d : order) {
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
    std::vector<HoistedValue> hoisted;
    if (specialized())
      hoisted = hoistInvariantMath(g, extents);
    // The body at loop coordinates `at`: its operands loaded, its ops lowered, its value stored
    // (or accumulated).
    auto bodyAt = [&](const std::vector<Expr> &at) {
      std::vector<Stmt> stmts;
      std::unordered_map<const Value *, Expr> values;
      for (int i = 0; i < g.numInputs(); ++i) {
        const Value *arg = g.body().arguments[i].get();
        if (countUses(g.body(), arg) == 0)
          continue;
        const Value *operand = g.input(i);
        Expr e;
        if (operand->type.isTensor()) {
          const TensorStorage &t = storageOf(operand);
          e = load(t.buffer, accessIndex(g.map(i), at, t.dims), operand->type.elem);
          std::string name = freshName(arg->name);
          stmts.push_back(let(name, e));
          e = var(name, operand->type.elem);
        } else {
          e = scalarOf(operand);
        }
        values[arg] = e;
      }
      Expr outAt = accessIndex(g.outputMap(), at, result.dims);
      values[outArg] = accumulate ? var(accName, outElem) : load(result.buffer, outAt, outElem);
      for (const HoistedValue &h : hoisted) {
        std::vector<Expr> coords;
        for (int d : h.dims)
          coords.push_back(at[d]);
        values[h.value] = load(h.table, linearIndex(coords, h.tableDims), h.value->type.elem);
      }
      BodyContext body{at, extents, outArg, accumulate && specialized()};
      Expr yielded = lowerScalarBlock(g.body(), values, body, stmts);
      stmts.push_back(accumulate ? assign(accName, yielded) : store(result.buffer, outAt, yielded));
      return stmts;
    };
    // A tiny innermost parallel dim (rope's pair of 2) would leave the vectorizer a loop of 2:
    // it is unrolled instead, and the next dim vectorized. Loop levels are positions in `order`.
    int innermost = numLoops - 1;
    std::vector<Stmt> inner;
    auto constantExtent = [&](int level) {
      return level >= 0 ? asConstant(extents[order[level]]) : std::nullopt;
    };
    if (specialized() && !hasReduction && numLoops >= 2 && constantExtent(innermost) &&
        *constantExtent(innermost) <= 4 && constantExtent(innermost - 1) &&
        *constantExtent(innermost - 1) >= 8) {
      for (int64_t j = 0; j < *constantExtent(innermost); ++j) {
        std::vector<Expr> at = iv;
        at[order[innermost]] = intConst(j);
        for (Stmt &st : bodyAt(at))
          inner.push_back(st);
      }
      --innermost;
    } else {
      inner = bodyAt(iv);
    }
    // frank.visible_keys with the query's loop outside the key's: the key loop stops after the
    // last key its row sees, rounded up to whole vectors of 16 (any key past a row's own is
    // computed as the mask has it), so that the vectorized loop has no scalar rest: with one,
    // the causal S5 took 0.70-0.71 ms against 0.64-0.66 running every key.
    std::optional<VisibleKeys> visible = visibleKeys(op);
    auto levelOf = [&](int d) {
      return int(std::find(order.begin(), order.end(), d) - order.begin());
    };
    if (visible &&
        (levelOf(visible->query) > levelOf(visible->key) || levelOf(visible->key) > innermost ||
         (visible->block >= 0 && levelOf(visible->block) > levelOf(visible->key))))
      visible.reset();
    // Build the nest from the inside out.
    std::vector<Stmt> stmts = std::move(inner);
    for (int level = innermost + 1; level-- > 0;) {
      const int d = order[level];
      bool vectorize = specialized() && level == innermost;
      Expr trips = extents[d];
      if (visible && d == visible->key) {
        Expr last = lastKeySeen(*visible, iv, extents, iv[size_t(visible->query)], 1);
        Expr vectors = quotient(add(last, intConst(kKeysAVector)), kKeysAVector);
        trips = tripsUpTo(trips, mul(vectors, intConst(kKeysAVector)));
      }
      stmts = {forLoop(names[d], trips, vectorize ? ForKind::Vectorize : ForKind::Serial,
                       std::move(stmts))};

      bool firstReduction = accumulate && g.isReduction(d) &&
                            (level == 0 || !g.isReduction(order[level - 1]));
      if (firstReduction) {
        stmts.insert(stmts.begin(), local(accName, load(result.buffer, outIndex, outElem)));
        stmts.push_back(store(result.buffer, outIndex, var(accName, outElem)));
      }
    }
    std::vector<bool> reductions;
    std::vector<Expr> orderedExtents;
    for (int d : order) {
      reductions.push_back(g.isReduction(d));
      orderedExtents.push_back(extents[d]);
    }
    markParallel(stmts, orderedExtents, reductions, pointCost(g.body()));
    if (numLoops == 0) {
      if (accumulate)
        internalError("reduction without loops");
    }
    if (!stmts.empty())
      stmts[0]->comment = strategyComment(op, strategy);
    append(stmts);
  }

  // The nest's loops, outermost first: the op's order, except that in a specialized nest whose
  // output is strided along the innermost dim, a parallel dim along which the output is
  // contiguous goes innermost instead (inside the reductions), so that the vectorized loop stores whole vectors rather
  // than one lane at a time (the MoE block's weighted sum, out[t, e] over (e, k, t): 0.35 ms of
  // lane-by-lane stores at 32 tokens).
  std::vector<int> loopOrder(GenericView &g, const std::vector<Expr> &extents,
                             const TensorStorage &result) {
    const int numLoops = g.numLoops();
    std::vector<int> order(numLoops);
    std::iota(order.begin(), order.end(), 0);
    if (!specialized() || numLoops < 2)
      return order;
    for (const Expr &e : extents)
      if (!asConstant(e))
        return order;
    const std::vector<int64_t> out = stridesOf(g.outputMap(), result.dims);
    // An innermost dim shorter than a vector stores lane by lane anyway (the weighted sum at one
    // token: its loop of 1 moved outside made part of S10's kernel compile in 37 ms, not 25).
    if (out[numLoops - 1] == 1 || g.isReduction(numLoops - 1) ||
        *asConstant(extents[numLoops - 1]) < 8)
      return order;
    for (int d = 0; d < numLoops - 1; ++d)
      if (out[d] == 1 && !g.isReduction(d) && *asConstant(extents[d]) >= 8) {
        // The other parallel dims outermost (one of them runs on the threads), then the
        // reductions, in order, so that each output still sums its terms in the same order.
        std::stable_partition(order.begin(), order.end(),
                              [&](int e) { return !g.isReduction(e) && e != d; });
        order.erase(std::find(order.begin(), order.end(), d));
        order.push_back(d);
        break;
      }
    return order;
  }

  // A transcendental value of the body that depends on few of the nest's dims (rope's sin and
  // cos of the angle, which vary with position and pair but not with the head) is computed once
  // per point of those dims, in a nest of its own before this one, into a table the nest reads.
  // Worth it when the table has at most a quarter of the nest's points. Binds each hoisted
  // op's result to its table (the body then loads it, and lowerScalarBlock skips the op).
  struct HoistedValue {
    const Value *value;
    int table;
    std::vector<int> dims;       // the loop dims the table spans
    std::vector<Expr> tableDims; // their extents
  };
  std::vector<HoistedValue> hoistInvariantMath(GenericView &g, const std::vector<Expr> &extents) {
    std::vector<HoistedValue> hoisted;
    const Block &body = g.body();
    const int numLoops = g.numLoops();
    // Runtime extents count as kNominalExtent when deciding whether a table pays.
    auto nominal = [](const Expr &e) { return asConstant(e).value_or(kNominalExtent); };
    int64_t points = 1;
    for (const Expr &e : extents)
      points = saturatingMul(points, nominal(e));
    // The loop dims each value depends on; nullopt for what cannot move (reads of the
    // accumulator, extracts, regions).
    std::unordered_map<const Value *, std::optional<uint64_t>> dimsOf;
    for (int i = 0; i < g.numInputs(); ++i) {
      uint64_t mask = 0;
      for (int d = 0; d < numLoops; ++d)
        if (mapUses(g.map(i), d))
          mask |= uint64_t{1} << d;
      dimsOf[body.arguments[i].get()] = mask;
    }
    dimsOf[body.arguments.back().get()] = std::nullopt;
    auto maskOf = [&](const Value *v) -> std::optional<uint64_t> {
      auto it = dimsOf.find(v);
      return it == dimsOf.end() ? std::optional<uint64_t>(0) : it->second; // defined outside
    };
    for (auto &bodyOp : body.ops) {
      if (bodyOp->results.empty())
        continue;
      std::optional<uint64_t> mask = 0;
      if (bodyOp->kind == OpKind::LinalgIndex)
        mask = uint64_t{1} << indexDim(*bodyOp);
      else if (bodyOp->kind == OpKind::TensorExtract || !bodyOp->regions.empty())
        mask = std::nullopt;
      for (const Value *operand : bodyOp->operands) {
        auto m = maskOf(operand);
        mask = mask && m ? std::optional<uint64_t>(*mask | *m) : std::nullopt;
      }
      for (size_t r = 0; r < bodyOp->results.size(); ++r)
        dimsOf[bodyOp->result(static_cast<int>(r))] = mask;
    }
    auto expensive = [](OpKind k) {
      return k == OpKind::Sin || k == OpKind::Cos || k == OpKind::Exp || k == OpKind::Exp2 ||
             k == OpKind::Log || k == OpKind::Tanh || k == OpKind::Erf || k == OpKind::PowF;
    };
    for (auto &bodyOp : body.ops) {
      if (!expensive(bodyOp->kind) || countUses(body, bodyOp->result()) == 0)
        continue;
      std::optional<uint64_t> mask = dimsOf[bodyOp->result()];
      if (!mask)
        continue;
      std::vector<int> dims;
      int64_t tablePoints = 1;
      for (int d = 0; d < numLoops; ++d)
        if (*mask >> d & 1) {
          dims.push_back(d);
          tablePoints = saturatingMul(tablePoints, nominal(extents[d]));
        }
      if (saturatingMul(tablePoints, 4) > points)
        continue;
      // The ops the value needs, in body order, lowered over the table's dims only.
      std::unordered_set<const Op *> cone;
      std::function<void(const Value *)> need = [&](const Value *v) {
        const Op *def = v->definingOp;
        if (!def || def->parentBlock != &body || !cone.insert(def).second)
          return;
        for (const Value *operand : def->operands)
          need(operand);
      };
      need(bodyOp->result());
      std::vector<Expr> tableDims;
      for (int d : dims)
        tableDims.push_back(extents[d]);
      ElemKind elem = bodyOp->result()->type.elem;
      Expr tableSize = numElements(tableDims);
      int table = addTemp(freshName(bodyOp->result()->name + "_table"), elem, tableSize);
      std::vector<Stmt> nest = loopNest(tableDims, [&](const std::vector<Expr> &tableVars) {
        std::vector<Expr> at(numLoops, intConst(0));
        for (size_t j = 0; j < dims.size(); ++j)
          at[dims[j]] = tableVars[j];
        std::vector<Stmt> stmts;
        std::unordered_map<const Value *, Expr> tableValues;
        for (auto &op : body.ops) {
          if (!cone.count(op.get()))
            continue;
          std::vector<Expr> args;
          for (const Value *operand : op->operands) {
            if (operand->isBlockArgument() && operand->ownerBlock == &body) {
              const Value *input = g.input(operand->index);
              if (!input->type.isTensor()) {
                args.push_back(scalarOf(input));
                continue;
              }
              const TensorStorage &t = storageOf(input);
              args.push_back(load(t.buffer, accessIndex(g.map(operand->index), at, t.dims),
                                  operand->type.elem));
            } else {
              args.push_back(lookupBody(tableValues, operand));
            }
          }
          Expr e = op->kind == OpKind::LinalgIndex ? at[indexDim(*op)]
                                                   : scalarExpr(*op, args, /*speculative=*/true);
          tableValues[op->result()] =
              op->kind == OpKind::ArithConstant || op->kind == OpKind::LinalgIndex
                  ? e
                  : bindLet(op->result(), e, stmts);
        }
        stmts.push_back(
            store(table, linearIndex(tableVars, tableDims), tableValues[bodyOp->result()]));
        return stmts;
      });
      markParallel(nest, tableDims, std::vector<bool>(dims.size(), false));
      nest[0]->comment = fmt::format("'{}' varies with {} of the nest's {} dims: a table of {}",
                                     opName(bodyOp->kind), dims.size(), numLoops, print(tableSize));
      append(nest);
      hoisted.push_back({bodyOp->result(), table, dims, tableDims});
    }
    return hoisted;
  }

  // The op, where it is, and its strategy; on a contraction, the choices its author set on the
  // op are named (they hold in specialized kernels only, and only for contractions).
  std::string strategyComment(const Op &op, const Strategy &s) const {
    std::string set = specialized() && s.isContraction() && op.hasAttr(kConfigAttr)
                          ? fmt::format(" ({} \"{}\")", kConfigAttr, op.attr(kConfigAttr).string())
                          : "";
    return fmt::format("{}{}: {}{}", displayName(op), op.loc.known() ? " at " + op.loc.str() : "",
                       describe(s), set);
  }

  // Row-major element strides along each loop dim, runtime dims counted as kNominalExtent
  // (which may take a stride past 2^63: it then stays at the largest, as far as any other).
  static std::vector<int64_t> stridesOf(const AffineMap &map, const std::vector<Expr> &dims) {
    constexpr int64_t kFar = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> strides(map.numDims, 0);
    int64_t stride = 1;
    for (size_t r = map.results.size(); r-- > 0;) {
      if (!map.results[r].isConstant) {
        int64_t &s = strides[map.results[r].value];
        if (__builtin_add_overflow(s, stride, &s))
          s = kFar;
      }
      stride = saturatingMul(stride, asConstant(dims[r]).value_or(kNominalExtent));
    }
    return strides;
  }

  // Arithmetic the vector code generator takes lane by lane; with `gather`, also the ops that
  // form the folded gather gatherOf recognized.
  static bool isVectorBody(const Block &body, bool gather = false) {
    for (auto &bodyOp : body.ops) {
      switch (bodyOp->kind) {
      case OpKind::LinalgIndex:
      case OpKind::IndexCast:
      case OpKind::TensorExtract:
        if (!gather)
          return false;
        break;
      case OpKind::AddF:
      case OpKind::SubF:
      case OpKind::MulF:
      case OpKind::DivF:
      case OpKind::MaximumF:
      case OpKind::MinimumF:
      case OpKind::NegF:
      case OpKind::ExtF:
      case OpKind::LinalgYield: break;
      case OpKind::ArithConstant:
        if (!isFloatElem(bodyOp->result()->type.elem))
          return false;
        break;
      default: return false;
      }
    }
    return true;
  }

  // Input `i` of 16-bit floats that the body only widens to `elem` (bf16 or f16 weights in an f32
  // contraction): the tiles read it as `elem`, a load that widens it (LoopIR.h), and its extf
  // then has nothing left to do (scalarExpr).
  static bool widensTo(GenericView &g, int i, ElemKind elem) {
    const ElemKind narrow = g.input(i)->type.elem;
    if ((narrow != ElemKind::BF16 && narrow != ElemKind::F16) || elemBits(elem) <= 16)
      return false;
    const Value *arg = g.body().arguments[size_t(i)].get();
    int extensions = 0;
    for (auto &bodyOp : g.body().ops)
      if (bodyOp->kind == OpKind::ExtF && bodyOp->operands[0] == arg &&
          bodyOp->result()->type.elem == elem)
        ++extensions;
    return extensions > 0 && extensions == countUses(g.body(), arg);
  }

  // The body yields `acc + x` (either order) and reads the accumulator nowhere else.
  static bool addAccumulates(const Block &body) {
    const Value *acc = body.arguments.back().get();
    const Op &yield = *body.ops.back();
    if (yield.operands.size() != 1 || countUses(body, acc) != 1)
      return false;
    for (auto &bodyOp : body.ops)
      if (bodyOp->kind == OpKind::AddF && bodyOp->result() == yield.operands[0])
        return bodyOp->operands[0] == acc || bodyOp->operands[1] == acc;
    return false;
  }

  // The body's one tensor.extract, or null when it has none or several.
  static const Op *soleExtract(const Block &body) {
    const Op *extract = nullptr;
    for (auto &bodyOp : body.ops)
      if (bodyOp->kind == OpKind::TensorExtract) {
        if (extract)
          return nullptr;
        extract = bodyOp.get();
      }
    return extract;
  }

  // A folded gather (NestShape::Gather): the body's one tensor.extract reads a tensor of
  // constant dims at loop indices (linalg.index), except the last index: an index_cast of an
  // integer input. Those ops serve the extract alone.
  std::optional<NestShape::Gather> gatherOf(GenericView &g) {
    const Block &body = g.body();
    const Op *extract = soleExtract(body);
    if (!extract || extract->operands.size() < 2)
      return std::nullopt;
    for (auto &bodyOp : body.ops)
      if (bodyOp->kind == OpKind::LinalgIndex || bodyOp->kind == OpKind::IndexCast) {
        int inExtract =
            int(std::count(extract->operands.begin(), extract->operands.end(), bodyOp->result()));
        if (inExtract == 0 || countUses(body, bodyOp->result()) != inExtract)
          return std::nullopt;
      }
    const std::vector<Expr> &dims = storageOf(extract->operands[0]).dims;
    NestShape::Gather gather;
    gather.strides.assign(g.numLoops(), 0);
    int64_t stride = 1;
    for (size_t i = extract->operands.size(); i-- > 1;) {
      auto extent = asConstant(dims[i - 1]);
      const Op *index = extract->operands[i]->definingOp;
      if (!extent || !index)
        return std::nullopt;
      bool last = i + 1 == extract->operands.size();
      if (last) {
        const Value *choice = index->kind == OpKind::IndexCast ? index->operands[0] : nullptr;
        if (!choice || choice->ownerBlock != &body || choice->index >= g.numInputs() ||
            !g.input(choice->index)->type.isTensor() ||
            isFloatElem(g.input(choice->index)->type.elem))
          return std::nullopt;
        gather.indexInput = choice->index;
        gather.choices = *extent;
      } else {
        if (index->kind != OpKind::LinalgIndex)
          return std::nullopt;
        gather.strides[indexDim(*index)] += stride;
      }
      stride *= *extent;
    }
    return gather;
  }

  static std::vector<Expr> withTokens(std::vector<Expr> extents, int tokens, int64_t count) {
    extents[size_t(tokens)] = intConst(count);
    return extents;
  }

  // The strategy for `extents`, or none when a lowering override that the general nest takes
  // does not fit them.
  std::optional<Strategy> strategyIfItFits(GenericView &g, const std::vector<Expr> &extents,
                                           const TensorStorage &result) {
    try {
      return chooseStrategy(g, extents, result);
    } catch (const InternalError &) {
      throw;
    } catch (const Error &) {
      return std::nullopt;
    }
  }

  // The rows a runtime m's padded streams take: each tier this many more than the one before, up
  // to kMaxStreamTierRows. A tier of 12 rows would run 9 to 12 rows by 4096x4096 in 2.5 ms
  // against the tiles' 2.9, but it made the partly specialized matmul compile in 100 ms instead
  // of 70 (30 before the tiers).
  static constexpr int64_t kStreamTier = 4;
  static constexpr int64_t kMaxStreamTierRows = 8;

  // Partial specialization keeps the token count a runtime value, so that one kernel serves
  // prefill and decode; but the general nests serve a decode step's single token poorly. A
  // matmul's tiles stream its one row of output through B in column stripes (S8: 3.5 ms against
  // 2.0 specialized); mul_mat_id's ranks permute each row of weights into a tile of slots of
  // which a decode step's pairs fill one vector in four (S9 at one token: 4.0 ms against 3.4).
  // When the token count is the only runtime extent and one token takes the pipeline the
  // specialized kernel would (contraction.stream for a matmul's rows, contraction.choices for
  // mul_mat_id's pairs), the kernel branches on it: `if tokens == 1` that pipeline, else the
  // general one. Returns whether it emitted the branch.
  bool emitOneTokenBranch(GenericView &g, const TensorStorage &result, const Strategy &general,
                          const std::vector<Expr> &extents) {
    if (!specialized())
      return false;
    const int tokens = onlyRuntimeDim(extents);
    if (tokens < 0)
      return false;
    Pipeline oneTokenPipeline;
    if (general.pipeline == Pipeline::ContractionOuter && general.dimM == tokens)
      oneTokenPipeline = Pipeline::ContractionStream;
    else if (general.pipeline == Pipeline::ContractionRanks) // a runtime extent only of pairs
      oneTokenPipeline = Pipeline::ContractionChoices;
    else
      return false;
    std::vector<Expr> oneToken = withTokens(extents, tokens, 1);
    std::optional<Strategy> chosen = strategyIfItFits(g, oneToken, result);
    if (!chosen || chosen->pipeline != oneTokenPipeline)
      return false;
    const Strategy &one = *chosen;
    flushPendingFill(); // every branch adds to the output as it is
    std::vector<Stmt> whenOne, otherwise;
    std::vector<Stmt> *enclosing = current_;
    current_ = &whenOne;
    if (one.pipeline == Pipeline::ContractionStream)
      emitStream(g, result, one, oneToken);
    else
      emitChoiceLanes(g, result, one, oneToken);
    // A few rows take the stream too, as the specialized kernel does, in tiers of 4 rows (up to
    // 8 with AVX-512, 4 with AVX2): the rows up to the tier's repeat the last.
    std::vector<std::pair<int64_t, std::vector<Stmt>>> tiers;
    for (int64_t rows = kStreamTier;
         one.pipeline == Pipeline::ContractionStream && one.splitK && rows <= kMaxStreamTierRows;
         rows += kStreamTier) {
      std::vector<Expr> tierExtents = withTokens(extents, tokens, rows);
      std::optional<Strategy> few = strategyIfItFits(g, tierExtents, result);
      if (!few || few->pipeline != Pipeline::ContractionStream || !few->splitK ||
          few->dimM != tokens)
        break;
      tiers.push_back({rows, {}});
      current_ = &tiers.back().second;
      emitStream(g, result, *few, tierExtents, extents[tokens]);
    }
    current_ = &otherwise;
    if (general.pipeline == Pipeline::ContractionRanks)
      emitRanksByTokens(g, result, general, extents, nullptr);
    else
      emitContraction(g, result, general, extents, nullptr);
    for (auto tier = tiers.rbegin(); tier != tiers.rend(); ++tier)
      otherwise = {ifThen(cmp("sle", extents[tokens], intConst(tier->first)),
                          std::move(tier->second), std::move(otherwise))};
    current_ = enclosing;
    current_->push_back(
        ifThen(cmp("eq", extents[tokens], intConst(1)), std::move(whenOne), std::move(otherwise)));
    return true;
  }

  // The one dim of `extents` that is a runtime value (the token count), or -1 when there are
  // none or several.
  static int onlyRuntimeDim(const std::vector<Expr> &extents) {
    int found = -1;
    for (int d = 0; d < int(extents.size()); ++d)
      if (!asConstant(extents[size_t(d)])) {
        if (found >= 0)
          return -1;
        found = d;
      }
    return found;
  }

  // The most tokens of the ranks nest that takes its k blocks for a few tokens.
  static constexpr int64_t kFewTokens = 64;

  // A runtime token count's ranks nest takes k blocks as for kNominalExtent tokens, which cut
  // the rows of weights into short runs for fewer: partly specialized, S9 at 32 tokens (cold,
  // the Xeon) took 4.8-5.0 ms in blocks of 512 against 4.0-4.1 whole, and the MoE block 14.6
  // ms against 12.6 with its gate and up projections whole; yet 256 tokens took 37.4 ms whole
  // against 22.5 in blocks. Up to kFewTokens tokens, a second copy of the nest takes the k
  // blocks the specialized kernel would take for that many (the MoE block at 32 tokens then
  // took 12.7-13.3 ms, 16.5-16.9 before, and S9 4.0-4.2, 5.5-5.7 before). Every ranks nest is
  // emitted here, after a branch for one token or not.
  void emitRanksByTokens(GenericView &g, const TensorStorage &result, const Strategy &general,
                         const std::vector<Expr> &extents, const Expr &fill) {
    const int tokens = onlyRuntimeDim(extents);
    std::optional<Strategy> few =
        tokens < 0 ? std::nullopt
                   : strategyIfItFits(g, withTokens(extents, tokens, kFewTokens), result);
    if (!few || few->pipeline != Pipeline::ContractionRanks || few->lanes != general.lanes ||
        few->blockK == general.blockK) {
      emitCheckedGather(g, result, general, extents, fill);
      return;
    }
    Strategy forFew = general;
    forFew.blockK = few->blockK;
    std::vector<Stmt> whenFew, otherwise;
    std::vector<Stmt> *enclosing = current_;
    current_ = &whenFew;
    emitCheckedGather(g, result, forFew, extents, fill);
    current_ = &otherwise;
    emitCheckedGather(g, result, general, extents, fill);
    current_ = enclosing;
    current_->push_back(ifThen(cmp("sle", extents[tokens], intConst(kFewTokens)),
                               std::move(whenFew), std::move(otherwise)));
  }

  Strategy chooseStrategy(GenericView &g, const std::vector<Expr> &extents,
                          const TensorStorage &result) {
    NestShape nest;
    ElemKind elem = g.op.result()->type.elem;
    nest.elemBits = elemBits(elem);
    bool sameTypes = isFloatElem(elem);
    bool runtime = false;
    for (int d = 0; d < g.numLoops(); ++d) {
      nest.reduction.push_back(g.isReduction(d));
      auto c = asConstant(extents[d]);
      runtime = runtime || !c;
      nest.extents.push_back(c.value_or(kNominalExtent));
      nest.runtime.push_back(!c);
    }
    if (!runtime)
      nest.runtime.clear();
    if (specialized())
      nest.gather = gatherOf(g);
    // Of runtime extents, a gather pipeline takes only the pairs' (contraction.ranks).
    for (int d = 0; d < g.numLoops() && runtime && nest.gather; ++d)
      if (nest.runtime[d] && !mapUses(g.map(nest.gather->indexInput), d))
        nest.gather.reset();
    for (int i = 0; i <= g.numInputs(); ++i) {
      const Value *operand = i < g.numInputs() ? g.input(i) : g.output();
      std::vector<int64_t> strides(g.numLoops(), 0);
      if (operand->type.isTensor()) {
        bool choices = nest.gather && nest.gather->indexInput == i;
        sameTypes = sameTypes && (operand->type.elem == elem || choices || widensTo(g, i, elem));
        strides = stridesOf(g.map(i), i < g.numInputs() ? storageOf(operand).dims : result.dims);
      }
      nest.strides.push_back(strides);
    }
    // Generic mode is the baseline: its nests stay plain loops.
    if (!specialized()) {
      nest.extents.clear();
      nest.runtime.clear();
    }
    nest.vectorBody = sameTypes && isVectorBody(g.body(), nest.gather.has_value());
    nest.addAccumulates = addAccumulates(g.body());
    nest.startsFromFill = pendingFill_ && pendingFill_->consumer == &g.op;
    try {
      if (!specialized())
        return selectStrategy(nest, options_.target);
      ConfigOverride config = options_.config;
      if (g.op.hasAttr(kConfigAttr))
        config = config.overriddenBy(parseConfig(g.op.attr(kConfigAttr).string(), kConfigAttr));
      return selectStrategy(nest, options_.target, config);
    } catch (const InternalError &) {
      throw;
    } catch (const Error &e) {
      // An override that does not fit this nest: name the op it does not fit.
      fail(g.op.loc, unlocatedMessage(e));
    }
  }

  static bool mapUses(const AffineMap &map, int dim) {
    return dim >= 0 && std::any_of(map.results.begin(), map.results.end(),
                                   [&](auto &r) { return !r.isConstant && r.value == dim; });
  }

  // A loop of `trips` that stops after `wanted` of them (none when `wanted` is negative).
  static Expr tripsUpTo(const Expr &trips, const Expr &wanted) {
    return binary(OpKind::MinSI, trips, binary(OpKind::MaxSI, wanted, intConst(0)));
  }

  // frank.visible_keys: the last key that one of `rows` query rows from `firstRow` sees, in a
  // nest of loop variables `vars` and extents `extents`.
  // Over runtime sizes the period and the offset follow the query and key dims' extents.
  static Expr lastKeySeen(const VisibleKeys &visible, const std::vector<Expr> &vars,
                          const std::vector<Expr> &extents, Expr firstRow, int rows) {
    const Expr period = visible.periodDivisor
                            ? quotient(extents[size_t(visible.query)], visible.periodDivisor)
                            : intConst(visible.period);
    Expr offset = intConst(visible.offset);
    if (visible.keyCoef)
      offset = add(offset, mul(extents[size_t(visible.key)], intConst(visible.keyCoef)));
    if (visible.periodCoef)
      offset = add(offset, mul(period, intConst(visible.periodCoef)));
    std::optional<int64_t> queries = asConstant(extents[size_t(visible.query)]);
    if (visible.block >= 0) {
      firstRow = add(mul(vars[size_t(visible.block)], intConst(visible.blockRows)), firstRow);
      queries = std::nullopt;
    }
    Expr lastRow = add(firstRow, intConst(rows - 1));
    if (!queries || !asConstant(period) || *queries > *asConstant(period))
      lastRow =
          binary(OpKind::MinSI, add(binary(OpKind::RemUI, firstRow, period), intConst(rows - 1)),
                 asConstant(period) ? intConst(*asConstant(period) - 1)
                                    : binary(OpKind::SubI, period, intConst(1)));
    // Rows that see no key (an offset below minus the row) still run key 0, which the mask
    // hides: their softmax is then NaN, as with the mask given as data (§4.6), not skipped to 0.
    Expr last = add(lastRow, offset);
    if (auto c = asConstant(offset); c && *c >= 0)
      return last;
    return binary(OpKind::MaxSI, last, intConst(0));
  }

  // The register-blocked contraction pipelines (loops/Strategy.h). The nest, outside in:
  //   outer: [other parallel dims] n blocks [k blocks] m blocks { tile }
  //      or: [other parallel dims] k blocks [blocksOutside dims] n blocks m blocks { tile }
  //      or: [other parallel dims] n groups (k block, n block) pairs m blocks { tile }
  // With packing, each (n block, k block) first copies its panel of B to a slot of its chunk's
  // region, where the m blocks then read it contiguously.
  //   dot:   [other parallel dims] m blocks n blocks [blocksOutside dims] { tile }
  // where a tile declares its MR x NR vector accumulators, runs the reduction loops (k
  // innermost) over the body instantiated once per accumulator, and stores them.
  // `fill`, when not null, is what the output holds before the nest (takeFillFor): the tiles
  // start from it instead of loading the output (outer's with k blocks, on the first).
  void emitContraction(GenericView &g, const TensorStorage &result, const Strategy &s,
                       const std::vector<Expr> &extents, const Expr &fill) {
    const Op &op = g.op;
    const bool outer = s.pipeline == Pipeline::ContractionOuter;
    const int lanes = s.lanes;
    const int vectorDim = outer ? s.dimN : s.dimK;
    const int numLoops = g.numLoops();
    // Only m, n, outer's reductions and the dims outside the tile may be runtime values (see
    // Strategy.h); a k block or a packed panel needs a constant k.
    auto extent = [&](int d) {
      auto c = asConstant(extents[d]);
      if (!c)
        internalError(fmt::format("{} with a runtime extent where it needs a constant",
                                  pipelineName(s.pipeline)));
      return *c;
    };
    std::vector<Expr> vars(numLoops);
    for (int d = 0; d < numLoops; ++d)
      vars[d] = var(freshName(fmt::format("d{}", d)), ElemKind::Index);
    Expr mBlock = var(freshName("m_block"), ElemKind::Index);
    Expr nBlock = var(freshName("n_block"), ElemKind::Index);
    Expr kBlock = var(freshName("k_block"), ElemKind::Index);
    // Groups of n blocks (s.groupN): a parallel loop over the groups, then one over the group's
    // (k block, n block) pairs, k blocks outside, binding k_block and n_block.
    const int64_t group = s.groupN;
    Expr nGroup = var(freshName("n_group"), ElemKind::Index);
    Expr pairOfBlocks = var(freshName("kn_pair"), ElemKind::Index);
    auto kBlockOf = [&](const Expr &pair) { return quotient(pair, group); };
    auto nBlockOf = [&](const Expr &pair) {
      return add(mul(nGroup, intConst(group)), binary(OpKind::RemUI, pair, intConst(group)));
    };
    const int nStep = outer ? lanes : 1;
    const Expr nBlockStart = mul(nBlock, intConst(s.tileN * nStep));
    // The loop coordinates of accumulator (r, c) of a tile starting at row `firstRow` and
    // column `firstColumn`.
    // `wholeK`: outer's columns left over, which run over all of k after the k blocks.
    auto coordinates = [&](const Expr &firstRow, const Expr &firstColumn, int r, int c,
                           bool wholeK = false) {
      std::vector<Expr> iv = vars;
      if (s.dimM >= 0)
        iv[s.dimM] = add(firstRow, intConst(r));
      if (s.dimN >= 0)
        iv[s.dimN] = add(firstColumn, intConst(c * nStep));
      if (outer && s.blockK && !wholeK)
        iv[s.dimK] = add(mul(kBlock, intConst(s.blockK)), vars[s.dimK]);
      if (!outer)
        iv[s.dimK] = mul(vars[s.dimK], intConst(lanes));
      return iv;
    };

    ElemKind elem = op.result()->type.elem;
    const bool shiftedLastBlock =
        s.dimN >= 0 && shiftsLastNBlock(s, asConstant(extents[s.dimN]), fill != nullptr);
    // It runs as the n blocks' loop's last iteration, unless there are k blocks: its tiles
    // then add each k block's products to the output, which the block before it, on another
    // thread, reads and writes as well (the columns both compute had come out with k blocks
    // counted twice). It then runs after that loop.
    const bool lastBlockInLoop = shiftedLastBlock && !s.blockK;
    // Packed B: panel after panel of (k-block x NR vectors), each contiguous.
    // A panel's rows: the k block's, else all of k, which may be a runtime extent (no k blocks
    // then, and no pack between the tiles); panelK is 0 for a runtime one.
    const Expr panelRows = s.blockK           ? intConst(s.blockK)
                           : s.packInput >= 0 ? extents[s.dimK]
                                              : intConst(0);
    const int64_t panelK = asConstant(panelRows).value_or(0);
    const int64_t panelRow = int64_t(s.tileN) * lanes;
    const bool runtimeM = s.dimM >= 0 && !asConstant(extents[s.dimM]);
    // m blocks: a runtime m counts as kNominalExtent rows.
    const int64_t mTiles =
        s.dimM < 0 ? 0 : asConstant(extents[s.dimM]).value_or(kNominalExtent) / s.tileM;
    // With k blocks, each k block's m blocks pack the next k block's panel a few rows after
    // each tile (`chunkRows`), into the other of two panel slots, while the tile prefetched
    // those rows into L2: reading B from memory then overlaps the products instead of
    // stalling a pack of the whole panel (S7 loses 14% to it). The first k block's panel is
    // packed whole, and so are the rows of a runtime m's fewer m blocks did not pack.
    const int64_t kBlocks = s.blockK ? extent(s.dimK) / s.blockK : 0; // k blocks need a constant k
    const bool interleaved = s.packInput >= 0 && !s.packTransposed && kBlocks >= 2 && mTiles >= 2;
    if (group && !interleaved)
      internalError("groups of n blocks without k blocks packed between the tiles");
    // Consecutive panels take turns in the two slots: those of a group's (k block, n block)
    // pairs, or of the k blocks without groups.
    const Expr pairNow = group ? pairOfBlocks : kBlock;
    // The fewest rows that divide the panel into at most one chunk per m block.
    int64_t chunkRows = interleaved ? (panelK + mTiles - 1) / mTiles : 1;
    while (interleaved && panelK % chunkRows)
      ++chunkRows;
    const int64_t slots = interleaved ? 2 : 1;
    int packed = -1;
    Stmt pack;
    std::vector<Stmt> packChunk; // interleaved: after each tile
    // interleaved: in each step of a tile's k loop, a prefetch of a line of the chunk it packs
    Stmt prefetchStep;
    Stmt packRest; // interleaved, runtime m: after the m blocks, the chunks none packed
    // Packed transposed: the pack of the panel whose first column is the given one.
    std::function<Stmt(const Expr &)> packTransposedFrom;
    // The pack is redone in every iteration of the parallel dims outside the tile, into the
    // region of the chunk of the parallel loop running it (`packRegion`, the chunk's first
    // iteration: chunks must not share one, and a chunk's iterations reuse its region, which
    // stays in cache: S7 2-3% faster than with a region per iteration, 8 MiB of them).
    Expr packRegion = var(freshName("pack_region"), ElemKind::Index);
    auto slotOf = [&](const Expr &pair) {
      if (auto c = asConstant(pair); c || !interleaved)
        return intConst(interleaved ? *c & 1 : 0);
      return binary(OpKind::AndI, pair, intConst(1));
    };
    auto panelAt = [&](const Expr &pair) {
      return mul(add(mul(packRegion, intConst(slots)), slotOf(pair)),
                 mul(panelRows, intConst(panelRow)));
    };
    if (s.packInput >= 0) {
      const Value *operand = g.input(s.packInput);
      const TensorStorage &t = storageOf(operand);
      // A region for each iteration of the loops that may run in parallel: the other
      // parallel dims' and the n blocks' (at most one loop of them does).
      int64_t regions = 1;
      for (int d = 0; d < numLoops; ++d)
        if (!g.isReduction(d) && d != s.dimM && d != s.dimN)
          regions *= extent(d);
      // Panels of every n block, and of the shifted last one (a region is a chunk's first
      // iteration of the parallel loop over them).
      const Expr columns =
          lastBlockInLoop ? intConst((extent(s.dimN) / panelRow + 1) * panelRow) : extents[s.dimN];
      packed = addTemp("packed_" + operand->name, elem,
                       mul(panelRows, mul(intConst(regions * slots), columns)));
      const Expr &panel = nBlock;
      Expr row = var(freshName("row"), ElemKind::Index);
      auto kAt = [&](const Expr &kb, const Expr &r) {
        return s.blockK ? add(mul(kb, intConst(s.blockK)), r) : r;
      };
      auto packedAt = [&](const Expr &pair, const Expr &r, const Expr &column) {
        return add(add(panelAt(pair), mul(r, intConst(panelRow))), column);
      };
      Expr firstK = interleaved ? intConst(0) : kBlock;
      packTransposedFrom = [&, t, firstK, row, kAt, packedAt](const Expr &firstColumn) {
        const int side = std::min(lanes, kTransposeSide);
        if (side >= 4 && panelRow % side == 0 && panelK > 0 && panelK % side == 0) {
          // Square blocks of side x side: `side` columns of the panel read along k as vectors,
          // transposed in registers (transposeInRegisters, LoopIR.h), stored as `side` rows of
          // the panel.
          Expr columnBlock = var(freshName("column_block"), ElemKind::Index);
          Expr rowBlock = var(freshName("row_block"), ElemKind::Index);
          std::vector<Stmt> body;
          std::vector<Expr> columns;
          for (int j = 0; j < side; ++j) {
            std::vector<Expr> iv = vars;
            iv[s.dimN] = add(firstColumn, add(mul(columnBlock, intConst(side)), intConst(j)));
            iv[s.dimK] = kAt(firstK, mul(rowBlock, intConst(side)));
            std::string name = freshName("column");
            body.push_back(
                let(name, load(t.buffer, accessIndex(g.map(s.packInput), iv, t.dims), elem, side)));
            columns.push_back(var(name, elem, side));
          }
          std::vector<Expr> rows =
              transposeInRegisters(columns, body, [&] { return freshName("swapped"); });
          for (int i = 0; i < side; ++i)
            body.push_back(store(packed,
                                 packedAt(firstK, add(mul(rowBlock, intConst(side)), intConst(i)),
                                          mul(columnBlock, intConst(side))),
                                 rows[size_t(i)]));
          return forLoop(
              columnBlock->name, intConst(panelRow / side), ForKind::Serial,
              {forLoop(rowBlock->name, intConst(panelK / side), ForKind::Serial, std::move(body))});
        }
        // Column after column of the panel, each read contiguously along k.
        Expr column = var(freshName("column"), ElemKind::Index);
        std::vector<Expr> iv = vars;
        iv[s.dimN] = add(firstColumn, column);
        iv[s.dimK] = kAt(firstK, row);
        Stmt copy = store(packed, packedAt(firstK, row, column),
                          load(t.buffer, accessIndex(g.map(s.packInput), iv, t.dims), elem));
        return forLoop(column->name, intConst(panelRow), ForKind::Serial,
                       {forLoop(row->name, panelRows, ForKind::Serial, {copy})});
      };
      if (s.packTransposed) {
        pack = packTransposedFrom(mul(panel, intConst(panelRow)));
      } else {
        // Row r of k block kb's panel of n block nb, into the slot of `pair`.
        auto copyRow = [&](const Expr &kb, const Expr &nb, const Expr &pair, const Expr &r) {
          std::vector<Stmt> copies;
          for (int c = 0; c < s.tileN; ++c) {
            std::vector<Expr> iv = vars;
            iv[s.dimN] = add(mul(nb, intConst(panelRow)), intConst(c * lanes));
            iv[s.dimK] = kAt(kb, r);
            copies.push_back(
                store(packed, packedAt(pair, r, intConst(c * lanes)),
                      load(t.buffer, accessIndex(g.map(s.packInput), iv, t.dims), elem, lanes)));
          }
          return copies;
        };
        // A group's first pair: k block 0 of its first n block.
        const Expr firstN = group ? mul(nGroup, intConst(group)) : panel;
        pack = forLoop(row->name, panelRows, ForKind::Serial, copyRow(firstK, firstN, firstK, row));
        if (interleaved) {
          // Tile m prefetches chunk m of the next pair's panel (the next k block's, in a group
          // the next n block's) while it computes its products, and packs it after them.
          Expr nextPair = add(pairNow, intConst(1));
          Expr next = group ? kBlockOf(nextPair) : nextPair;
          Expr nextN = group ? nBlockOf(nextPair) : panel;
          Expr hasNext = cmp("slt", nextPair, intConst(group ? kBlocks * group : kBlocks));
          Expr when =
              binary(OpKind::AndI, hasNext, cmp("slt", mBlock, intConst(panelK / chunkRows)));
          Expr chunk = mul(mBlock, intConst(chunkRows));
          // Every line of the chunk's rows: the L2's prefetchers follow no run of 256 bytes every
          // 16 KiB (S7), and with the first line alone the pack after the tile waited on the rest
          // (15% of a thread's samples in S7; on the 5th-generation Xeon, one process alternating
          // the two, `--versus`, medians of 10: S7 18.0-23.8 ms against 20.2-25.2). A line every
          // few steps of the tile's k loop, not all of them before it: issued at once, the chunk's
          // 64 prefetches of S7 left its pack 10% of the samples on the Zen 4 guest, as many when
          // they ran 2 or 4 pairs ahead; spread, 4%, and S7 ran 21.3-22.0 ms against 22.0-23.6
          // (alternating processes, medians of 7, four rounds; 32 rows 6.0-6.1 against 7.7-8.4).
          // The loop takes no branch, which would cost the tile registers (a spill a step, 28-31
          // ms): the m blocks past the chunks, and the last pair, prefetch lines already in cache.
          const int64_t lineElems = lineElemsOf(g.input(s.packInput)->type.elem);
          const int64_t linesPerRow = (panelRow + lineElems - 1) / lineElems;
          const int64_t lines = chunkRows * linesPerRow;
          const int64_t stepsPerLine = std::max<int64_t>(1, panelK / lines);
          const int64_t linesPerStep = (lines + panelK - 1) / panelK;
          const int64_t lastPair = (group ? kBlocks * group : kBlocks) - 1;
          Expr pairAhead = binary(OpKind::MinSI, nextPair, intConst(lastPair));
          Expr chunkAhead = mul(binary(OpKind::MinSI, mBlock, intConst(panelK / chunkRows - 1)),
                                intConst(chunkRows));
          std::vector<Stmt> prefetches;
          for (int64_t j = 0; j < linesPerStep; ++j) {
            Expr line =
                add(mul(quotient(vars[s.dimK], stepsPerLine), intConst(linesPerStep)), intConst(j));
            std::vector<Expr> iv = vars;
            iv[s.dimN] = mul(group ? nBlockOf(pairAhead) : panel, intConst(panelRow));
            if (linesPerRow > 1)
              iv[s.dimN] = add(iv[s.dimN], mul(binary(OpKind::RemUI, line, intConst(linesPerRow)),
                                               intConst(lineElems)));
            iv[s.dimK] = kAt(group ? kBlockOf(pairAhead) : pairAhead,
                             add(chunkAhead, quotient(line, linesPerRow)));
            prefetches.push_back(prefetch(t.buffer, accessIndex(g.map(s.packInput), iv, t.dims)));
          }
          prefetchStep = block(std::move(prefetches));
          prefetchStep->comment = fmt::format("prefetch {} of the next {} panel's {} rows",
                                              linesPerStep == 1 ? "a line" : "lines",
                                              group ? "pair's" : "k block's", chunkRows);
          Expr chunkRow = var(freshName("row"), ElemKind::Index);
          packChunk.push_back(
              ifThen(when, {forLoop(chunkRow->name, intConst(chunkRows), ForKind::Serial,
                                    copyRow(next, nextN, nextPair, add(chunk, chunkRow)))}));
          packChunk.back()->comment = "then pack them";
          if (runtimeM) {
            const int64_t chunks = panelK / chunkRows;
            Expr packedRows =
                mul(binary(OpKind::MinSI, quotient(extents[s.dimM], s.tileM), intConst(chunks)),
                    intConst(chunkRows));
            Expr rest = var(freshName("row"), ElemKind::Index);
            packRest = ifThen(
                hasNext,
                {forLoop(rest->name, binary(OpKind::SubI, intConst(panelK), packedRows),
                         ForKind::Serial, copyRow(next, nextN, nextPair, add(packedRows, rest)))});
            packRest->comment =
                fmt::format("pack the rest of the next {} panel", group ? "pair's" : "k block's");
          }
        }
      }
      pack->comment = fmt::format("pack this block's {}x{} panel of '%{}'{}",
                                  panelK ? std::to_string(panelK) : "k", panelRow, operand->name,
                                  s.packTransposed ? ", transposed" : "");
    }
    // frank.visible_keys (CausalMask.h) with the query as m and the key as n, or as outer's k: a
    // tile skips the keys none of its rows sees, as n the whole tile when its first key is past
    // them, as k the reduction steps past them.
    std::optional<VisibleKeys> visible = visibleKeys(op);
    if (visible && (visible->query != s.dimM ||
                    (visible->key != s.dimN && (visible->key != s.dimK || !outer))))
      visible.reset();
    auto lastVisibleKey = [&](const Expr &firstRow, int rows) {
      return lastKeySeen(*visible, vars, extents, firstRow, rows);
    };
    const Value *outArg = g.body().arguments.back().get();
    // dot: when a row's NR outputs are consecutive elements (n is the output's last dim), one
    // reduce_add sums the row's accumulators into an NR-lane vector added to them at once.
    const AffineMap &outMap = g.outputMap();
    const bool rowsContiguous = !outer && s.tileN > 1 && (s.tileN & (s.tileN - 1)) == 0 &&
                                s.tileN <= lanes && !outMap.results.empty() &&
                                !outMap.results.back().isConstant &&
                                outMap.results.back().value == s.dimN;
    // A tile of `rows` x `columns` accumulators (NR columns unless n has some left over):
    // declared, run through the reduction, stored. outer's vectors and columns left over
    // (`width` lanes or 1) read B in place, as the panels hold whole n blocks; they run after
    // the n blocks, outside any k blocks, over all of k.
    auto buildTile = [&](int rows, const Expr &firstRow, int columns = 0,
                         const Expr &firstColumn = nullptr, int width = 0,
                         bool prefetchNextChunk = false) {
      if (columns == 0)
        columns = s.tileN;
      const int accLanes = outer && width ? width : lanes;
      const bool wholeK = outer && width != 0;
      const Expr &column0 = firstColumn ? firstColumn : nBlockStart;
      const bool sumRows = rowsContiguous && columns == s.tileN;
      std::vector<Stmt> init, step, fini;
      std::vector<Expr> rowSums;                        // sumRows: this row's accumulators
      std::map<std::tuple<int, int, int>, Expr> loaded; // (input, row or -1, column or -1)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < columns; ++c) {
          std::vector<Expr> iv = coordinates(firstRow, column0, r, c, wholeK);
          std::unordered_map<const Value *, Expr> values;
          for (int i = 0; i < g.numInputs(); ++i) {
            const Value *arg = g.body().arguments[i].get();
            const Value *operand = g.input(i);
            if (countUses(g.body(), arg) == 0)
              continue;
            if (!operand->type.isTensor()) {
              values[arg] = scalarOf(operand);
              continue;
            }
            const AffineMap &map = g.map(i);
            auto key =
                std::make_tuple(i, mapUses(map, s.dimM) ? r : -1, mapUses(map, s.dimN) ? c : -1);
            auto &e = loaded[key];
            if (!e && i == s.packInput && !wholeK) {
              Expr at = add(add(panelAt(pairNow), mul(vars[s.dimK], intConst(panelRow))),
                            intConst(c * lanes));
              e = bindLet(arg, load(packed, at, elem, lanes), step);
            } else if (!e) {
              const TensorStorage &t = storageOf(operand);
              e = bindLet(arg,
                          load(t.buffer, accessIndex(map, iv, t.dims), operand->type.elem,
                               mapUses(map, vectorDim) ? accLanes : 1),
                          step);
            }
            values[arg] = e;
          }
          std::string acc = freshName("acc");
          values[outArg] = var(acc, elem, accLanes);
          Expr outIndex = accessIndex(g.outputMap(), iv, result.dims);
          if (outer) {
            Expr before = load(result.buffer, outIndex, elem, accLanes);
            if (fill)
              before = s.blockK && !wholeK ? select(cmp("eq", kBlock, intConst(0)),
                                                    broadcast(fill, accLanes), std::move(before))
                                           : broadcast(fill, accLanes);
            init.push_back(local(acc, std::move(before)));
            fini.push_back(store(result.buffer, outIndex, var(acc, elem, accLanes)));
          } else if (sumRows) {
            init.push_back(local(acc, broadcast(floatConst(0, elem), lanes)));
            rowSums.push_back(var(acc, elem, lanes));
            if (c == s.tileN - 1) {
              Expr first =
                  accessIndex(g.outputMap(), coordinates(firstRow, column0, r, 0), result.dims);
              Expr sums = reduceAdd(std::move(rowSums));
              rowSums.clear();
              Expr before =
                  fill ? broadcast(fill, s.tileN) : load(result.buffer, first, elem, s.tileN);
              fini.push_back(
                  store(result.buffer, first, binary(OpKind::AddF, before, std::move(sums))));
            }
          } else {
            init.push_back(local(acc, broadcast(floatConst(0, elem), lanes)));
            Expr sum = reduceAdd(var(acc, elem, lanes));
            fini.push_back(fill ? store(result.buffer, outIndex, binary(OpKind::AddF, fill, sum))
                                : addToOutput(result, outIndex, sum, elem));
          }
          BodyContext body{iv, extents, outArg, true};
          step.push_back(assign(acc, lowerScalarBlock(g.body(), values, body, step)));
        }

      // Reduction loops around the step, k innermost.
      std::vector<int> reductionOrder;
      for (int d = 0; d < numLoops; ++d)
        if (g.isReduction(d) && d != s.dimK)
          reductionOrder.push_back(d);
      if (s.dimK >= 0)
        reductionOrder.push_back(s.dimK);
      std::vector<Stmt> stmts = std::move(step);
      for (auto d = reductionOrder.rbegin(); d != reductionOrder.rend(); ++d) {
        Expr trips = extents[*d];
        if (*d == s.dimK && outer && s.blockK && !wholeK)
          trips = intConst(s.blockK);
        else if (*d == s.dimK && !outer)
          trips = intConst(extent(*d) / lanes);
        if (*d == s.dimK && visible && visible->key == s.dimK) {
          // The keys from this k block's first up to the last one a row sees.
          Expr seen = add(lastVisibleKey(firstRow, rows), intConst(1));
          if (s.blockK && !wholeK)
            seen = binary(OpKind::SubI, seen, mul(kBlock, intConst(s.blockK)));
          trips = tripsUpTo(trips, seen);
        }
        if (*d == s.dimK && prefetchNextChunk && prefetchStep)
          stmts.push_back(prefetchStep);
        stmts = {forLoop(vars[*d]->name, trips, ForKind::Serial, std::move(stmts))};
      }
      std::vector<Stmt> tile = std::move(init);
      tile.insert(tile.end(), stmts.begin(), stmts.end());
      tile.insert(tile.end(), fini.begin(), fini.end());
      if (visible && visible->key == s.dimN) {
        tile = {ifThen(cmp("sle", column0, lastVisibleKey(firstRow, rows)), std::move(tile))};
        tile[0]->comment = "unless its rows see none of its keys";
      }
      return tile;
    };
    std::vector<Stmt> stmts;
    if (s.prefetchAhead > 0)
      stmts.push_back(prefetchRowsAhead(g, s, vars, nBlock, extent(s.dimK)));
    for (Stmt &tileStmt : buildTile(s.tileM, mul(mBlock, intConst(s.tileM)), 0, nullptr, 0, true))
      stmts.push_back(tileStmt);
    stmts.insert(stmts.end(), packChunk.begin(), packChunk.end());
    Expr mTrips = intConst(0); // 0: no m loop
    int64_t mRows = 0;         // a constant M's rows
    if (runtimeM) {
      mTrips = quotient(extents[s.dimM], s.tileM);
    } else {
      mRows = s.dimM >= 0 ? extent(s.dimM) : s.tileM;
      if (mRows < s.tileM)
        internalError("a register tile taller than its nest");
      mTrips = intConst(s.dimM >= 0 ? mRows / s.tileM : 0);
    }
    const bool hasM = runtimeM || *asConstant(mTrips) > 0;
    // The rows the m blocks leave over when MR does not divide M, in tiles of `columns` columns
    // from `firstColumn` (by default NR from the n block's first): one shorter tile after the m
    // blocks of a constant M (the strategy never picks, nor accepts, a tile taller than it), a
    // loop of one-row tiles after those of a runtime M.
    auto rowsLeftOver = [&](int columns = 0, const Expr &firstColumn = nullptr, int width = 0) {
      if (runtimeM) {
        Expr row = var(freshName("m_left"), ElemKind::Index);
        Expr done = mul(mTrips, intConst(s.tileM));
        Expr left = binary(OpKind::SubI, extents[s.dimM], done);
        if (std::optional<Poly> rows = polyOf(left); rows && rows->empty())
          return std::vector<Stmt>{}; // MR divides M whatever the sizes (4 * d rows in 2s)
        return std::vector<Stmt>{
            forLoop(row->name, left, ForKind::Serial,
                    buildTile(1, add(done, row), columns, firstColumn, width))};
      }
      const int rows = int(mRows % s.tileM);
      return rows ? buildTile(rows, intConst(mRows - rows), columns, firstColumn, width)
                  : std::vector<Stmt>{};
    };
    std::vector<Stmt> leftover = rowsLeftOver();

    // A runtime N, or a constant one that is no whole number of n blocks (Strategy.h): what the
    // n blocks leave over. outer's whole vectors of a constant n first, in one tile of as many
    // vectors; then the columns, one at a time (outer's one lane wide). Each goes down the m
    // blocks and the rows those leave over.
    const bool runtimeN = s.dimN >= 0 && !asConstant(extents[s.dimN]);
    Expr nTrips = s.dimN < 0 ? intConst(0) : quotient(extents[s.dimN], s.tileN * nStep);
    const bool columnsLeftOver =
        runtimeN || (s.dimN >= 0 && extent(s.dimN) % (s.tileN * nStep) != 0);
    // Block loops, then the other parallel dims, inside out; the outermost with at least two
    // iterations runs in parallel when the nest is large enough (decided when the kernel runs
    // if its extents are runtime values).
    std::vector<std::pair<Expr, Expr>> loops; // (variable, trips), outside in
    for (int d = 0; d < numLoops; ++d)
      if (!g.isReduction(d) && d != s.dimM && d != s.dimN)
        loops.push_back({vars[d], extents[d]});
    const bool hasN = runtimeN || *asConstant(nTrips) > 0;
    // The blocks that run outside the innermost other parallel dims (s.blocksOutside) go
    // before them: outer's k blocks, dot's m and n blocks.
    if (!std::equal(s.blocksOutside.rbegin(), s.blocksOutside.rend(), loops.rbegin(),
                    [&](int d, const auto &loop) { return loop.first == vars[d]; }))
      internalError("blocks outside dims that are not the innermost parallel ones");
    const auto outside = std::ptrdiff_t(loops.size() - s.blocksOutside.size());
    if (outer && group) {
      loops.push_back({nGroup, intConst(*asConstant(nTrips) / group)});
      loops.push_back({pairOfBlocks, intConst(kBlocks * group)});
      loops.push_back({mBlock, mTrips});
    } else if (outer) {
      if (hasN) // and the shifted last block, if it runs in the loop
        loops.push_back({nBlock, lastBlockInLoop ? add(nTrips, intConst(1)) : nTrips});
      if (s.blockK)
        loops.insert(s.blocksOutside.empty() ? loops.end() : loops.begin() + outside,
                     {kBlock, intConst(kBlocks)});
      if (hasM)
        loops.push_back({mBlock, mTrips});
    } else {
      if (hasM)
        loops.push_back({mBlock, mTrips});
      if (hasN)
        loops.push_back({nBlock, nTrips});
      std::rotate(loops.begin() + outside,
                  loops.begin() + outside + std::ptrdiff_t(s.blocksOutside.size()), loops.end());
    }
    // The loop the columns left over follow: the outermost block loop (outer's k blocks run
    // inside its n blocks or groups of them, or outside the blocks-outside dims the columns
    // left over loop over themselves).
    const Expr &outermostBlock = !outer && hasM ? mBlock : outer && group ? nGroup : nBlock;
    Expr total = intConst(1);
    for (int d = 0; d < numLoops; ++d)
      total = mul(total, extents[d]);
    int parallel = -1;
    for (size_t l = 0; l < loops.size() && parallel < 0; ++l) {
      if (loops[l].first == kBlock || loops[l].first == pairOfBlocks)
        break; // never split a reduction
      auto trips = asConstant(loops[l].second);
      if (!trips || *trips >= 2)
        parallel = int(l);
    }
    // The packs run inside the other parallel dims' and the n blocks' loops: the parallel one
    // among them (if any) gives each chunk its region, else there is one.
    const bool packsPerChunk =
        packed >= 0 && parallel >= 0 && loops[size_t(parallel)].first != mBlock;
    // The columns left over run after the outermost block loop. Where that loop or one inside
    // it is the parallel one, they run on one thread but for their m blocks' own loop, which
    // then runs in parallel where it is large enough (`parallelM`: where it takes vectors).
    const bool columnsOnTheirOwn =
        parallel >= 0 &&
        std::any_of(loops.begin(), loops.begin() + parallel + 1,
                    [&](const auto &loop) { return loop.first == outermostBlock; });
    auto downTheRows = [&](int columns, const Expr &firstColumn, int width,
                           bool parallelM = false) {
      std::vector<Stmt> down;
      if (hasM) {
        Expr block = var(freshName("m_block"), ElemKind::Index);
        Stmt loop =
            forLoop(block->name, mTrips, ForKind::Serial,
                    buildTile(s.tileM, mul(block, intConst(s.tileM)), columns, firstColumn, width));
        Expr points = intConst(int64_t(columns) * (width ? width : nStep));
        for (int d = 0; d < numLoops; ++d)
          if (d != s.dimN)
            points = mul(points, extents[d]);
        const auto constantPoints = asConstant(points);
        if (parallelM && columnsOnTheirOwn &&
            (!constantPoints || *constantPoints >= kMinParallelElements)) {
          loop->forKind = ForKind::Parallel;
          loop->bound = runtimeChunk(points, mTrips);
        }
        down.push_back(loop);
      } else {
        down = buildTile(s.tileM, intConst(0), columns, firstColumn, width); // no m: the one tile
      }
      for (Stmt &stmt : rowsLeftOver(columns, firstColumn, width))
        down.push_back(stmt);
      return down;
    };
    std::vector<Stmt> columnsLeft;
    if (shiftedLastBlock) {
      // The last n block ends at n (shiftsLastNBlock), over its own panel, packed first (for
      // each k block, when there are k blocks): as the n blocks' loop's last iteration (below),
      // on the threads as the others, or after that loop, its m blocks on the threads.
      const Expr first = intConst(extent(s.dimN) - s.tileN * lanes);
      columnsLeft = downTheRows(s.tileN, first, 0, !lastBlockInLoop);
      columnsLeft.insert(columnsLeft.begin(), packTransposedFrom(first));
      if (s.blockK)
        columnsLeft = {
            forLoop(kBlock->name, intConst(kBlocks), ForKind::Serial, std::move(columnsLeft))};
      // After a parallel loop that bound it, the panel's region is the first.
      if (!lastBlockInLoop && packsPerChunk && columnsOnTheirOwn)
        columnsLeft = substitute(columnsLeft, packRegion->name, intConst(0));
    } else if (columnsLeftOver) {
      Expr columnsDone = mul(nTrips, intConst(s.tileN * nStep));
      Expr columns; // those taken one at a time
      if (runtimeN) {
        columns = binary(OpKind::SubI, extents[s.dimN], columnsDone);
      } else {
        const int64_t all = extent(s.dimN), blocks = all - all % (s.tileN * nStep);
        const int64_t vectors = outer ? all - all % lanes : blocks; // in whole vectors
        if (vectors > blocks && s.packTransposed)
          internalError("vectors left over a transposed B, which has none to read in place");
        if (vectors > blocks)
          columnsLeft = downTheRows(int((vectors - blocks) / lanes), intConst(blocks), lanes, true);
        columnsDone = intConst(vectors);
        columns = intConst(all - vectors);
        // Accumulators that start from a fill value read nothing of the output: the last
        // columns go in one vector ending at n, whose first lanes write again what the vectors
        // before wrote (128x4096 by 4096x127 took 3.5x as long as by 4096x128, its 15 last
        // columns one lane wide). B is read in place, so not a transposed one.
        if (outer && fill && all > lanes && !s.packTransposed) {
          for (Stmt &stmt : downTheRows(1, intConst(all - lanes), lanes, true))
            columnsLeft.push_back(stmt);
          columns = intConst(0);
        }
      }
      Expr column = var(freshName("n_left"), ElemKind::Index);
      if (asConstant(columns).value_or(1) > 0)
        columnsLeft.push_back(forLoop(column->name, columns, ForKind::Serial,
                                      downTheRows(1, add(columnsDone, column), 1)));
      for (auto d = s.blocksOutside.rbegin(); d != s.blocksOutside.rend(); ++d)
        columnsLeft = {
            forLoop(vars[*d]->name, extents[*d], ForKind::Serial, std::move(columnsLeft))};
    }

    // Without m blocks the pack goes just before the tile, where it would go before them.
    if (pack && !interleaved && !hasM)
      stmts.insert(stmts.begin(), pack);
    // The leftover tile runs in the loops inside the m blocks, after them.
    bool insideM = hasM;
    for (size_t l = loops.size(); l-- > 0;) {
      auto constantTotal = asConstant(total);
      bool isParallel =
          int(l) == parallel && (!constantTotal || *constantTotal >= kMinParallelElements);
      auto wrap = [&](std::vector<Stmt> body) {
        if (loops[l].first == pairOfBlocks)
          body.insert(body.begin(), {let(kBlock->name, kBlockOf(pairOfBlocks)),
                                     let(nBlock->name, nBlockOf(pairOfBlocks))});
        Stmt loop = forLoop(loops[l].first->name, loops[l].second,
                            isParallel ? ForKind::Parallel : ForKind::Serial, std::move(body));
        if (isParallel)
          loop->bound = runtimeChunk(total, loops[l].second);
        if (packsPerChunk && int(l) == parallel)
          loop->chunkFirst = packRegion->name;
        return loop;
      };
      if (lastBlockInLoop && loops[l].first == nBlock)
        stmts = {ifThen(cmp("slt", nBlock, nTrips), std::move(stmts), columnsLeft)};
      stmts = {wrap(std::move(stmts))};
      if (loops[l].first == outermostBlock && !lastBlockInLoop)
        stmts.insert(stmts.end(), columnsLeft.begin(), columnsLeft.end());
      if (loops[l].first == mBlock) {
        insideM = false;
        stmts.insert(stmts.end(), leftover.begin(), leftover.end());
        if (packRest)
          stmts.push_back(packRest);
        if (pack && !interleaved)
          stmts.insert(stmts.begin(), pack);
      } else if ((loops[l].first == kBlock || loops[l].first == pairOfBlocks) && interleaved) {
        stmts.insert(stmts.begin(), pack);
      } else if (insideM && !leftover.empty()) {
        leftover = {wrap(std::move(leftover))};
      }
    }
    if (packed >= 0 && !packsPerChunk)
      stmts.insert(stmts.begin(), let(packRegion->name, intConst(0)));
    if (stmts.size() > 1)
      stmts = {block(std::move(stmts))};
    stmts[0]->comment = strategyComment(op, s);
    append(stmts);
  }

  // dot: every line of the rows of B (the input read along n and k, not m) that the tile
  // `s.prefetchAhead` n blocks ahead reads. Past the last block, prefetches touch addresses
  // past the rows, which is harmless.
  Stmt prefetchRowsAhead(GenericView &g, const Strategy &s, const std::vector<Expr> &vars,
                         const Expr &nBlock, int64_t k) {
    std::vector<Stmt> prefetches;
    std::string name;
    for (int i = 0; i < g.numInputs(); ++i) {
      const AffineMap &map = g.map(i);
      if (!g.input(i)->type.isTensor() || mapUses(map, s.dimM) || !mapUses(map, s.dimN) ||
          !mapUses(map, s.dimK))
        continue;
      const TensorStorage &t = storageOf(g.input(i));
      name = g.input(i)->name;
      const int64_t lineElems = lineElemsOf(g.input(i)->type.elem);
      for (int c = 0; c < s.tileN; ++c)
        for (int64_t line = 0; line < k; line += kLinesPerPrefetch * lineElems) {
          std::vector<Expr> iv = vars;
          iv[s.dimN] =
              add(mul(add(nBlock, intConst(s.prefetchAhead)), intConst(s.tileN)), intConst(c));
          iv[s.dimK] = intConst(line);
          prefetches.push_back(prefetch(t.buffer, accessIndex(map, iv, t.dims)));
        }
    }
    if (prefetches.empty())
      internalError("contraction.dot prefetches with no input read along n and k");
    Stmt rows = block(std::move(prefetches));
    rows->comment = fmt::format("prefetch the rows of '%{}' {} tiles ahead", name, s.prefetchAhead);
    return rows;
  }

  // contraction.gather by groups: the pairs (points of the parallel dims the choices depend
  // on) are sorted by their choice into groups padded to whole vectors, so that every vector of
  // pairs reads one choice and its step broadcasts one element of the gathered operand per row.
  // What gatherOf recognized in a gather pipeline's body: its one extract, whose last index
  // casts input #choiceInput, the number of choices, and the pairs (the dims the choices are
  // read along, and how many points they span).
  struct GatherParts {
    const Op *extract;
    int choiceInput;
    const Value *choices;
    int64_t numChoices;
    std::vector<int> pairDims;
    int64_t pairs = 1; // counting a runtime extent as kNominalExtent
    Expr pairCount;    // the pairs, a runtime value when one of their extents is
  };
  GatherParts gatherParts(GenericView &g, const std::vector<Expr> &extents) {
    GatherParts parts;
    parts.extract = soleExtract(g.body());
    parts.choiceInput = parts.extract->operands.back()->definingOp->operands[0]->index;
    parts.choices = g.input(parts.choiceInput);
    parts.numChoices = *asConstant(storageOf(parts.extract->operands[0]).dims.back());
    parts.pairCount = intConst(1);
    for (int d = 0; d < g.numLoops(); ++d)
      if (mapUses(g.map(parts.choiceInput), d)) {
        parts.pairDims.push_back(d);
        parts.pairs = saturatingMul(parts.pairs, asConstant(extents[d]).value_or(kNominalExtent));
        parts.pairCount = mul(parts.pairCount, extents[d]);
      }
    return parts;
  }

  // Serially first: count the pairs per choice, give each choice its run of vector slots
  // (`group[v]` is vector v's choice, or X for none), and copy each pair's input column to its
  // slot (zero in the padding). Then, m blocks in parallel, an MR x 1 tile of accumulators per
  // vector of slots in use, stored by slot; and each pair's output read back from its slot.
  std::vector<Stmt> groupedGather(GenericView &g, const TensorStorage &result, const Strategy &s,
                                  const std::vector<Expr> &extents, const Expr &fill) {
    const Op &op = g.op;
    const int lanes = s.lanes;
    const int numLoops = g.numLoops();
    auto extent = [&](int d) { return *asConstant(extents[d]); };
    const auto [extract, choiceInput, choices, numChoices, pairDims, pairs, pairCount] =
        gatherParts(g, extents);
    const TensorStorage &ids = storageOf(choices);
    const int packInput = pairInputOf(g, choiceInput);
    const int64_t vectors = groupedVectors(pairs, numChoices, lanes);
    const int64_t slots = vectors * lanes;
    const int64_t k = extent(s.dimK), rows = extent(s.dimM);
    ElemKind elem = op.result()->type.elem;
    int count = addTemp("group_count", ElemKind::I32, intConst(numChoices));
    int next = addTemp("group_next", ElemKind::I32, intConst(numChoices));
    int group = addTemp("group", ElemKind::I32, intConst(vectors));
    int slotOf = addTemp("slot", ElemKind::I32, intConst(pairs));
    // The input packed vector of slots by vector of slots (packedVectorAt).
    const int64_t runElems = packedRunElems(k, lanes, elem);
    int packed = addTemp("packed_" + g.input(packInput)->name, elem, intConst(vectors * runElems));
    auto packedAt = [&](const Expr &vector, const Expr &kAt) {
      return packedVectorAt(vector, kAt, runElems, lanes);
    };
    const bool pastTheEnd = rows % s.tileM != 0;
    int sorted = addTemp("by_slot", elem, intConst(roundUp(rows, s.tileM) * slots));

    const std::vector<Expr> vars = freshLoopVars(numLoops);
    // Loops over the pairs around `body`, and the pair's number (the choices' row-major order).
    Expr pair = accessIndex(g.map(choiceInput), vars, ids.dims);
    auto overPairs = [&](std::vector<Stmt> body) {
      return loopsAround(pairDims, vars, extents, std::move(body));
    };
    auto loopOver = [&](Expr v, int64_t trips, std::vector<Stmt> body) {
      return forLoop(v->name, intConst(trips), ForKind::Serial, std::move(body));
    };
    std::vector<Stmt> stmts;
    Expr c = var(freshName("c"), ElemKind::Index);
    stmts.push_back(loopOver(c, numChoices, {store(count, c, intConst(0, ElemKind::I32))}));
    Expr choice = loadIndex(ids.buffer, pair);
    for (Stmt &st : overPairs({store(count, choice,
                                     binary(OpKind::AddI, load(count, choice, ElemKind::I32),
                                            intConst(1, ElemKind::I32)))}))
      stmts.push_back(st);
    Expr v = var(freshName("v"), ElemKind::Index);
    stmts.push_back(loopOver(v, vectors, {store(group, v, intConst(numChoices, ElemKind::I32))}));
    // Each choice's run of slots starts where the previous one's vectors end.
    std::string first = freshName("first_vector");
    Expr firstVector = var(first, ElemKind::Index);
    stmts.push_back(local(first, intConst(0)));
    Expr runs = var(freshName("runs"), ElemKind::Index);
    Expr j = var(freshName("j"), ElemKind::Index);
    Expr run = binary(OpKind::DivUI, binary(OpKind::AddI, loadIndex(count, c), intConst(lanes - 1)),
                      intConst(lanes));
    stmts.push_back(loopOver(
        c, numChoices,
        {store(next, c, i32(mul(firstVector, intConst(lanes)))), let(runs->name, run),
         forLoop(j->name, runs, ForKind::Serial, {store(group, add(firstVector, j), i32(c))}),
         assign(first, add(firstVector, runs))}));
    Expr slot = loadIndex(next, choice);
    for (Stmt &st : overPairs(
             {store(slotOf, pair, i32(slot)), store(next, choice, i32(add(slot, intConst(1))))}))
      stmts.push_back(st);
    // The input, packed by slot: packed[vector(pair), kk, lane(pair)] = x[pair, kk]. Every k row
    // of a vector's slots follows the last, so that a tile reads its slots in one run.
    Expr kk = vars[s.dimK];
    const TensorStorage &x = storageOf(g.input(packInput));
    stmts.push_back(loopOver(j, vectors * runElems, {store(packed, j, floatConst(0, elem))}));
    Expr slotOfPair = loadIndex(slotOf, pair);
    stmts.push_back(loopOver(
        kk, k,
        overPairs({store(packed,
                         add(packedAt(binary(OpKind::DivUI, slotOfPair, intConst(lanes)), kk),
                             binary(OpKind::RemUI, slotOfPair, intConst(lanes))),
                         load(x.buffer, accessIndex(g.map(packInput), vars, x.dims), elem))})));
    stmts[0]->comment = strategyComment(op, s) + ": group the pairs by choice";

    // The tile: MR rows of vector v's slots, accumulated over k.
    const Value *outArg = g.body().arguments.back().get();
    Expr mBlock = var(freshName("m_block"), ElemKind::Index);
    Expr kBlock = var(freshName("k_block"), ElemKind::Index);
    const int64_t blockK = s.blockK ? s.blockK : k;
    Expr kAt = add(mul(kBlock, intConst(blockK)), kk);
    auto buildTile = [&](int tileRows, const Expr &firstRow) {
      std::vector<Stmt> init, step, fini;
      Expr b;
      std::vector<Expr> iv = vars;
      iv[s.dimK] = kAt;
      const std::vector<Expr> rowsRead = tileRowsToRead(firstRow, tileRows, rows, pastTheEnd);
      for (int r = 0; r < tileRows; ++r) {
        iv[s.dimM] = rowsRead[size_t(r)];
        std::unordered_map<const Value *, Expr> values;
        if (!b)
          b = bindLet(g.body().arguments[packInput].get(),
                      load(packed, packedAt(v, kAt), elem, lanes), step);
        values[g.body().arguments[packInput].get()] = b;
        values[g.body().arguments[choiceInput].get()] = load(group, v, ElemKind::I32);
        bindOtherInputs(g, values, iv, packInput, choiceInput);
        std::string acc = freshName("acc");
        values[outArg] = var(acc, elem, lanes);
        Expr at = add(mul(add(firstRow, intConst(r)), intConst(slots)), mul(v, intConst(lanes)));
        init.push_back(
            local(acc, select(cmp("eq", kBlock, intConst(0)), broadcast(floatConst(0, elem), lanes),
                              load(sorted, at, elem, lanes))));
        BodyContext body{iv, extents, outArg, true};
        choicesChecked_ = true;
        step.push_back(assign(acc, lowerScalarBlock(g.body(), values, body, step)));
        choicesChecked_ = false;
        fini.push_back(store(sorted, at, var(acc, elem, lanes)));
      }
      std::vector<Stmt> tile = std::move(init);
      tile.push_back(loopOver(kk, blockK, std::move(step)));
      tile.insert(tile.end(), fini.begin(), fini.end());
      Stmt inUse =
          ifThen(cmp("ult", load(group, v, ElemKind::I32), intConst(numChoices, ElemKind::I32)),
                 std::move(tile));
      return loopOver(kBlock, k / blockK, {loopOver(v, vectors, {inUse})});
    };
    Expr o = vars[s.dimM];
    emitSlotTiles(g, result, s, buildTile, mBlock, rows, rows * k * slots, pairs, vars, overPairs,
                  load(sorted, add(mul(o, intConst(slots)), loadIndex(slotOf, pair)), elem), fill,
                  pastTheEnd, kBlock, 1, stmts);
    return stmts;
  }

  static Expr i32(Expr e) { return cast(OpKind::IndexCast, std::move(e), ElemKind::I32); }
  static Expr index(Expr e) { return cast(OpKind::IndexCast, std::move(e), ElemKind::Index); }
  // An i32 of `buffer` (the gathers' counts and slots) as an index.
  static Expr loadIndex(int buffer, Expr at) {
    return index(load(buffer, std::move(at), ElemKind::I32));
  }

  // A fresh index variable per loop dim: d0, d1, ...
  std::vector<Expr> freshLoopVars(int numLoops) {
    std::vector<Expr> vars(numLoops);
    for (int d = 0; d < numLoops; ++d)
      vars[d] = var(freshName(fmt::format("d{}", d)), ElemKind::Index);
    return vars;
  }

  // Serial loops over `dims` (outermost first) around `body`.
  static std::vector<Stmt> loopsAround(const std::vector<int> &dims, const std::vector<Expr> &vars,
                                       const std::vector<Expr> &extents, std::vector<Stmt> body) {
    for (auto d = dims.rbegin(); d != dims.rend(); ++d)
      body = {forLoop(vars[*d]->name, extents[*d], ForKind::Serial, std::move(body))};
    return body;
  }

  // `n` rounded up to a multiple of `step`.
  static int64_t roundUp(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

  // The rows of `rows` a slot tile of `tileRows` from `firstRow` reads: each its own, but where
  // the nest's last tile runs past the rows (`pastTheEnd`, see emitSlotTiles), the last row again
  // for those past it. Such a tile stores every row's sums, those past the rows into the
  // temporary's padding, which nothing reads back: it computes up to MR - 1 rows twice where
  // the nest would otherwise compile a tile of its own for the rows left over.
  static std::vector<Expr> tileRowsToRead(const Expr &firstRow, int tileRows, int64_t rows,
                                          bool pastTheEnd) {
    std::vector<Expr> rowsRead;
    for (int r = 0; r < tileRows; ++r) {
      Expr row = add(firstRow, intConst(r));
      // A tile's first row is always one of the rows.
      rowsRead.push_back(pastTheEnd && r > 0 ? binary(OpKind::MinSI, row, intConst(rows - 1))
                                             : row);
    }
    return rowsRead;
  }

  // The end of contraction.gather and contraction.ranks: the m blocks of `buildTile(MR, first
  // row)` in parallel (`work` elements of the nest in all), then each pair's sum, `pairSum` at
  // row vars[m], added to the output (none when null: the tiles added to it in place). `fill`,
  // when not null, is what the output holds before the nest (takeFillFor): the sums read back
  // add to it instead of loading the output, which is then never filled (S9 at 32 tokens filled
  // 896 KiB on one thread before its tiles), and tiles that add in place follow its fill. The rows
  // MR leaves over take the last m block when it may run past the rows (`pastTheEnd`: the
  // caller's tiles read through tileRowsToRead and store into sums of whole tiles), else one
  // shorter tile. With `kBlocks` > 1, the m blocks and the shorter tile run once per k block,
  // k_block by k_block.
  void emitSlotTiles(GenericView &g, const TensorStorage &result, const Strategy &s,
                     const std::function<Stmt(int, const Expr &)> &buildTile, const Expr &mBlock,
                     int64_t rows, int64_t work, int64_t pairs, const std::vector<Expr> &vars,
                     const std::function<std::vector<Stmt>(std::vector<Stmt>)> &overPairs,
                     const Expr &pairSum, const Expr &fill, bool pastTheEnd, const Expr &kBlock,
                     int64_t kBlocks, std::vector<Stmt> &stmts) {
    const bool wholeTiles = pastTheEnd || rows % s.tileM == 0;
    const int64_t mTrips = pastTheEnd ? roundUp(rows, s.tileM) / s.tileM : rows / s.tileM;
    std::vector<Stmt> tiles;
    if (kBlocks > 1 && wholeTiles && mTrips % kRowParts == 0) {
      // The k blocks inside the parallel loop, over parts of the rows: one parallel loop rather
      // than one per k block, each a wait at its end for the slower thread.
      Expr part = var(freshName("m_part"), ElemKind::Index);
      const int64_t perPart = mTrips / kRowParts;
      Expr firstRow = mul(add(mul(part, intConst(perPart)), mBlock), intConst(s.tileM));
      Stmt blocks = forLoop(kBlock->name, intConst(kBlocks), ForKind::Serial,
                            {forLoop(mBlock->name, intConst(perPart), ForKind::Serial,
                                     {buildTile(s.tileM, firstRow)})});
      blocks->comment = "each m block of the part adds the k block's products to its slots";
      Stmt nest = forLoop(part->name, intConst(kRowParts), ForKind::Parallel, {blocks});
      nest->bound = minChunk(work, kRowParts);
      nest->comment = strategyComment(g.op, s);
      tiles = {nest};
    } else {
      Stmt nest = forLoop(mBlock->name, intConst(mTrips), ForKind::Parallel,
                          {buildTile(s.tileM, mul(mBlock, intConst(s.tileM)))});
      nest->bound = minChunk(work / kBlocks, mTrips);
      nest->comment = strategyComment(g.op, s);
      tiles = {nest};
      if (!wholeTiles)
        tiles.push_back(buildTile(int(rows % s.tileM), intConst(rows - rows % s.tileM)));
      if (kBlocks > 1) {
        tiles = {forLoop(kBlock->name, intConst(kBlocks), ForKind::Serial, std::move(tiles))};
        tiles[0]->comment = "each m block adds the k block's products to its slots";
      }
    }
    if (!pairSum && fill) {
      std::vector<Stmt> filled = fillNest(fill, result);
      stmts.insert(stmts.end(), filled.begin(), filled.end());
    }
    stmts.insert(stmts.end(), tiles.begin(), tiles.end());
    if (!pairSum)
      return; // the tiles added to the output in place
    Expr outIndex = accessIndex(g.outputMap(), vars, result.dims);
    Stmt readBack = fill ? store(result.buffer, outIndex, binary(OpKind::AddF, fill, pairSum))
                         : addToOutput(result, outIndex, pairSum, g.op.result()->type.elem);
    Stmt unpack = forLoop(vars[s.dimM]->name, intConst(rows), ForKind::Parallel,
                          overPairs({std::move(readBack)}));
    unpack->bound = minChunk(rows * pairs, rows);
    unpack->comment = "read each pair's sum back from its slot";
    stmts.push_back(unpack);
  }

  // The body's values of a gather tile's inputs other than the packed one and the choices: the
  // scalars, and the tensors read along no loop dim of the tile, at `iv`.
  void bindOtherInputs(GenericView &g, std::unordered_map<const Value *, Expr> &values,
                       const std::vector<Expr> &iv, int packInput, int choiceInput) {
    for (int i = 0; i < g.numInputs(); ++i) {
      const Value *operand = g.input(i);
      if (!operand->type.isTensor())
        values[g.body().arguments[i].get()] = scalarOf(operand);
      else if (i != packInput && i != choiceInput)
        values[g.body().arguments[i].get()] =
            load(storageOf(operand).buffer, accessIndex(g.map(i), iv, storageOf(operand).dims),
                 operand->type.elem);
    }
  }

  // The one tensor input besides the choices, read along the pairs and k: the input of
  // contraction.gather and contraction.ranks, which they pack by slot.
  int pairInputOf(GenericView &g, int choiceInput) {
    int found = -1;
    for (int i = 0; i < g.numInputs(); ++i)
      if (i != choiceInput && g.input(i)->type.isTensor())
        for (int d = 0; d < g.numLoops(); ++d)
          if (mapUses(g.map(i), d))
            found = i;
    return found;
  }

  // One accumulator of a tile whose gathered read loads `lanes` choices at once
  // (contraction.choices, contraction.ranks): `initial` (zero when null) in `init`, the body's
  // sum in `step`.
  Expr choiceLanesAccumulator(GenericView &g, std::unordered_map<const Value *, Expr> &values,
                              const std::vector<Expr> &iv, const std::vector<Expr> &extents,
                              int lanes, std::vector<Stmt> &init, std::vector<Stmt> &step,
                              Expr initial = nullptr) {
    const ElemKind elem = g.op.result()->type.elem;
    Expr acc = var(freshName("acc"), elem, lanes);
    init.push_back(local(acc->name, initial ? initial : broadcast(floatConst(0, elem), lanes)));
    accumulateChoiceLanes(g, values, iv, extents, acc, step);
    return acc;
  }

  // The body's sum into accumulator `acc` (of choiceLanesAccumulator) in `step`, once more.
  void accumulateChoiceLanes(GenericView &g, std::unordered_map<const Value *, Expr> &values,
                             const std::vector<Expr> &iv, const std::vector<Expr> &extents,
                             const Expr &acc, std::vector<Stmt> &step) {
    const Value *outArg = g.body().arguments.back().get();
    values[outArg] = acc;
    BodyContext body{iv, extents, outArg, true};
    choicesChecked_ = true;
    choiceLanes_ = acc->lanes;
    step.push_back(assign(acc->name, lowerScalarBlock(g.body(), values, body, step)));
    choiceLanes_ = 1;
    choicesChecked_ = false;
  }

  // Whether contraction.ranks' slots can be where the pairs already are: the ids (32-bit), the
  // input x[k, pairs] and the output out[m, pairs] all hold the pairs contiguously, in the same
  // order, with constant extents.
  bool slotsInPlace(GenericView &g, const Strategy &s, int choiceInput, int packInput,
                    const TensorStorage &result, const std::vector<int> &pairDims, int64_t pairs) {
    const Value *choices = g.input(choiceInput);
    if (elemBits(choices->type.elem) != 32)
      return false;
    for (const Expr &d : result.dims)
      if (!asConstant(d))
        return false;
    for (const TensorStorage *t : {&storageOf(choices), &storageOf(g.input(packInput))})
      for (const Expr &d : t->dims)
        if (!asConstant(d))
          return false;
    for (const AffineMap *map : {&g.map(choiceInput), &g.map(packInput), &g.outputMap()})
      for (const AffineResult &r : map->results)
        if (r.isConstant && r.value != 0)
          return false; // an offset into the pairs
    const std::vector<int64_t> ids = stridesOf(g.map(choiceInput), storageOf(choices).dims),
                               x = stridesOf(g.map(packInput), storageOf(g.input(packInput)).dims),
                               out = stridesOf(g.outputMap(), result.dims);
    for (int d = 0; d < g.numLoops(); ++d) {
      const bool isPair = std::find(pairDims.begin(), pairDims.end(), d) != pairDims.end();
      const int64_t xWants = isPair ? ids[d] : d == s.dimK ? pairs : 0;
      const int64_t outWants = isPair ? ids[d] : d == s.dimM ? pairs : 0;
      if (x[d] != xWants || out[d] != outWants)
        return false;
    }
    return true;
  }

  // contraction.gather or contraction.ranks, its choices checked whatever the bounds checks: a
  // wrong one would count outside the per-choice counts (gather) or pick another lane (ranks).
  void emitCheckedGather(GenericView &g, const TensorStorage &result, const Strategy &s,
                         const std::vector<Expr> &extents, const Expr &fill) {
    GatherParts parts = gatherParts(g, extents);
    checkChoices(parts.extract, parts.choices);
    std::vector<Stmt> stmts = s.pipeline == Pipeline::ContractionGather
                                  ? groupedGather(g, result, s, extents, fill)
                                  : rankedGather(g, result, s, extents, fill);
    append(stmts);
  }

  // Prefetches of each of `rows` (a tile's rows of `buffer`, `strideM` elements apart),
  // `aheadBytes` past `offset`, the step's place in its run of `runElems` elements of each row
  // from `runStart`, when the runs are a page or more. Such a tile streams its rows side by side,
  // a multiple of a page apart, so they all reach their pages' ends at the same step, where the
  // L2's streamer stops, and each row's next page would start with a miss. The prefetches stop
  // at the run's last line, unless `nextRowFollows`: the run is the whole row and the next row
  // follows it, which the next tile reads.
  void prefetchRowsAhead(int buffer, const std::vector<Expr> &rows, int64_t strideM,
                         const Expr &offset, const Expr &runStart, int64_t runElems,
                         bool nextRowFollows, int64_t aheadBytes, ElemKind elem,
                         std::vector<Stmt> &step) {
    const int64_t elemBytes = std::max(1, elemBits(elem) / 8);
    if (runElems * elemBytes < kPageBytes)
      return;
    Expr ahead = add(offset, intConst(aheadBytes / elemBytes));
    if (!nextRowFollows)
      ahead = binary(OpKind::MinSI, ahead, add(runStart, intConst(runElems - lineElemsOf(elem))));
    for (const Expr &row : rows)
      step.push_back(prefetch(buffer, add(mul(row, intConst(strideM)), ahead)));
  }

  // An input packed by vector of slots (contraction.gather's and contraction.ranks'): each
  // vector's k rows of `lanes` slots one after another (its run), so that a tile's pass over k
  // reads each of its vectors as one stream, and the runs one line more apart than their k rows,
  // so that the streams of a tile do not share L1 sets (with k a power of two, runs of k rows
  // alone start a multiple of 4 KiB apart).
  static int64_t packedRunElems(int64_t k, int lanes, ElemKind elem) {
    return k * lanes + lineElemsOf(elem);
  }
  // Where vector `vector` of the slots holds its row `kIndex`, in runs of `runElems`.
  static Expr packedVectorAt(const Expr &vector, const Expr &kIndex, int64_t runElems, int lanes) {
    return add(mul(vector, intConst(runElems)), mul(kIndex, intConst(lanes)));
  }
  // Where slot `slot` holds its input at k `kIndex`.
  static Expr packedSlotAt(const Expr &slot, const Expr &kIndex, int64_t runElems, int lanes) {
    return add(packedVectorAt(quotient(slot, lanes), kIndex, runElems, lanes),
               binary(OpKind::RemUI, slot, intConst(lanes)));
  }

  // The slots of contraction.ranks by choice (Strategy::ranksByChoice).
  struct ChoiceSlots {
    Expr width;              // slots per row of the sums and per k of the packed input
    Expr byChoiceVectors;    // vectors of slots whose lane j is choice j mod C, from slot 0
    Expr permutedVectors;    // vectors after them that permute, their pairs in order
    Expr permutedTiles;      // their tiles (permutedTile vectors each), bounded by a constant
                             // where the pairs are: the cold-code estimate (Codegen) counts a
                             // loop of a runtime trip count as many trips
    std::vector<Stmt> stmts; // what computes them
  };

  // contraction.ranks by choice: the first R pairs of each choice (R: the pairs per choice of
  // even routing, rounded down to whole tiles of NR vectors) take slot r x C + c for the r-th
  // pair of choice c, so that lane j of a vector of slots is choice j mod C and the tiles
  // multiply each row's choices as loaded (repeated, where a vector holds two ranks of C).
  // The pairs past R of their choice (routing is rarely even) follow in order, in vectors whose
  // tiles permute as contraction.ranks in order does, `permutedTile` vectors a tile. Serially:
  // each pair's slot in `slotOf`, the overflow slots' choices in `slotChoice`, and the input
  // packed by slot, 0 in the slots no pair takes. `input`, `sums` and `slotChoice` receive
  // temporaries sized for every pair in the overflow.
  ChoiceSlots slotsByChoice(GenericView &g, const Strategy &s, int packInput, int choiceInput,
                            int64_t numChoices, int64_t pairs, const Expr &pairCount, int64_t k,
                            int64_t sumRows, int permutedTile, int slotOf, int &slotChoice,
                            int &input, int &sums, const std::vector<Expr> &vars,
                            const std::function<std::vector<Stmt>(std::vector<Stmt>)> &overPairs) {
    const ElemKind elem = g.op.result()->type.elem;
    const Value *choices = g.input(choiceInput);
    const ElemKind choiceElem = choices->type.elem;
    ChoiceSlots out;
    // R, of a runtime count (of the dims alone, as the temporaries' sizes must be) bound once.
    const int64_t copies = s.lanes / numChoices, tileRanks = s.tileN * copies;
    Expr ranksOfDims =
        asConstant(pairCount)
            ? intConst(pairs / numChoices / tileRanks * tileRanks)
            : mul(quotient(quotient(pairCount, numChoices), tileRanks), intConst(tileRanks));
    const int64_t permutedSlots = permutedTile * s.lanes;
    // The slots by choice, and every pair in order after them at most.
    Expr capacity = add(mul(ranksOfDims, intConst(numChoices)),
                        mul(quotient(add(pairCount, intConst(permutedSlots - 1)), permutedSlots),
                            intConst(permutedSlots)));
    Expr byChoiceRanks =
        asConstant(ranksOfDims) ? ranksOfDims : bindLet("ranks_by_choice", ranksOfDims, out.stmts);
    Expr byChoiceSlots = mul(byChoiceRanks, intConst(numChoices));
    out.byChoiceVectors = quotient(byChoiceRanks, copies);
    const TensorStorage &x = storageOf(g.input(packInput));
    slotChoice = addTemp("slot_choice", choiceElem, capacity);
    const int64_t runElems = packedRunElems(k, s.lanes, elem);
    input = addTemp("packed_" + g.input(packInput)->name, elem,
                    mul(quotient(capacity, s.lanes), intConst(runElems)));
    sums = addTemp("by_slot", elem, mul(intConst(sumRows), capacity));
    const int count = addTemp("rank_count", ElemKind::I32, intConst(numChoices));
    Expr pair = accessIndex(g.map(choiceInput), vars, storageOf(choices).dims);
    Expr choice = index(load(storageOf(choices).buffer, pair, choiceElem));
    Expr c = var(freshName("c"), ElemKind::Index);
    auto overChoices = [&](std::vector<Stmt> body) {
      return forLoop(c->name, intConst(numChoices), ForKind::Serial, std::move(body));
    };
    std::vector<Stmt> &stmts = out.stmts;
    stmts.push_back(overChoices({store(count, c, intConst(0, ElemKind::I32))}));
    stmts.back()->comment = strategyComment(g.op, s) + ": each pair's slot by its choice";
    const std::string overflowName = freshName("overflow");
    Expr overflow = var(overflowName, ElemKind::Index);
    stmts.push_back(local(overflowName, intConst(0)));
    Expr rank = loadIndex(count, choice);
    Expr overflowSlot = add(byChoiceSlots, overflow);
    for (Stmt &st :
         overPairs({ifThen(cmp("slt", rank, byChoiceRanks),
                           {store(slotOf, pair, i32(add(mul(rank, intConst(numChoices)), choice)))},
                           {store(slotOf, pair, i32(overflowSlot)),
                            store(slotChoice, overflowSlot,
                                  load(storageOf(choices).buffer, pair, choiceElem)),
                            assign(overflowName, add(overflow, intConst(1)))}),
                    store(count, choice, i32(add(rank, intConst(1))))}))
      stmts.push_back(st);
    out.permutedVectors =
        bindLet("permuted_vectors",
                mul(quotient(add(overflow, intConst(permutedSlots - 1)), permutedSlots),
                    intConst(permutedTile)),
                stmts);
    out.permutedTiles = quotient(out.permutedVectors, permutedTile);
    if (const std::optional<int64_t> total = asConstant(pairCount)) // the overflow is at most all
      out.permutedTiles = binary(OpKind::MinSI, out.permutedTiles,
                                 intConst((*total + permutedSlots - 1) / permutedSlots));
    out.width =
        bindLet("slots", add(byChoiceSlots, mul(out.permutedVectors, intConst(s.lanes))), stmts);
    // Each pair's input at its slot (packedSlotAt), the slot's place found once for every k,
    // not at each k with a division and a multiply per element: AVX2 code on the Xeon, the MoE
    // block at 32 tokens (three projections packed by choice) 22.6-22.7 ms against 23.4-23.5.
    const int placeOf = addTemp("slot_place", ElemKind::Index, pairCount);
    for (Stmt &st :
         overPairs({store(placeOf, pair,
                          packedSlotAt(loadIndex(slotOf, pair), intConst(0), runElems, s.lanes))}))
      stmts.push_back(st);
    Expr kk = vars[s.dimK];
    stmts.push_back(forLoop(
        kk->name, intConst(k), ForKind::Serial,
        overPairs(
            {store(input, add(load(placeOf, pair, ElemKind::Index), mul(kk, intConst(s.lanes))),
                   load(x.buffer, accessIndex(g.map(packInput), vars, x.dims), elem))})));
    // The slots no pair takes: each choice's ranks by choice past its pairs, and the permuted
    // ranks' slots past the overflow (choice 0).
    Expr r = var(freshName("rank"), ElemKind::Index);
    Expr taken = binary(OpKind::MinSI, loadIndex(count, c), byChoiceRanks);
    Expr slot = add(mul(add(taken, r), intConst(numChoices)), c);
    auto zeroInput = [&](const Expr &at) {
      return forLoop(kk->name, intConst(k), ForKind::Serial,
                     {store(input, packedSlotAt(at, kk, runElems, s.lanes), floatConst(0, elem))});
    };
    if (asConstant(byChoiceRanks) != 0)
      stmts.push_back(overChoices({forLoop(r->name, binary(OpKind::SubI, byChoiceRanks, taken),
                                           ForKind::Serial, {zeroInput(slot)})}));
    Expr j = var(freshName("j"), ElemKind::Index);
    Expr padSlot = add(overflowSlot, j);
    stmts.push_back(
        forLoop(j->name, binary(OpKind::SubI, out.width, overflowSlot), ForKind::Serial,
                {store(slotChoice, padSlot, intConst(0, choiceElem)), zeroInput(padSlot)}));
    return out;
  }

  // The ranks a tile of contraction.ranks by choice takes where it permutes (its overflow):
  // the most, up to its NR, that the registers hold beside the tile's rows (MR x NR
  // accumulators, MR rows' choices, NR vectors of indices, one of inputs and a permuted copy).
  // With the k blocks in the tile, one: the tile's rows are in L1 for every rank, so a rank
  // costs its permutes and FMAs alone, and the overflow takes the ranks it fills rather than
  // whole tiles of NR (at 32 tokens routed at random, 64% of calls fill one rank of 8 pairs). On
  // the Zen 3, one process alternating against `k-blocks=outside` (2-rank tiles): the MoE block
  // at 32 tokens 17.2-23.2 ms against 21.7-26.0, faster in each of eight rounds by 5-22%; S9
  // at 32 tokens with random ids 5.70-6.74 against 7.16-8.07; outside, 1-rank tiles took S9
  // 7.29-8.29 ms, as 2-rank ones.
  int permutedRanksPerTile(const Strategy &s) const {
    if (s.kBlocksInTile)
      return 1;
    int nr = s.tileN;
    while (nr > 1 && (s.tileM + 1) * nr + s.tileM + 2 > options_.target.vectorRegisters)
      --nr;
    return nr;
  }

  // contraction.ranks (see loops/Strategy.h): the pairs in their own order are the slots, C to
  // a vector, and lane j of vector v multiplies choice[v * C + j]: a step loads a row's C
  // choices as one vector and permutes it for each vector of slots. Unless the slots are the
  // pairs where they are (slotsInPlace), serially first: each slot's choice (0 in the padding)
  // and the input packed by slot. Then, m blocks in parallel, MR x NR vectors of slots
  // accumulated over the whole k (or one k block), stored by slot; and each pair's output read
  // back from its slot, unless the slots were the output itself.
  std::vector<Stmt> rankedGather(GenericView &g, const TensorStorage &result, const Strategy &s,
                                 const std::vector<Expr> &extents, const Expr &fill) {
    const Op &op = g.op;
    const int numLoops = g.numLoops();
    auto extent = [&](int d) { return *asConstant(extents[d]); };
    const auto [extract, choiceInput, choices, numChoices, pairDims, pairs, pairCount] =
        gatherParts(g, extents);
    const TensorStorage &ids = storageOf(choices);
    // Slots per vector: a lane per choice, or twice that, when a vector of a row's choices holds
    // two k steps' (see tryRanks): each step then takes `steps` of k; or, by choice, two ranks.
    const int lanes = s.lanes;
    const int steps = int(s.ranksKSteps(numChoices));
    const int packInput = pairInputOf(g, choiceInput);
    const int64_t k = extent(s.dimK), rows = extent(s.dimM);
    // The slots: the pairs rounded up to whole tiles of NR vectors; a runtime count of pairs
    // (partial specialization) sizes them at run time.
    const int64_t tileSlots = s.tileN * lanes;
    Expr width = intConst(roundUp(pairs, tileSlots));
    if (!asConstant(pairCount))
      width =
          mul(quotient(add(pairCount, intConst(tileSlots - 1)), tileSlots), intConst(tileSlots));
    const ElemKind elem = op.result()->type.elem, choiceElem = choices->type.elem;
    const int64_t runElems = packedRunElems(k, lanes, elem); // packed: each vector's run
    const TensorStorage &x = storageOf(g.input(packInput));
    const std::vector<Expr> vars = freshLoopVars(numLoops);
    Expr pair = accessIndex(g.map(choiceInput), vars, ids.dims);
    Expr kk = vars[s.dimK];
    auto overPairs = [&](std::vector<Stmt> body) {
      return loopsAround(pairDims, vars, extents, std::move(body));
    };
    auto loopOver = [&](Expr v, Expr trips, std::vector<Stmt> body) {
      return forLoop(v->name, std::move(trips), ForKind::Serial, std::move(body));
    };
    std::vector<Stmt> stmts;
    // The slots' choices, input and sums: where they are when the pairs fill whole tiles and
    // both the input and the output hold them contiguously in the ids' order (x[k, pairs],
    // out[m, pairs], as in the MoE block's three projections): the tiles then read the ids and
    // the input and add to the output in place, with nothing to pack or read back. Otherwise
    // in temporaries, each pair at its slot, and read back into the output at the end.
    const bool inPlace = !s.ranksByChoice && asConstant(width) == pairs &&
                         slotsInPlace(g, s, choiceInput, packInput, result, pairDims, pairs);
    // Sums in a temporary: its rows in whole tiles, the last tile's reads past the rows
    // (tileRowsToRead).
    const bool pastTheEnd = !inPlace && rows % s.tileM != 0;
    const int64_t sumRows = inPlace ? rows : roundUp(rows, s.tileM);
    int slotChoice = ids.buffer, input = x.buffer, sums = result.buffer, slotOf = -1;
    ChoiceSlots byChoice;
    const int permutedTile = permutedRanksPerTile(s);
    if (s.ranksByChoice) {
      slotOf = addTemp("slot", ElemKind::I32, pairCount);
      byChoice =
          slotsByChoice(g, s, packInput, choiceInput, numChoices, pairs, pairCount, k, sumRows,
                        permutedTile, slotOf, slotChoice, input, sums, vars, overPairs);
      width = byChoice.width;
      stmts = std::move(byChoice.stmts);
    } else if (!inPlace) {
      slotChoice = addTemp("slot_choice", choiceElem, width);
      input = addTemp("packed_" + g.input(packInput)->name, elem,
                      mul(quotient(width, lanes), intConst(runElems)));
      sums = addTemp("by_slot", elem, mul(intConst(sumRows), width));
      // Each slot's choice, and the input packed by vector of slots (packedSlotAt): slot `pair`
      // at kk takes x[pair, kk]. The padding after the pairs takes choice 0 and input 0:
      // products that no pair reads back.
      Expr j = var(freshName("j"), ElemKind::Index);
      Expr padding = asConstant(width) && asConstant(pairCount)
                         ? intConst(*asConstant(width) - *asConstant(pairCount))
                         : binary(OpKind::SubI, width, pairCount);
      auto overPadding = [&](const std::function<Stmt(Expr)> &storeAt, std::vector<Stmt> &into) {
        if (asConstant(padding) != 0)
          into.push_back(loopOver(j, padding, {storeAt(add(pairCount, j))}));
      };
      stmts = overPairs({store(slotChoice, pair, load(ids.buffer, pair, choiceElem))});
      stmts[0]->comment = strategyComment(op, s) + ": each slot's choice and input";
      overPadding([&](Expr slot) { return store(slotChoice, slot, intConst(0, choiceElem)); },
                  stmts);
      std::vector<Stmt> packRow =
          overPairs({store(input, packedSlotAt(pair, kk, runElems, lanes),
                           load(x.buffer, accessIndex(g.map(packInput), vars, x.dims), elem))});
      overPadding(
          [&](Expr slot) {
            return store(input, packedSlotAt(slot, kk, runElems, lanes), floatConst(0, elem));
          },
          packRow);
      stmts.push_back(loopOver(kk, intConst(k), std::move(packRow)));
    }

    // With k blocks (the packed input too large for L2 beside the streaming weights), the m
    // blocks run once per k block, each tile adding the block's products to its slots, so that
    // the block of the packed input stays in cache for all of them.
    const int64_t blockK = s.blockK ? s.blockK : k, kBlocks = k / blockK;
    const int64_t blockSteps = blockK / steps;
    Expr kBlock = var(freshName("k_block"), ElemKind::Index);
    Expr kOfStep = steps > 1 ? mul(kk, intConst(steps)) : kk;
    Expr kAt = kBlocks > 1 ? add(mul(kBlock, intConst(blockK)), kOfStep) : kOfStep;

    // The rows after the tile's, while it runs, when each row's k steps of C choices are
    // contiguous and a tile reads each row in runs shorter than a 4 KiB page: a few lines a
    // step, in order, so that memory sees one stream rather than MR streams 32 KiB apart (S9 at
    // 32 tokens on the Zen 4: 4.0-4.4 ms against 4.7-5.0). Longer runs the L2's streamer
    // follows by itself, and on the Xeon prefetching them slowed every ranks nest (S9 at 32
    // tokens, whole rows: 4.2 ms without, 5.6-5.7 with; its down projection in k blocks of 512: 4.9
    // against 5.9), while runs of 2 KiB (k blocks of 64) still needed them (5.4 ms against 8.1).
    // Into L2, which holds them until the next m block reads them. With k blocks, the next
    // rows' lines of this k block, row after row. The last tile prefetches its own rows rather
    // than past the weights (see prefetch in LoopIR.h). A tile of several rank blocks passes
    // over its rows once for each: the lines are spread over all its passes, so that memory
    // sees an even stream rather than a burst in the first pass (S9 at 32 tokens, two passes:
    // 3.66-3.72 ms against 3.83-3.87; the MoE block at 32 tokens 11.4-12.1 against 11.4-13.3).
    const NestShape::Gather gathered = *gatherOf(g);
    const int64_t strideM = gathered.strides[s.dimM], strideK = gathered.strides[s.dimK];
    const int weights = storageOf(extract->operands[0]).buffer;
    const int64_t lineElems = lineElemsOf(elem);
    Expr mBlock = var(freshName("m_block"), ElemKind::Index);
    Expr rankBlock = var(freshName("rank_block"), ElemKind::Index);
    auto prefetchNextRows = [&](int tileRows, const Expr &firstRow, std::vector<Stmt> &step) {
      const int64_t rowLines = blockK * strideK / lineElems;
      if (s.kBlocksInTile || strideM != k * strideK || strideK != numChoices ||
          rowLines * lineElems != blockK * strideK || rowLines * kLineBytes >= kPageBytes)
        return;
      const int64_t tileLines = tileRows * rowLines;
      // The passes the lines are spread over: the most that divide the rank blocks and leave a
      // line for each of their steps (one when the pairs are counted at run time). With more
      // rank blocks than that, the passes take turns, and later ones prefetch the same lines.
      const int64_t rankBlocks = asConstant(width) ? *asConstant(width) / tileSlots : 1;
      int64_t passes = std::clamp<int64_t>(tileLines / blockSteps, 1, rankBlocks);
      while (rankBlocks % passes != 0)
        --passes;
      const int64_t linesPerStep = (tileLines + blockSteps * passes - 1) / (blockSteps * passes);
      Expr pass =
          passes == rankBlocks ? rankBlock : binary(OpKind::RemUI, rankBlock, intConst(passes));
      Expr stepOfTile = passes > 1 ? add(mul(pass, intConst(blockSteps)), kk) : kk;
      Expr nextRow =
          binary(OpKind::MinSI, add(firstRow, intConst(tileRows)), intConst(rows - tileRows));
      Expr next =
          add(mul(nextRow, intConst(strideM)), mul(stepOfTile, intConst(linesPerStep * lineElems)));
      for (int64_t line = 0; line < linesPerStep; ++line) {
        if (kBlocks == 1) { // one stretch of memory
          step.push_back(prefetch(weights, add(next, intConst(line * lineElems))));
          continue;
        }
        // The tile's `nth` line, in row `row`.
        Expr nth = add(mul(stepOfTile, intConst(linesPerStep)), intConst(line));
        Expr row = add(nextRow, binary(OpKind::DivUI, nth, intConst(rowLines)));
        Expr lineOfRow = binary(OpKind::RemUI, nth, intConst(rowLines));
        step.push_back(prefetch(weights, add(add(mul(row, intConst(strideM)),
                                                 mul(kBlock, intConst(blockK * strideK))),
                                             mul(lineOfRow, intConst(lineElems)))));
      }
    };

    // Each row of the tile ahead of the step (prefetchRowsAhead) when the rows are read in runs
    // of a page or more, the case prefetchNextRows leaves. Cold on the Xeon, S9 at 32 tokens
    // took 4.35-4.44 ms without against 3.68-3.79 with, the MoE block at 32 tokens 13.3-13.8
    // against 11.3-11.6: from 83-86% of a plain read of their weights to 97-101%. Within the
    // run: past a k block's end lie lines read only in the next k block, unless the k blocks
    // are the tile's own, which reads its rows whole.
    const bool wholeRows = kBlocks == 1 || s.kBlocksInTile;
    auto prefetchAhead = [&](const std::vector<Expr> &rowOf, std::vector<Stmt> &step) {
      if (strideK == numChoices && options_.target.prefetchRowsAhead)
        prefetchRowsAhead(weights, rowOf, strideM, mul(kAt, intConst(strideK)),
                          wholeRows ? intConst(0) : mul(kBlock, intConst(blockK * strideK)),
                          (wholeRows ? k : blockK) * strideK, wholeRows && strideM == k * strideK,
                          kRanksPrefetchBytes, elem, step);
    };

    // The tile: MR rows x NR vectors of slots, from rank block `rank_block` on. Each vector of
    // slots has its choices as lane indices, and each row's C choices at each k of the step are
    // loaded once (C lanes) and permuted by them into the slots' lanes. One vector of indices
    // serves every k of the step: permuting a whole vector of two k's choices by the indices
    // plus C for the second k took twice the index registers, and a 4x4 tile's spills.
    // Statements go vector of slots by vector of slots, so that one vector of indices and its
    // inputs are live at a time beside the rows' choices.
    // Tiles of `nr` ranks (vectors of slots) from rank `firstRank` on, `blocks` of them;
    // `permuted`: lane j of a rank multiplies the choice its slot holds, else choice j.
    auto rankTiles = [&](int tileRows, const Expr &firstRow, int nr, bool permuted,
                         const Expr &firstRank, const Expr &blocks) {
      std::vector<Stmt> init, step, fini;
      std::vector<std::vector<Expr>> inputs(steps, std::vector<Expr>(nr));
      std::vector<Expr> lanesOf(nr);
      auto rankAt = [&](int n) {
        return add(firstRank, add(mul(rankBlock, intConst(nr)), intConst(n)));
      };
      auto slotAt = [&](int n) { return mul(rankAt(n), intConst(lanes)); };
      // The inputs of rank n at k: in place, in the pairs' row of k; packed, in the rank's run.
      auto inputAt = [&](const Expr &kIndex, int n) {
        return inPlace ? add(mul(kIndex, width), slotAt(n))
                       : packedVectorAt(rankAt(n), kIndex, runElems, lanes);
      };
      const std::vector<Expr> rowOf = tileRowsToRead(firstRow, tileRows, rows, pastTheEnd);
      std::vector<std::vector<Expr>> choicesOfRow(tileRows, std::vector<Expr>(steps));
      // By choice, each row's choices as many times as a vector of slots holds them.
      std::vector<Expr> repeatedChoicesOfRow(tileRows);
      std::vector<int> repeat(lanes);
      for (int lane = 0; lane < lanes; ++lane)
        repeat[lane] = int(lane % numChoices);
      for (int r = 0; r < tileRows; ++r) {
        for (int h = 0; h < steps; ++h)
          choicesOfRow[r][h] =
              bindLet(extract->result(),
                      load(weights,
                           add(add(mul(rowOf[r], intConst(strideM)), mul(kAt, intConst(strideK))),
                               intConst(h * numChoices)),
                           elem, int(numChoices)),
                      step);
        repeatedChoicesOfRow[r] = choicesOfRow[r][0];
        if (!permuted && lanes > numChoices)
          repeatedChoicesOfRow[r] =
              bindLet("repeated", shuffle(choicesOfRow[r][0], choicesOfRow[r][0], repeat), step);
      }
      for (int n = 0; n < nr; ++n) {
        if (permuted)
          lanesOf[n] = bindLet("lanes", load(slotChoice, slotAt(n), choiceElem, lanes), init);
        for (int h = 0; h < steps; ++h)
          inputs[h][n] = bindLet(g.body().arguments[packInput].get(),
                                 load(input, inputAt(add(kAt, intConst(h)), n), elem, lanes), step);
      }
      std::vector<Expr> accs(tileRows * nr);
      for (int n = 0; n < nr; ++n)
        for (int h = 0; h < steps; ++h)
          for (int r = 0; r < tileRows; ++r) {
            const Expr &row = rowOf[r];
            std::vector<Expr> iv = vars;
            iv[s.dimM] = row;
            iv[s.dimK] = add(kAt, intConst(h));
            std::unordered_map<const Value *, Expr> values;
            values[g.body().arguments[packInput].get()] = inputs[h][n];
            values[g.body().arguments[choiceInput].get()] = intConst(0, choiceElem);
            values[extract->result()] =
                permuted ? permute(choicesOfRow[r][h], lanesOf[n]) : repeatedChoicesOfRow[r];
            bindOtherInputs(g, values, iv, packInput, choiceInput);
            Expr &acc = accs[r * nr + n];
            if (h > 0) {
              accumulateChoiceLanes(g, values, iv, extents, acc, step);
              continue;
            }
            Expr at = add(mul(add(firstRow, intConst(r)), width), slotAt(n));
            Expr initial = inPlace        ? load(sums, at, elem, lanes)
                           : kBlocks == 1 ? nullptr
                                          : select(cmp("eq", kBlock, intConst(0)),
                                                   broadcast(floatConst(0, elem), lanes),
                                                   load(sums, at, elem, lanes));
            acc = choiceLanesAccumulator(g, values, iv, extents, lanes, init, step, initial);
            fini.push_back(store(sums, at, acc));
          }
      prefetchNextRows(tileRows, firstRow, step);
      prefetchAhead(rowOf, step);
      std::vector<Stmt> tile = std::move(init);
      tile.push_back(loopOver(kk, intConst(blockSteps), std::move(step)));
      tile.insert(tile.end(), fini.begin(), fini.end());
      return loopOver(rankBlock, blocks, std::move(tile));
    };
    // Every rank block of the tile, by choice and permuted, passes over the tile's rows of one k
    // block, from L1, before the next.
    auto inTileBlocks = [&](std::vector<Stmt> passes) {
      if (!s.kBlocksInTile)
        return passes.size() == 1 ? passes[0] : block(std::move(passes));
      Stmt blocks = loopOver(kBlock, intConst(kBlocks), std::move(passes));
      blocks->comment = "each k block of the tile's rows, for every rank block";
      return blocks;
    };
    auto buildTile = [&](int tileRows, const Expr &firstRow) {
      if (!s.ranksByChoice)
        return inTileBlocks({rankTiles(tileRows, firstRow, s.tileN, true, intConst(0),
                                       quotient(width, tileSlots))});
      std::vector<Stmt> both;
      if (asConstant(byChoice.byChoiceVectors) != 0)
        both.push_back(rankTiles(tileRows, firstRow, s.tileN, false, intConst(0),
                                 quotient(byChoice.byChoiceVectors, s.tileN)));
      // The permuted vectors of slots follow those by choice.
      both.push_back(rankTiles(tileRows, firstRow, permutedTile, true, byChoice.byChoiceVectors,
                               byChoice.permutedTiles));
      return inTileBlocks(std::move(both));
    };
    Expr o = vars[s.dimM];
    Expr slotOfPair = s.ranksByChoice ? loadIndex(slotOf, pair) : pair;
    emitSlotTiles(g, result, s, buildTile, mBlock, rows, rows * k * pairs, pairs, vars, overPairs,
                  inPlace ? nullptr : load(sums, add(mul(o, width), slotOfPair), elem), fill,
                  pastTheEnd, kBlock, s.kBlocksInTile ? 1 : kBlocks, stmts);
    return stmts;
  }

  // contraction.choices (see loops/Strategy.h): a tile of MR rows computes every choice of
  // every pair, the choices being the lanes, into by_choice[m, pair, choice]; each pair then
  // adds the lane of its own choice to the output.
  void emitChoiceLanes(GenericView &g, const TensorStorage &result, const Strategy &s,
                       const std::vector<Expr> &extents) {
    const Op &op = g.op;
    const int numLoops = g.numLoops();
    auto extent = [&](int d) { return *asConstant(extents[d]); };
    const auto [extract, choiceInput, choices, numChoices, pairDims, pairs, pairCount] =
        gatherParts(g, extents);
    const TensorStorage &ids = storageOf(choices);
    const int64_t k = extent(s.dimK), rows = extent(s.dimM);
    const ElemKind elem = op.result()->type.elem;
    const int lanes = s.lanes;
    int byChoice = addTemp("by_choice", elem, intConst(rows * pairs * numChoices));
    checkChoices(extract, choices);

    // The loop variables of pair p: its coordinates along the pair dims (row-major), 0 elsewhere.
    auto pairCoords = [&](int64_t p, std::vector<Expr> iv) {
      for (auto d = pairDims.rbegin(); d != pairDims.rend(); ++d) {
        iv[*d] = intConst(p % extent(*d));
        p /= extent(*d);
      }
      return iv;
    };
    std::vector<Expr> base(numLoops, intConst(0));
    Expr kk = var(freshName(fmt::format("d{}", s.dimK)), ElemKind::Index);
    auto buildTile = [&](int tileRows, const Expr &firstRow) {
      std::vector<Stmt> init, step, fini;
      for (int r = 0; r < tileRows; ++r)
        for (int64_t p = 0; p < pairs; ++p) {
          std::vector<Expr> iv = pairCoords(p, base);
          iv[s.dimM] = add(firstRow, intConst(r));
          iv[s.dimK] = kk;
          for (int vec = 0; vec < s.tileN; ++vec) {
            std::unordered_map<const Value *, Expr> values;
            for (int i = 0; i < g.numInputs(); ++i) {
              const Value *operand = g.input(i);
              const Value *arg = g.body().arguments[i].get();
              if (i == choiceInput) // the first choice of this vector: the extract loads `lanes`
                values[arg] = intConst(vec * lanes, choices->type.elem);
              else if (!operand->type.isTensor())
                values[arg] = scalarOf(operand);
              else
                values[arg] =
                    load(storageOf(operand).buffer,
                         accessIndex(g.map(i), iv, storageOf(operand).dims), operand->type.elem);
            }
            Expr acc = choiceLanesAccumulator(g, values, iv, extents, lanes, init, step);
            Expr at =
                add(mul(add(mul(iv[s.dimM], intConst(pairs)), intConst(p)), intConst(numChoices)),
                    intConst(vec * lanes));
            fini.push_back(store(byChoice, at, acc));
          }
        }
      // Each row ahead of the step (prefetchRowsAhead), when a row's choices at each k follow
      // the previous k's: cold on the Xeon, S9 at one token took 4.13-4.15 ms without against
      // 3.61-3.64 with, the MoE block at one token 12.5-12.6 against 10.6-11.2, where a plain
      // read of their weights, one stream a thread, took 4.0 and 11.8-12.2.
      const NestShape::Gather gathered = *gatherOf(g);
      const int64_t strideM = gathered.strides[s.dimM], strideK = gathered.strides[s.dimK];
      if (strideK == numChoices && options_.target.prefetchRowsAhead) {
        std::vector<Expr> rows;
        for (int r = 0; r < tileRows; ++r)
          rows.push_back(add(firstRow, intConst(r)));
        prefetchRowsAhead(storageOf(extract->operands[0]).buffer, rows, strideM,
                          mul(kk, intConst(strideK)), intConst(0), k * strideK,
                          strideM == k * strideK, kChoicesPrefetchBytes, elem, step);
      }
      std::vector<Stmt> tile = std::move(init);
      tile.push_back(forLoop(kk->name, intConst(k), ForKind::Serial, std::move(step)));
      tile.insert(tile.end(), fini.begin(), fini.end());
      return tile;
    };
    std::vector<Stmt> stmts;
    Expr mBlock = var(freshName("m_block"), ElemKind::Index);
    const int64_t mTrips = rows / s.tileM;
    Stmt nest = forLoop(mBlock->name, intConst(mTrips), ForKind::Parallel,
                        buildTile(s.tileM, mul(mBlock, intConst(s.tileM))));
    nest->bound = minChunk(rows * k * numChoices * pairs, mTrips);
    nest->comment = strategyComment(op, s);
    stmts.push_back(nest);
    if (rows % s.tileM)
      for (Stmt &st : buildTile(int(rows % s.tileM), intConst(rows - rows % s.tileM)))
        stmts.push_back(st);
    // Each pair's sum: the lane of its choice, added to the output.
    Expr m = var(freshName(fmt::format("d{}", s.dimM)), ElemKind::Index);
    std::vector<Stmt> readBack;
    for (int64_t p = 0; p < pairs; ++p) {
      std::vector<Expr> iv = pairCoords(p, base);
      iv[s.dimM] = m;
      Expr choice =
          cast(OpKind::IndexCast,
               load(ids.buffer, accessIndex(g.map(choiceInput), iv, ids.dims), choices->type.elem),
               ElemKind::Index);
      Expr outIndex = accessIndex(g.outputMap(), iv, result.dims);
      Expr lane = add(mul(add(mul(m, intConst(pairs)), intConst(p)), intConst(numChoices)), choice);
      readBack.push_back(addToOutput(result, outIndex, load(byChoice, lane, elem), elem));
    }
    Stmt unpack = forLoop(m->name, intConst(rows), ForKind::Parallel, std::move(readBack));
    unpack->bound = minChunk(rows * pairs, rows);
    unpack->comment = "each pair takes the lane of its choice";
    stmts.push_back(unpack);
    append(stmts);
  }

  // contraction.stream (see loops/Strategy.h): for each part of N, or of k (in parallel), MR
  // rows of B at a time are added to every vector of the part's slice of the output, or of its
  // own partial output. With `runtimeRows` (a runtime m of at most the constant extents[m], split k
  // only) the nest runs extents[m] rows into partial outputs, of which it adds up the runtime
  // rows: the rows past them read A's last row.
  void emitStream(GenericView &g, const TensorStorage &result, const Strategy &s,
                  const std::vector<Expr> &extents, const Expr &runtimeRows = nullptr) {
    const int numLoops = g.numLoops();
    const int lanes = s.lanes;
    const int64_t k = *asConstant(extents[s.dimK]);
    const int64_t n = *asConstant(extents[s.dimN]);
    // The output's rows (m), each B vector loaded once for all of them.
    const int64_t rowsOut = s.dimM >= 0 ? *asConstant(extents[s.dimM]) : 1;
    if (runtimeRows && (s.dimM < 0 || !s.splitK))
      internalError("contraction.stream over a runtime number of rows without partial outputs");
    // The row of A that output row i reads.
    auto rowOfA = [&](int64_t i) {
      return runtimeRows ? binary(OpKind::MinSI, intConst(i),
                                  binary(OpKind::SubI, runtimeRows, intConst(1)))
                         : intConst(i);
    };
    const bool splitK = s.splitK;
    const int parts = s.tileN;
    const int64_t partVectors = splitK ? n / lanes : n / lanes / s.tileN;
    const int64_t partK = splitK ? k / parts : k;
    const ElemKind elem = g.op.result()->type.elem;
    const Value *outArg = g.body().arguments.back().get();
    Expr part = var(freshName("part"), ElemKind::Index);
    Expr step = var(freshName("k_step"), ElemKind::Index);
    Expr v = var(freshName("v"), ElemKind::Index);
    // split k: each part sums its rows of B into a partial output of its own, added up after.
    const int64_t partialSize = rowsOut * n;
    int partial = splitK ? addTemp("partial", elem, intConst(parts * partialSize)) : -1;
    auto partialAt = [&](const Expr &p, const Expr &row, const Expr &column) {
      return add(add(mul(p, intConst(partialSize)), mul(row, intConst(n))), column);
    };
    auto accumulatorAt = [&](const std::vector<Expr> &iv) {
      if (splitK)
        return std::make_pair(partial,
                              partialAt(part, s.dimM >= 0 ? iv[s.dimM] : intConst(0), iv[s.dimN]));
      return std::make_pair(result.buffer, accessIndex(g.outputMap(), iv, result.dims));
    };
    // The columns past the whole vectors (an n of no whole vectors, split k): each part adds its
    // rows to them one lane wide after its vectors.
    const int64_t columnsLeft = n % lanes;
    if (columnsLeft && !splitK)
      internalError("contraction.stream with columns left over and parts of n");
    // `rows` rows of B from `firstRow`, added to vector v of the part in every output row; with
    // `tail`, to column n - n % lanes + v, one lane wide.
    auto addRows = [&](int rows, const Expr &firstRow, bool tail = false) {
      const int width = tail ? 1 : lanes;
      std::vector<std::vector<Expr>> ivs(size_t(rowsOut), std::vector<Expr>(numLoops, intConst(0)));
      std::vector<Stmt> body;
      std::vector<std::string> accs;
      for (int64_t i = 0; i < rowsOut; ++i) {
        std::vector<Expr> &iv = ivs[size_t(i)];
        iv[s.dimN] = tail     ? add(intConst(n - columnsLeft), v)
                     : splitK ? mul(v, intConst(lanes))
                              : mul(add(mul(part, intConst(partVectors)), v), intConst(lanes));
        if (s.dimM >= 0)
          iv[s.dimM] = intConst(i);
        auto [accBuffer, accIndex] = accumulatorAt(iv);
        accs.push_back(freshName("acc"));
        body.push_back(local(accs.back(), load(accBuffer, accIndex, elem, width)));
      }
      Expr aheadFirstRow = binary(OpKind::MinSI, add(firstRow, intConst(s.prefetchAhead * s.tileM)),
                                  intConst(k - rows));
      for (int r = 0; r < rows; ++r) {
        for (std::vector<Expr> &iv : ivs)
          iv[s.dimK] = add(firstRow, intConst(r));
        std::unordered_map<const Value *, Expr> shared; // B's vectors, loaded once
        for (int64_t i = 0; i < rowsOut; ++i) {
          const std::vector<Expr> &iv = ivs[size_t(i)];
          std::unordered_map<const Value *, Expr> values;
          for (int j = 0; j < g.numInputs(); ++j) {
            const Value *operand = g.input(j);
            const Value *arg = g.body().arguments[j].get();
            if (!operand->type.isTensor()) {
              values[arg] = scalarOf(operand);
              continue;
            }
            // B (not read along m) is loaded once, in the first row, for every row.
            const bool perRow = s.dimM >= 0 && mapUses(g.map(j), s.dimM);
            if (!perRow && i > 0) {
              values[arg] = shared[arg];
              continue;
            }
            const TensorStorage &t = storageOf(operand);
            const int loadWidth = mapUses(g.map(j), s.dimN) ? width : 1;
            std::vector<Expr> at = iv;
            if (perRow)
              at[s.dimM] = rowOfA(i);
            values[arg] = bindLet(
                arg,
                load(t.buffer, accessIndex(g.map(j), at, t.dims), operand->type.elem, loadWidth),
                body);
            shared[arg] = values[arg];
            // B's line at this vector, `prefetchAhead` steps of rows further: after a part's
            // last step, the next part's rows; at the end of B, the step's own rows rather than
            // rows past B (see prefetch in LoopIR.h). One bound for the step's rows: a bound
            // per row made O3 take a third longer on S8.
            if (s.prefetchAhead && loadWidth == lanes && !perRow && mapUses(g.map(j), s.dimK)) {
              std::vector<Expr> ahead = iv;
              ahead[s.dimK] = add(aheadFirstRow, intConst(r));
              body.push_back(prefetch(t.buffer, accessIndex(g.map(j), ahead, t.dims)));
            }
          }
          values[outArg] = var(accs[size_t(i)], elem, width);
          BodyContext context{iv, extents, outArg, true};
          body.push_back(
              assign(accs[size_t(i)], lowerScalarBlock(g.body(), values, context, body)));
        }
      }
      for (int64_t i = 0; i < rowsOut; ++i) {
        auto [accBuffer, accIndex] = accumulatorAt(ivs[size_t(i)]);
        body.push_back(store(accBuffer, accIndex, var(accs[size_t(i)], elem, width)));
      }
      return forLoop(v->name, intConst(tail ? columnsLeft : partVectors), ForKind::Serial,
                     std::move(body));
    };
    // The step's rows to the vectors, then to any columns left over.
    auto addRowsToAll = [&](int rows, const Expr &firstRow) {
      std::vector<Stmt> stmts = {addRows(rows, firstRow)};
      if (columnsLeft)
        stmts.push_back(addRows(rows, firstRow, true));
      return stmts;
    };
    Expr firstK = splitK ? mul(part, intConst(partK)) : intConst(0);
    std::vector<Stmt> perPart;
    if (splitK) { // each part's partial output, rows of n that may be no whole vectors
      Expr zero = var(freshName("j"), ElemKind::Index);
      perPart.push_back(forLoop(
          zero->name, intConst(partialSize), ForKind::Vectorize,
          {store(partial, add(mul(part, intConst(partialSize)), zero), floatConst(0, elem))}));
    }
    perPart.push_back(forLoop(step->name, intConst(partK / s.tileM), ForKind::Serial,
                              addRowsToAll(s.tileM, add(firstK, mul(step, intConst(s.tileM))))));
    if (partK % s.tileM)
      for (Stmt &rest :
           addRowsToAll(int(partK % s.tileM), add(firstK, intConst(partK - partK % s.tileM))))
        perPart.push_back(rest);
    // Parallel only when large (kMinParallelElements), as other nests: a router's few rows of
    // products would otherwise bring in a chunk function and a call to the thread pool.
    const int64_t total = rowsOut * n * k;
    const bool parallel = total >= kMinParallelElements;
    Stmt nest = forLoop(part->name, intConst(parts), parallel ? ForKind::Parallel : ForKind::Serial,
                        std::move(perPart));
    if (parallel)
      nest->bound = minChunk(total, parts);
    nest->comment = strategyComment(g.op, s);
    std::vector<Stmt> stmts{nest};
    if (splitK && k % parts) { // the rows past the parts' (an odd k): the first part's, after
      part = var(freshName("part"), ElemKind::Index);
      stmts.push_back(forLoop(part->name, intConst(1), ForKind::Serial,
                              addRowsToAll(int(k % parts), intConst(k - k % parts))));
    }
    if (splitK) {
      Expr row = var(freshName("m"), ElemKind::Index);
      Expr j = var(freshName("n"), ElemKind::Index);
      std::vector<Expr> iv(numLoops, intConst(0));
      iv[s.dimN] = j;
      if (s.dimM >= 0)
        iv[s.dimM] = row;
      Expr outIndex = accessIndex(g.outputMap(), iv, result.dims);
      Expr sum = load(result.buffer, outIndex, elem);
      for (int p = 0; p < parts; ++p)
        sum =
            binary(OpKind::AddF, sum,
                   load(partial, partialAt(intConst(p), s.dimM >= 0 ? row : intConst(0), j), elem));
      Stmt gatherParts =
          forLoop(j->name, intConst(n), ForKind::Vectorize, {store(result.buffer, outIndex, sum)});
      if (s.dimM >= 0)
        gatherParts = forLoop(row->name, runtimeRows ? runtimeRows : intConst(rowsOut),
                              ForKind::Serial, {gatherParts});
      gatherParts->comment = "add the parts' partial sums";
      stmts.push_back(gatherParts);
    }
    append(stmts);
  }

  struct BodyContext {
    const std::vector<Expr> &iv;      // loop variables, for linalg.index
    const std::vector<Expr> &extents; // their trip counts
    const Value *accumulator;         // the outs block argument
    bool reassociate;                 // the accumulation may be reassociated
  };

  // Lowers the scalar ops of a generic body (or of an scf.if region inside one) into lets, and
  // returns the value its terminator yields (the first one for scf.yield with several).
  // Both regions of an scf.if run, and a select picks the results: the ops of a region run
  // where the source runs them only where `guard` holds (nullptr: everywhere). Their checks
  // (bounds, division) hold only there, and elsewhere they neither read nor trap.
  Expr lowerScalarBlock(const Block &block, std::unordered_map<const Value *, Expr> &values,
                        const BodyContext &context, std::vector<Stmt> &inner,
                        std::vector<Expr> *yields = nullptr, const Expr &guard = nullptr) {
    for (auto &bodyOp : block.ops) {
      if (bodyOp->kind == OpKind::LinalgYield || bodyOp->kind == OpKind::ScfYield ||
          bodyOp->kind == OpKind::ExtYield) {
        std::vector<Expr> out;
        for (const Value *v : bodyOp->operands)
          out.push_back(lookupBody(values, v));
        if (yields)
          *yields = out;
        return out.empty() ? nullptr : out[0];
      }
      if (bodyOp->kind == OpKind::LinalgIndex) {
        values[bodyOp->result()] = context.iv[indexDim(*bodyOp)];
        continue;
      }
      if (bodyOp->kind == OpKind::TensorExtract) {
        if (values.count(bodyOp->result()))
          continue; // read beforehand (a contraction.ranks tile's permuted row)
        values[bodyOp->result()] =
            bindLet(bodyOp->result(), extractExpr(*bodyOp, values, inner, &context, guard), inner);
        continue;
      }
      if (bodyOp->kind == OpKind::ScfIf) {
        // Both regions are pure scalar code: evaluate both, then select.
        Expr cond = lookupBody(values, bodyOp->operands[0]);
        std::vector<Expr> thenValues, elseValues;
        lowerScalarBlock(*bodyOp->regions[0], values, context, inner, &thenValues,
                         conjunction(guard, cond));
        lowerScalarBlock(*bodyOp->regions[1], values, context, inner, &elseValues,
                         conjunction(guard, negation(cond)));
        for (size_t r = 0; r < bodyOp->results.size(); ++r)
          values[bodyOp->result(static_cast<int>(r))] =
              bindLet(bodyOp->result(static_cast<int>(r)),
                      select(cond, thenValues[r], elseValues[r]), inner);
        continue;
      }
      if (bodyOp->results.size() == 1 && values.count(bodyOp->result()))
        continue; // computed beforehand (hoistInvariantMath)
      std::vector<Expr> args;
      for (const Value *v : bodyOp->operands)
        args.push_back(lookupBody(values, v));
      checkDivision(*bodyOp, args, inner, guard);
      Expr e = scalarExpr(*bodyOp, args, /*speculative=*/guard != nullptr);
      // Only the accumulation itself may be reassociated, and only when specialized.
      bool accumulates = context.reassociate && e->kind == ExprKind::Binary &&
                         (bodyOp->operands[0] == context.accumulator ||
                          bodyOp->operands[1] == context.accumulator) &&
                         (bodyOp->kind == OpKind::AddF || bodyOp->kind == OpKind::MulF);
      if (accumulates)
        e = binary(e->op, e->args[0], e->args[1], true);
      if (bodyOp->kind == OpKind::ArithConstant) {
        values[bodyOp->result()] = e;
        continue;
      }
      values[bodyOp->result()] = bindLet(bodyOp->result(), e, inner);
    }
    internalError("a scalar region without a terminator");
  }

  Expr bindLet(const Value *v, Expr e, std::vector<Stmt> &stmts) {
    return bindLet(v->name, std::move(e), stmts);
  }
  Expr bindLet(const std::string &base, Expr e, std::vector<Stmt> &stmts) {
    std::string name = freshName(base);
    stmts.push_back(let(name, e));
    return var(name, e->type, e->lanes);
  }

  // tensor.extract: a load at the row-major position of the indices, each checked against its
  // dim first when bounds checks are on (an unsigned compare catches negative indices too).
  // In a contraction.gather tile the choice was checked before the nest. Under a `guard` (an
  // scf.if region in a body), the check and the load happen only where the guard holds.
  Expr extractExpr(const Op &op, const std::unordered_map<const Value *, Expr> &values,
                   std::vector<Stmt> &stmts, const BodyContext *body = nullptr,
                   const Expr &guard = nullptr) {
    if (guard) {
      const ElemKind elem = op.operands[0]->type.elem;
      Expr zero = isFloatElem(elem) ? floatConst(0, elem) : intConst(0, elem);
      const std::string name = freshName(op.result()->name);
      stmts.push_back(local(name, choiceLanes_ > 1 ? broadcast(zero, choiceLanes_) : zero));
      std::vector<Stmt> guarded;
      Expr value = extractExpr(op, values, guarded);
      guarded.push_back(assign(name, value));
      stmts.push_back(ifThen(guard, std::move(guarded)));
      return var(name, elem, choiceLanes_);
    }
    const TensorStorage &t = storageOf(op.operands[0]);
    std::vector<Expr> coords;
    for (size_t i = 1; i < op.operands.size(); ++i) {
      Expr c = lookupBody(values, op.operands[i]);
      coords.push_back(c);
      // A loop index stays in bounds if its loop does: one check per kernel, always on. A
      // gather's slice loops must span the source's dims (kWholeSliceAttr).
      if (body) {
        auto loop = std::find(body->iv.begin(), body->iv.end(), c);
        if (loop != body->iv.end()) {
          const bool whole = op.attrs.count(kWholeSliceAttr) != 0;
          requireEqual(op, body->extents[loop - body->iv.begin()], t.dims[i - 1],
                       whole ? fmt::format("the gather's output has slices of {{}} along dim {} "
                                           "of '%{}', which has size {{}}",
                                           i - 1, op.operands[0]->name)
                             : fmt::format("a loop of extent {{}} indexes dim {} of '%{}', which "
                                           "has size {{}}",
                                           i - 1, op.operands[0]->name),
                       !whole);
          continue;
        }
      }
      if (!boundsChecks_ || choicesChecked_)
        continue;
      auto &checks = out_.program.checks;
      checks.push_back(
          {op.loc, fmt::format("index {{}} is out of bounds for dim {} of '%{}', which "
                               "has size {{}}",
                               i - 1, op.operands[0]->name)});
      Expr dim = t.dims[i - 1];
      stmts.push_back(check(cmp("ult", c, dim), static_cast<int>(checks.size()) - 1, c, dim));
    }
    return load(t.buffer, linearIndex(coords, t.dims), op.operands[0]->type.elem, choiceLanes_);
  }

  // Every choice of a contraction.gather, checked before its nest.
  void checkChoices(const Op *extract, const Value *choices) {
    const TensorStorage &from = storageOf(choices);
    const TensorStorage &into = storageOf(extract->operands[0]);
    auto &checks = out_.program.checks;
    checks.push_back({extract->loc, fmt::format("index {{}} is out of bounds for dim {} of '%{}', "
                                                "which has size {{}}",
                                                into.dims.size() - 1, extract->operands[0]->name)});
    std::string name = freshName("choice");
    Expr choice =
        cast(OpKind::IndexCast, load(from.buffer, var(name, ElemKind::Index), choices->type.elem),
             ElemKind::Index);
    Expr bound = into.dims.back();
    std::vector<Stmt> loop = {
        forLoop(name, numElements(from.dims), ForKind::Serial,
                {check(cmp("ult", choice, bound), int(checks.size()) - 1, choice, bound)})};
    append(loop);
  }

  // A view shares its source's buffer (row-major, contiguous) under new dims.
  void lowerView(const Op &op) {
    const TensorStorage &src = storageOf(op.operands[0]);
    TensorStorage view{src.buffer, {}};
    if (op.kind == OpKind::TensorCast) {
      view.dims = src.dims;
      // A cast to a static dim asserts it (specialization checks constants; a runtime extent
      // is checked when the kernel runs), and the view's users then see the constant.
      const Type &to = op.result()->type;
      for (int64_t d = 0; d < to.rank(); ++d)
        if (to.shape[d] != kDynamic) {
          requireEqual(
              op, src.dims[d], intConst(to.shape[d]),
              fmt::format("'tensor.cast' to '{}' finds {{}} where dim {} is {{}}", to.str(), d));
          view.dims[d] = intConst(to.shape[d]);
        }
    } else if (op.kind == OpKind::TensorExpandShape) {
      size_t next = 1;
      for (const Attribute &a : op.attr("static_output_shape").list()) {
        if (a.integer() != kDynamic) {
          view.dims.push_back(intConst(a.integer()));
          continue;
        }
        // As specialization does when the size folds: two negative sizes would otherwise
        // multiply to the source's.
        const size_t d = view.dims.size();
        view.dims.push_back(sizeOperand(op, op.operands[next++]));
        requireEqual(op, intConst(0), view.dims.back(),
                     fmt::format("'tensor.expand_shape' output dim {} is negative ({{1}})", d),
                     true);
      }
      size_t dim = 0;
      const AttrList &groups = op.attr("reassociation").list();
      for (size_t g = 0; g < groups.size(); ++g) {
        Expr product = intConst(1);
        for (size_t k = 0; k < groups[g].list().size(); ++k)
          product = mul(product, view.dims[dim++]);
        requireEqual(op, src.dims[g], product,
                     fmt::format("'tensor.expand_shape' splits dim {} of size {{}} into {{}} "
                                 "elements",
                                 g));
      }
    } else {
      size_t dim = 0;
      for (const Attribute &group : op.attr("reassociation").list()) {
        Expr product = intConst(1);
        for (size_t k = 0; k < group.list().size(); ++k)
          product = mul(product, src.dims[dim++]);
        view.dims.push_back(product);
      }
    }
    if (op.kind != OpKind::TensorCast)
      requireDeclaredDims(op, view.dims, "the reshape gives");
    tensors_[op.result()] = view;
  }

  void lowerDenseConstant(const Op &op) {
    const auto &dense = std::get<DenseAttr>(op.attr("value").value);
    const Type &type = op.result()->type;
    TensorStorage t;
    for (int64_t d : type.shape)
      t.dims.push_back(intConst(d));
    t.buffer = bufferForRoot(storageRoot(op.result()), t.dims);
    tensors_[op.result()] = t;
    auto value = [&](const Literal &l) {
      return l.kind == Literal::Kind::Float ? floatConst(l.f, type.elem) : intConst(l.i, type.elem);
    };
    if (dense.values.size() == 1) {
      emitFill(value(dense.values[0]), t);
      return;
    }
    if (dense.values.size() > 65536)
      fail(op.loc, "unsupported: dense constants of more than 65536 elements");
    for (size_t i = 0; i < dense.values.size(); ++i)
      current_->push_back(
          store(t.buffer, intConst(static_cast<int64_t>(i)), value(dense.values[i])));
  }

  // Offsets, sizes and strides of a slice as expressions.
  struct Window {
    std::vector<Expr> offsets, sizes;
    std::vector<int64_t> strides;
    std::vector<bool> dropped; // unit dims a rank-reducing slice leaves out

    // The slice's dims: the sizes less the dropped ones.
    std::vector<Expr> sliceDims() const {
      std::vector<Expr> dims;
      for (size_t d = 0; d < sizes.size(); ++d)
        if (!dropped[d])
          dims.push_back(sizes[d]);
      return dims;
    }
  };

  Window windowOf(const Op &op) {
    Window w;
    size_t next = op.kind == OpKind::TensorInsertSlice ? 2 : 1;
    for (const Attribute &a : op.attr("static_offsets").list())
      w.offsets.push_back(a.integer() == kDynamic ? scalarOf(op.operands[next++])
                                                  : intConst(a.integer()));
    for (const Attribute &a : op.attr("static_sizes").list())
      w.sizes.push_back(a.integer() == kDynamic ? sizeOperand(op, op.operands[next++])
                                                : intConst(a.integer()));
    for (const Attribute &a : op.attr("static_strides").list())
      w.strides.push_back(a.integer());
    std::vector<int64_t> sizes;
    for (const Expr &size : w.sizes)
      sizes.push_back(asConstant(size).value_or(kDynamic));
    const Type &slice =
        op.kind == OpKind::TensorInsertSlice ? op.operands[0]->type : op.result()->type;
    std::optional<std::vector<bool>> dropped = droppedSliceDims(op, sizes);
    // As specialization says it when the sizes are known; generic mode had read past the dims.
    if (!dropped)
      fail(op.loc, notRankReducible(sizes, slice));
    w.dropped = *dropped;
    return w;
  }

  // Windows whose offsets are only known at run time are checked before they are copied.
  void checkWindow(const Op &op, const Window &w, const TensorStorage &full) {
    for (size_t d = 0; d < w.offsets.size(); ++d) {
      if (asConstant(w.offsets[d]) && asConstant(w.sizes[d]) && asConstant(full.dims[d]))
        continue; // specialization checked it
      Expr lastStep = asConstant(w.sizes[d]) ? intConst(*asConstant(w.sizes[d]) - 1)
                                             : binary(OpKind::SubI, w.sizes[d], intConst(1));
      Expr extent = add(w.offsets[d], mul(lastStep, intConst(w.strides[d])));
      // The start, then the end, compared without overflow: an offset near 2^63 would wrap
      // offset + size past the check.
      Expr empty = cmp("eq", w.sizes[d], intConst(0));
      Expr starts = binary(OpKind::AndI, cmp("sge", w.offsets[d], intConst(0)),
                           cmp("slt", w.offsets[d], full.dims[d]));
      checkInKernel(
          op, binary(OpKind::OrI, empty, starts), w.offsets[d], full.dims[d],
          fmt::format("the slice window starts at {{}} in dim {}, which has size {{}}", d),
          *current_);
      Expr room = binary(
          OpKind::DivSI,
          binary(OpKind::SubI, binary(OpKind::SubI, full.dims[d], intConst(1)), w.offsets[d]),
          intConst(w.strides[d]));
      Expr fits = binary(OpKind::AndI, cmp("sge", w.sizes[d], intConst(0)),
                         binary(OpKind::OrI, empty, cmp("sle", lastStep, room)));
      checkInKernel(
          op, fits, extent, full.dims[d],
          fmt::format("the slice window reaches index {{}} in dim {}, which has size {{}}", d),
          *current_);
    }
  }

  // Copies between a slice and its window of the full tensor, in either direction.
  void emitWindowCopy(const Window &w, const TensorStorage &full, const TensorStorage &slice,
                      bool intoFull) {
    std::vector<Expr> sliceDims = w.sliceDims();
    ElemKind elem = out_.program.buffers[slice.buffer].elem;
    auto nest = loopNest(sliceDims, [&](const std::vector<Expr> &iv) {
      std::vector<Expr> fullCoords;
      size_t next = 0;
      for (size_t d = 0; d < w.sizes.size(); ++d) {
        Expr i = w.dropped[d] ? intConst(0) : iv[next++];
        fullCoords.push_back(add(w.offsets[d], mul(i, intConst(w.strides[d]))));
      }
      Expr fullIndex = linearIndex(fullCoords, full.dims);
      Expr sliceIndex = linearIndex(iv, slice.dims);
      if (intoFull)
        return std::vector<Stmt>{
            store(full.buffer, fullIndex, load(slice.buffer, sliceIndex, elem))};
      return std::vector<Stmt>{store(slice.buffer, sliceIndex, load(full.buffer, fullIndex, elem))};
    });
    append(nest);
  }

  void lowerSlice(const Op &op) {
    if (op.kind == OpKind::TensorExtractSlice) {
      const TensorStorage &src = storageOf(op.operands[0]);
      Window w = windowOf(op);
      TensorStorage slice;
      slice.dims = w.sliceDims();
      requireDeclaredDims(op, slice.dims, "the slice size is");
      slice.buffer = bufferForRoot(storageRoot(op.result()), slice.dims);
      tensors_[op.result()] = slice;
      checkWindow(op, w, src);
      emitWindowCopy(w, src, slice, false);
      return;
    }
    const TensorStorage &dst = storageOf(op.operands[1]);
    TensorStorage result{dst.buffer, dst.dims};
    if (storageRoot(op.result()) != storageRoot(op.operands[1])) {
      result.buffer = bufferForRoot(storageRoot(op.result()), dst.dims);
      emitCopy(dst, result);
    }
    tensors_[op.result()] = result;
    Window w = windowOf(op);
    checkWindow(op, w, result);
    const TensorStorage &inserted = storageOf(op.operands[0]);
    const std::vector<Expr> sliceDims = w.sliceDims();
    for (size_t d = 0; d < sliceDims.size(); ++d)
      requireEqual(op, inserted.dims[d], sliceDims[d],
                   fmt::format("dim {} of the inserted '%{}' is {{}} but the slice size is {{}}", d,
                               op.operands[0]->name));
    emitWindowCopy(w, result, inserted, true);
  }

  // The static dims of `op`'s result type must be the `dims` it computes (specialization checks
  // constants; runtime values are checked when the kernel is called), and its users then see
  // the constants.
  void requireDeclaredDims(const Op &op, std::vector<Expr> &dims, const char *computed) {
    const Type &declared = op.result()->type;
    for (size_t d = 0; d < dims.size(); ++d)
      if (declared.shape[d] != kDynamic) {
        requireEqual(
            op, intConst(declared.shape[d]), dims[d],
            fmt::format("dim {} of '{}' is {{}} but {} {{}}", d, declared.str(), computed));
        dims[d] = intConst(declared.shape[d]);
      }
  }

  // Each operand copied into its window of the result, one after another along the concat dim.
  // Runtime extents along the other dims are checked against the first operand's when the
  // kernel is called (specialization checks known ones).
  void lowerConcat(const Op &op) {
    const int64_t dim = concatDim(op);
    TensorStorage result;
    result.dims = storageOf(op.operands[0]).dims;
    for (size_t i = 1; i < op.operands.size(); ++i) {
      const TensorStorage &t = storageOf(op.operands[i]);
      for (size_t d = 0; d < t.dims.size(); ++d)
        if (static_cast<int64_t>(d) == dim)
          result.dims[d] = add(result.dims[d], t.dims[d]);
        else
          requireEqual(op, t.dims[d], result.dims[d],
                       fmt::format("'tensor.concat' operand #{} (%{}) has {{}} along dim {} where "
                                   "the others have {{}}",
                                   i, op.operands[i]->name, d));
    }
    requireDeclaredDims(op, result.dims, "the operands give");
    result.buffer = bufferForRoot(storageRoot(op.result()), result.dims);
    tensors_[op.result()] = result;
    Expr offset = intConst(0);
    for (const Value *operand : op.operands) {
      const TensorStorage &t = storageOf(operand);
      Window w;
      w.sizes = t.dims;
      w.offsets.assign(t.dims.size(), intConst(0));
      w.offsets[dim] = offset;
      w.strides.assign(t.dims.size(), 1);
      w.dropped.assign(t.dims.size(), false);
      emitWindowCopy(w, result, t, true);
      offset = add(offset, t.dims[dim]);
    }
  }

  // topk: K passes over each slice, each taking the best element that ranks after the last one
  // taken (ties to the lower index). The comparator `cmpf ogt` or `olt` of (lhs, rhs) compares
  // against infinite sentinels, NaN ranking after every number (so that all K picks are input
  // elements: a NaN had never been picked, leaving index -1). Any other pure body runs as scalar
  // code, four times an element (each way against the last taken and against the best so far),
  // with index guards instead; a ranks strictly before b where the body says a before b but not
  // b before a, so that a non-strict body (`oge`) picks each element once.
  void lowerTopK(const Op &op) {
    const Block &region = *op.regions[0];
    const Op &comparator = *region.ops[0];
    const bool plain = region.ops.size() == 2 && comparator.kind == OpKind::CmpF &&
                       (predicate(comparator) == "ogt" || predicate(comparator) == "olt") &&
                       comparator.operands[0] == region.arguments[0].get() &&
                       comparator.operands[1] == region.arguments[1].get();
    const bool largest = plain && predicate(comparator) == "ogt";
    int64_t ins = op.attr("num_inputs").integer();
    int64_t dim = op.attr("dimension").integer();
    const Value *x = op.operands[0];
    const TensorStorage &in = storageOf(x);
    const TensorStorage *inIdx = ins == 2 ? &storageOf(op.operands[1]) : nullptr;
    std::vector<TensorStorage> outs;
    for (int r = 0; r < 2; ++r) {
      const TensorStorage &init = storageOf(op.operands[ins + r]);
      TensorStorage t{init.buffer, init.dims};
      if (storageRoot(op.result(r)) != storageRoot(op.operands[ins + r]))
        t.buffer = bufferForRoot(storageRoot(op.result(r)), init.dims);
      tensors_[op.result(r)] = t;
      outs.push_back(t);
    }
    // The outputs span the input's other dims and agree on K (known dims are checked here,
    // runtime ones when the kernel runs), and K <= N (specialization checked it when both are
    // known).
    for (int r = 0; r < 2; ++r)
      for (size_t d = 0; d < in.dims.size(); ++d)
        if (int64_t(d) != dim)
          requireEqual(op, outs[r].dims[d], in.dims[d],
                       fmt::format("topk output dim {} is {{}} but the input's is {{}}", d));
    requireEqual(op, outs[1].dims[dim], outs[0].dims[dim],
                 fmt::format("topk's index output has {{}} elements along dim {} but its value "
                             "output has {{}}",
                             dim));
    if (inIdx)
      for (size_t d = 0; d < in.dims.size(); ++d)
        requireEqual(op, inIdx->dims[d], in.dims[d],
                     fmt::format("topk's index input dim {} is {{}} but the input's is {{}}", d));
    Expr k = outs[0].dims[dim], n = in.dims[dim];
    if (!asConstant(k) || !asConstant(n))
      out_.constraints.push_back({k, n, op.loc, "topk selects {} of only {} elements", true});
    ElemKind e = x->type.elem;
    // The plain comparators' sentinels; the others start from any value, the guards ignore it.
    Expr worst = plain            ? floatConst(largest ? -INFINITY : INFINITY, e)
                 : isFloatElem(e) ? floatConst(0, e)
                                  : intConst(0, e);
    Expr best = plain ? floatConst(largest ? INFINITY : -INFINITY, e) : worst;
    // The body's verdict, `a` before `b`, its scalar code appended to `into`.
    const std::vector<Expr> noLoops;
    auto body = [&](const Expr &a, const Expr &b, std::vector<Stmt> &into) {
      std::unordered_map<const Value *, Expr> values{{region.arguments[0].get(), a},
                                                     {region.arguments[1].get(), b}};
      return lowerScalarBlock(region, values, {noLoops, noLoops, nullptr, false}, into);
    };
    // Whether `a` ranks strictly before `b`, and whether neither does (a tie).
    auto ranking = [&](const Expr &a, const Expr &b, std::vector<Stmt> &into) {
      if (plain) {
        Expr nanLast = binary(OpKind::AndI, cmp("ord", a, a), cmp("uno", b, b));
        Expr bothNaN = binary(OpKind::AndI, cmp("uno", a, a), cmp("uno", b, b));
        return std::pair{binary(OpKind::OrI, cmp(largest ? "ogt" : "olt", a, b), nanLast),
                         binary(OpKind::OrI, cmp("oeq", a, b), bothNaN)};
      }
      Expr ab = body(a, b, into), ba = body(b, a, into);
      return std::pair{binary(OpKind::AndI, ab, negation(ba)),
                       negation(binary(OpKind::XOrI, ab, ba))};
    };
    std::vector<Expr> sliceDims = in.dims;
    sliceDims[dim] = intConst(1);
    auto nest = loopNest(sliceDims, [&](const std::vector<Expr> &sliceIv) {
      std::string prevV = freshName("prev_value"), prevI = freshName("prev_index");
      std::string bestV = freshName("best_value"), bestI = freshName("best_index");
      std::string j = freshName("j"), i = freshName("i");
      auto at = [&](const std::vector<Expr> &dims, Expr pos) {
        std::vector<Expr> coords = sliceIv;
        coords[dim] = pos;
        return linearIndex(coords, dims);
      };
      Expr vi = var(i, ElemKind::Index), vj = var(j, ElemKind::Index);
      Expr pv = var(prevV, e), pi = var(prevI, ElemKind::Index);
      Expr bv = var(bestV, e), bi = var(bestI, ElemKind::Index);
      std::string xName = freshName("x");
      Expr xv = var(xName, e);
      std::vector<Stmt> scan{let(xName, load(in.buffer, at(in.dims, vi), e))};
      // (x, i) ranks after (prev): worse value, or equal value and higher index (with another
      // comparator, anything does before the first pass takes one).
      auto [prevFirst, tiedWithPrev] = ranking(pv, xv, scan);
      Expr after =
          binary(OpKind::OrI, prevFirst, binary(OpKind::AndI, tiedWithPrev, cmp("sgt", vi, pi)));
      if (!plain)
        after = binary(OpKind::OrI, cmp("slt", pi, intConst(0)), after);
      // (x, i) is better than the best so far: none yet, better value, or equal and lower index.
      auto [xFirst, tiedWithBest] = ranking(xv, bv, scan);
      Expr better = binary(
          OpKind::OrI, cmp("slt", bi, intConst(0)),
          binary(OpKind::OrI, xFirst, binary(OpKind::AndI, tiedWithBest, cmp("slt", vi, bi))));
      // Bound once: both updates must see the same decision.
      std::string takeName = freshName("take");
      Expr take = var(takeName, ElemKind::I1);
      scan.push_back(let(takeName, binary(OpKind::AndI, after, better)));
      scan.push_back(assign(bestV, select(take, xv, bv)));
      scan.push_back(assign(bestI, select(take, vi, bi)));
      Expr index = bi;
      if (inIdx)
        index = cast(OpKind::ExtSI, load(inIdx->buffer, at(inIdx->dims, bi), ElemKind::I32),
                     ElemKind::Index);
      // Another comparator's body runs on elements only (a body dividing by its argument, or
      // indexing a table with it, had failed on a placeholder): before a pass takes one, the
      // best and the last taken stand for element 0, which the index guards then ignore.
      std::vector<Stmt> pass;
      Expr first = worst;
      if (!plain) {
        first = bindLet("first", load(in.buffer, at(in.dims, intConst(0)), e), pass);
        pass.push_back(assign(prevV, select(cmp("slt", pi, intConst(0)), first, pv)));
      }
      pass.insert(pass.end(), {local(bestV, first), local(bestI, intConst(-1)),
                               forLoop(i, in.dims[dim], ForKind::Serial, std::move(scan)),
                               store(outs[0].buffer, at(outs[0].dims, vj), bv),
                               store(outs[1].buffer, at(outs[1].dims, vj),
                                     cast(OpKind::TruncI, index, ElemKind::I32)),
                               assign(prevV, bv), assign(prevI, bi)});
      return std::vector<Stmt>{local(prevV, best), local(prevI, intConst(-1)),
                               forLoop(j, outs[0].dims[dim], ForKind::Serial, std::move(pass))};
    });
    append(nest);
  }

  // scf.for: a loop over (ub - lb + step - 1) / step iterations. Scalar iter_args live in
  // locals; each tensor iter_arg has a carry buffer that the body reads and that each yield
  // writes (skipped when the yielded tensor already lives there, as with an in-place
  // insert_slice). Tensor sizes may not change across iterations.
  void lowerFor(const Op &op) {
    const Block &body = *op.regions[0];
    Expr lb = scalarOf(op.operands[0]), ub = scalarOf(op.operands[1]),
         step = scalarOf(op.operands[2]);
    if (auto c = asConstant(step); c && *c <= 0)
      fail(op.loc, fmt::format("'scf.for' needs a positive step, found {}", *c));
    if (!asConstant(step)) { // a runtime value (generic mode): checked where the loop starts
      auto &checks = out_.program.checks;
      checks.push_back({op.loc, "'scf.for' needs a positive step, found {}"});
      current_->push_back(check(cmp("sgt", step, intConst(0)), static_cast<int>(checks.size()) - 1,
                                step, intConst(0)));
    }
    std::vector<TensorStorage> carries;
    std::vector<std::string> locals;
    for (size_t i = 3; i < op.operands.size(); ++i) {
      const Value *init = op.operands[i];
      const Value *arg = body.arguments[i - 2].get();
      if (init->type.isTensor()) {
        const TensorStorage &from = storageOf(init);
        TensorStorage carry{bufferForRoot(arg, from.dims), from.dims};
        emitCopy(from, carry);
        tensors_[arg] = carry;
        carries.push_back(carry);
        locals.push_back({});
      } else {
        std::string name = freshName(arg->name);
        current_->push_back(local(name, scalarOf(init)));
        scalars_[arg] = var(name, init->type.elem);
        carries.push_back({});
        locals.push_back(name);
      }
    }
    std::string counter = freshName("iteration");
    std::vector<Stmt> loopBody;
    std::vector<Stmt> *outer = current_;
    current_ = &loopBody;
    std::string ivName = freshName(body.arguments[0]->name);
    loopBody.push_back(let(ivName, add(lb, mul(var(counter, ElemKind::Index), step))));
    scalars_[body.arguments[0].get()] = var(ivName, ElemKind::Index);
    for (auto &inner : body.ops) {
      if (inner->kind != OpKind::ScfYield) {
        lowerOp(*inner);
        continue;
      }
      // The yield hands every value to the next iteration at once, as a parallel assignment:
      // each is read before any carry is written. Scalars are bound first (a swap, or (p, q)
      // -> (q, p + q), had read a carry already overwritten), and a tensor read from a buffer
      // that another carry's copy overwrites is copied aside first.
      std::vector<Expr> scalars(inner->operands.size());
      std::vector<TensorStorage> yielded(inner->operands.size());
      for (size_t r = 0; r < inner->operands.size(); ++r) {
        const Value *v = inner->operands[r];
        if (!locals[r].empty()) {
          scalars[r] = bindLet(locals[r] + "_next", scalarOf(v), loopBody);
          continue;
        }
        yielded[r] = storageOf(v);
        // A carry keeps its size (specialization checks known ones): the next iteration reads
        // it as the size it came in with.
        for (size_t d = 0; d < yielded[r].dims.size(); ++d)
          requireEqual(*inner, yielded[r].dims[d], carries[r].dims[d],
                       fmt::format("'scf.yield' operand #{} has {{}} along dim {} where the "
                                   "'scf.for' carries {{}}",
                                   r, d));
      }
      auto overwritten = [&](int buffer, size_t by) {
        for (size_t o = 0; o < yielded.size(); ++o)
          if (o != by && locals[o].empty() && yielded[o].buffer != carries[o].buffer &&
              carries[o].buffer == buffer)
            return true;
        return false;
      };
      for (size_t r = 0; r < yielded.size(); ++r)
        if (locals[r].empty() && yielded[r].buffer != carries[r].buffer &&
            overwritten(yielded[r].buffer, r)) {
          TensorStorage aside{addTemp(freshName("yielded"), inner->operands[r]->type.elem,
                                      numElements(carries[r].dims)),
                              carries[r].dims};
          emitCopy(yielded[r], aside);
          yielded[r] = aside;
        }
      for (size_t r = 0; r < yielded.size(); ++r) {
        if (!locals[r].empty())
          loopBody.push_back(assign(locals[r], scalars[r]));
        else if (yielded[r].buffer != carries[r].buffer)
          emitCopy(yielded[r], carries[r]);
      }
    }
    current_ = outer;
    Expr trips =
        binary(OpKind::DivSI,
               add(binary(OpKind::SubI, ub, lb), binary(OpKind::SubI, step, intConst(1))), step);
    if (asConstant(lb) && asConstant(ub) && asConstant(step))
      trips = intConst(std::max<int64_t>(
          0, (*asConstant(ub) - *asConstant(lb) + *asConstant(step) - 1) / *asConstant(step)));
    else
      trips = binary(OpKind::MaxSI, trips, intConst(0));
    current_->push_back(forLoop(counter, trips, ForKind::Serial, std::move(loopBody)));
    for (size_t r = 0; r < op.results.size(); ++r) {
      if (locals[r].empty())
        tensors_[op.result(static_cast<int>(r))] = carries[r];
      else
        scalars_[op.result(static_cast<int>(r))] =
            var(locals[r], op.result(static_cast<int>(r))->type.elem);
    }
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
  bool boundsChecks_;
  bool choicesChecked_ = false; // building a contraction.gather tile (see extractExpr)
  int choiceLanes_ = 1;         // a contraction.choices tile: the extract loads this many lanes
  const LoweringOptions &options_;
  std::vector<Stmt> *current_ = nullptr; // where lowered statements go (a loop body inside scf.for)
  std::optional<PendingFill> pendingFill_; // a fill waiting for its contraction
  LoweredKernel out_;
  std::unordered_map<const Value *, TensorStorage> tensors_;
  std::unordered_map<const Value *, Expr> scalars_;
  std::unordered_map<const Value *, int> outputOfRoot_;
  std::set<std::string> usedNames_;
  std::unordered_map<std::string, int> nextSuffix_; // the last suffix freshName gave each base
  Expr workspaceBytes_ = intConst(0);
};

} // namespace

LoweredKernel lowerToLoops(const FuncOp &fn, Mode mode, const std::string &kernelName,
                           const LoweringOptions &options) {
  return Lowering(fn, mode, kernelName, options).run();
}

} // namespace frank
