// Code generation from loop IR with IRBuilder.
#include "codegen/Codegen.h"
#include "codegen/ColdCode.h"
#include "codegen/FoldReciprocals.h"
#include "codegen/MathFunctions.h"
#include "ir/Ops.h"
#include "loops/TreeShape.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

namespace frank {
namespace {

using namespace loops;

// Runs of statements lighter than this (weightOf) stay inline (see emitStatements): about 100
// LLVM instructions (attention's 1686-node product is 1080), a few milliseconds to optimize and
// compile. At 150 rather than 300 the MoE block's serial entry at one token spreads over the
// parts instead of filling one alone: it compiled in 30-31 ms against 33-36.
constexpr size_t kMinOutlinedWeight = 150;
// A node in a loop the vectorizer widens weighs this many: it becomes a vector body interleaved
// up to 4 times beside the scalar loop for the remainder (kWidenedCost in SplitKernel.cpp).
constexpr size_t kWidenedWeight = 5;
// Loops of at most this many trips may have runs of their body outlined: a call per trip.
constexpr int64_t kMaxOutlinedTrips = 16;
// The iterations an innermost parallel loop's chunks are whole multiples of (emitParallelFor):
// four vector steps of LLVM's widest f32 or 16-bit vectors with their usual interleaving.
constexpr int64_t kGrain = 128;
// A vectorized loop of at most this many trips is a few vectors long, and the vectorizer's
// interleaving (up to 4 vectors an iteration) only multiplies its IR: with attention's softmax
// rows of 128 left uninterleaved, S5 optimizes to 688 instructions instead of 823 and compiles
// in 24.7-27.0 ms instead of 27.1-30.3 (S5c 26.2-27.8 against 27.5-29.8), and runs as fast
// (1.54-1.56 ms against 1.54-1.58). Longer loops keep it: a 4096-long sum of squares (rms_norm)
// is a chain of dependent adds without it (S1 10.0-12.1 us with, 11.7-12.9 without). Exp loops
// too (CodegenOptions::expInterleave is for long rows, S2's): on the Zen 3, the softmax rows of
// 128 left uninterleaved compiled S5 in 47 ms instead of 54 and S5c in 59 instead of 74 (medians
// of six alternating compiles), and ran level (0.99-1.01x, one process alternating).
constexpr int64_t kMaxTripsNotInterleaved = 128;
// A vectorized loop whose trip count is no constant interleaves this many vectors, as LLVM
// chooses with 32 vector registers, so that codegen knows the step its body takes and can leave
// the rest to a loop of one vector an iteration (emitFor), not to the vectorizer's epilogue of
// half-width vectors and its scalar loop. In a partly specialized S5c (Emerald Rapids) the rows of
// a causal softmax, 16 to 128 keys long, fell to those almost whole: the softmax took three times
// as long as the specialized one's.
constexpr unsigned kInterleave = 4;
// For the work estimate (ColdCode.h): the trips of a loop whose extent is a runtime dim, and how
// many scalar iterations a vectorized loop's one does.
constexpr double kUnknownTrips = 1024;
constexpr double kVectorizedLanes = 8;

class Codegen {
public:
  Codegen(const Program &program, llvm::LLVMContext &ctx, const CodegenOptions &options)
      : p_(program), ctx_(ctx), b_(ctx), options_(options) {
    module_ = std::make_unique<llvm::Module>(program.name, ctx);
  }

  std::unique_ptr<llvm::Module> run() {
    llvm::Function *body = emitBody();
    emitEntry(body);
    // Functions without statements of their own (the entry, chunks) take their coldness from
    // the body they inline (settleColdFunctions).
    for (llvm::Function &f : *module_)
      work_.try_emplace(&f, 0.0);
    markColdFunctions(work_);
    std::string errors;
    llvm::raw_string_ostream os(errors);
    if (llvm::verifyModule(*module_, &os))
      internalError("generated LLVM IR does not verify: " + os.str());
    return std::move(module_);
  }

private:
  llvm::Type *typeOf(ElemKind kind) {
    switch (kind) {
    case ElemKind::F16: return b_.getHalfTy();
    case ElemKind::BF16: return b_.getBFloatTy();
    case ElemKind::F32: return b_.getFloatTy();
    case ElemKind::F64: return b_.getDoubleTy();
    case ElemKind::I1: return b_.getInt1Ty();
    case ElemKind::I8: return b_.getInt8Ty();
    case ElemKind::I16: return b_.getInt16Ty();
    case ElemKind::I32: return b_.getInt32Ty();
    case ElemKind::I64:
    case ElemKind::Index: return b_.getInt64Ty();
    }
    return nullptr;
  }
  llvm::Type *typeOf(ElemKind kind, int lanes) {
    llvm::Type *t = typeOf(kind);
    return lanes == 1 ? t : llvm::FixedVectorType::get(t, lanes);
  }
  // i1 lives in memory as one byte.
  llvm::Type *memTypeOf(ElemKind kind, int lanes = 1) {
    llvm::Type *t = kind == ElemKind::I1 ? b_.getInt8Ty() : typeOf(kind);
    return lanes == 1 ? t : llvm::FixedVectorType::get(t, lanes);
  }

  // The kernel body takes each buffer as its own noalias pointer; the entry unpacks them.
  llvm::Function *emitBody() {
    std::vector<llvm::Type *> params(p_.buffers.size(), b_.getPtrTy());
    params.push_back(b_.getPtrTy()); // dims
    params.push_back(b_.getPtrTy()); // scalars
    params.push_back(b_.getPtrTy()); // status, written by a failed check
    auto *type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    auto *fn =
        llvm::Function::Create(type, llvm::Function::InternalLinkage, p_.name + ".body", *module_);
    fn->addFnAttr(llvm::Attribute::AlwaysInline);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < fn->arg_size(); ++i) {
      fn->addParamAttr(i, llvm::Attribute::NoAlias);
      fn->addParamAttr(i, llvm::Attribute::NoUndef);
    }
    for (size_t i = 0; i < p_.buffers.size(); ++i) {
      fn->getArg(i)->setName(p_.buffers[i].name);
      fn->addParamAttr(i, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(sizeAlign(i))));
      if (p_.buffers[i].role == BufferRole::Input)
        fn->addParamAttr(i, llvm::Attribute::ReadOnly);
    }
    dims_ = fn->getArg(p_.buffers.size());
    scalars_ = fn->getArg(p_.buffers.size() + 1);
    status_ = fn->getArg(p_.buffers.size() + 2);
    for (size_t i = 0; i < p_.buffers.size(); ++i)
      bufferPtrs_.push_back(fn->getArg(i));
    entryBlock_ = llvm::BasicBlock::Create(ctx_, "entry", fn);
    b_.SetInsertPoint(entryBlock_);
    fn_ = fn;
    scopes_.emplace_back();
    emitStatements(p_.body, true);
    b_.CreateRetVoid();
    return fn;
  }

  // Outputs and temporaries are 64-byte aligned by the runtime; inputs only to their element.
  uint64_t sizeAlign(size_t buffer) {
    const Buffer &b = p_.buffers[buffer];
    if (b.role == BufferRole::Input)
      return std::max(1, elemBits(b.elem) / 8);
    return 64;
  }

  void emitEntry(llvm::Function *body) {
    auto *type = llvm::FunctionType::get(
        b_.getVoidTy(), {b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy()},
        false);
    auto *fn = llvm::Function::Create(type, llvm::Function::ExternalLinkage, p_.name, *module_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    auto *bb = llvm::BasicBlock::Create(ctx_, "entry", fn);
    b_.SetInsertPoint(bb);
    llvm::Value *buffers = fn->getArg(0);
    llvm::Value *workspace = fn->getArg(3);
    std::vector<llvm::Value *> args;
    size_t slot = 0;
    for (const Buffer &buf : p_.buffers) {
      if (buf.role == BufferRole::Temp) {
        args.push_back(
            b_.CreateGEP(b_.getInt8Ty(), workspace, emitIndexFromParams(buf.workspaceOffset, fn)));
        continue;
      }
      size_t position = buf.role == BufferRole::Input ? buf.slot : numInputs() + buf.slot;
      (void)slot;
      args.push_back(
          b_.CreateLoad(b_.getPtrTy(), b_.CreateConstGEP1_64(b_.getPtrTy(), buffers, position)));
    }
    args.push_back(fn->getArg(1));
    args.push_back(fn->getArg(2));
    args.push_back(fn->getArg(4));
    b_.CreateCall(body, args);
    b_.CreateRetVoid();
  }

  size_t numInputs() const {
    size_t n = 0;
    for (const Buffer &b : p_.buffers)
      n += b.role == BufferRole::Input;
    return n;
  }

  // Workspace offsets depend only on dims and scalars, read from the entry's own arguments.
  llvm::Value *emitIndexFromParams(const Expr &e, llvm::Function *entry) {
    llvm::Value *savedDims = dims_, *savedScalars = scalars_;
    dims_ = entry->getArg(1);
    scalars_ = entry->getArg(2);
    llvm::Value *v = emitExpr(e);
    dims_ = savedDims;
    scalars_ = savedScalars;
    return v;
  }

  llvm::Value *lookupVar(const std::string &name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) {
        if (auto *alloca = llvm::dyn_cast<llvm::AllocaInst>(found->second))
          return b_.CreateLoad(alloca->getAllocatedType(), alloca, name);
        return found->second;
      }
    }
    internalError("loop IR reads an unbound variable '" + name + "'");
  }

  llvm::Value *storageOfLocal(const std::string &name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end())
        return found->second;
    }
    internalError("assignment to an undeclared variable '" + name + "'");
  }

  void setFlags(llvm::Instruction *inst, bool reassoc) {
    if (!llvm::isa<llvm::FPMathOperator>(inst) || !options_.fastMath)
      return;
    llvm::FastMathFlags flags;
    flags.setAllowContract(true);
    if (reassoc)
      flags.setAllowReassoc(true);
    inst->setFastMathFlags(flags);
  }

  llvm::Value *floatBinary(llvm::Instruction::BinaryOps op, llvm::Value *a, llvm::Value *b,
                           bool reassoc) {
    llvm::Value *v = b_.CreateBinOp(op, a, b);
    if (auto *inst = llvm::dyn_cast<llvm::Instruction>(v))
      setFlags(inst, reassoc);
    return v;
  }

  llvm::Value *intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value *> args) {
    llvm::Value *v = b_.CreateIntrinsic(id, {args[0]->getType()}, args);
    if (auto *inst = llvm::dyn_cast<llvm::Instruction>(v))
      setFlags(inst, false);
    return v;
  }

  llvm::Value *libmCall(const char *f32Name, const char *f64Name, llvm::Value *x) {
    bool isDouble = x->getType()->isDoubleTy();
    llvm::Type *t = isDouble ? b_.getDoubleTy() : b_.getFloatTy();
    llvm::Value *arg = x->getType() == t ? x : b_.CreateFPExt(x, t);
    auto callee = module_->getOrInsertFunction(isDouble ? f64Name : f32Name,
                                               llvm::FunctionType::get(t, {t}, false));
    if (auto *f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      f->setDoesNotThrow();
      f->setDoesNotAccessMemory();
    }
    llvm::Value *r = b_.CreateCall(callee, {arg});
    return r->getType() == x->getType() ? r : b_.CreateFPTrunc(r, x->getType());
  }

  // The lane sums of N vectors of L lanes (powers of two, N <= L) as one N-lane vector. Each
  // level pairs the vectors and adds two shuffles of each pair: with blocks of B lanes, the even
  // blocks of the result sum neighbouring blocks of the first vector and the odd blocks those of
  // the second. After log2(N) levels one vector holds every source in one block of L/N lanes,
  // which log2(L/N) shuffle-and-add steps sum; a last shuffle takes each block's first lane.
  // For 4 vectors of 16 lanes that is 11 instructions instead of 4 x 8.
  llvm::Value *sumsOfVectors(std::vector<llvm::Value *> level) {
    const int lanes =
        static_cast<int>(llvm::cast<llvm::FixedVectorType>(level[0]->getType())->getNumElements());
    const int count = static_cast<int>(level.size());
    std::vector<std::vector<int>> sourceOfLane(count, std::vector<int>(lanes));
    for (int v = 0; v < count; ++v)
      std::fill(sourceOfLane[v].begin(), sourceOfLane[v].end(), v);
    auto add = [&](llvm::Value *a, llvm::Value *b) {
      if (isBfloat16(a))
        return truncToBfloat16(floatBinary(llvm::Instruction::FAdd, toFloat(a), toFloat(b), true),
                               a->getType());
      return floatBinary(llvm::Instruction::FAdd, a, b, true);
    };
    int block = lanes / 2;
    for (; level.size() > 1; block /= 2) {
      std::vector<llvm::Value *> next;
      std::vector<std::vector<int>> nextSources;
      for (size_t p = 0; p < level.size(); p += 2) {
        // Mask indices below `lanes` pick from the first vector, the rest from the second.
        std::vector<int> first(lanes), second(lanes), sources(lanes);
        for (int lane = 0; lane < lanes; ++lane) {
          int b = lane / block, offset = lane % block;
          bool fromSecond = b % 2 == 1;
          int pairStart = (b - b % 2) * block; // the two neighbouring blocks to sum
          int base = fromSecond ? lanes : 0;
          first[lane] = base + pairStart + offset;
          second[lane] = base + pairStart + block + offset;
          sources[lane] = sourceOfLane[p + (fromSecond ? 1 : 0)][pairStart + offset];
        }
        next.push_back(add(b_.CreateShuffleVector(level[p], level[p + 1], first),
                           b_.CreateShuffleVector(level[p], level[p + 1], second)));
        nextSources.push_back(sources);
      }
      level = std::move(next);
      sourceOfLane = std::move(nextSources);
    }
    // Now each block of `width` lanes holds one source: sum within the blocks.
    llvm::Value *v = level[0];
    const int width = lanes / count;
    for (int half = width / 2; half >= 1; half /= 2) {
      std::vector<int> swap(lanes);
      for (int lane = 0; lane < lanes; ++lane)
        swap[lane] = (lane % (2 * half)) < half ? lane + half : lane - half;
      v = add(v, b_.CreateShuffleVector(v, swap));
    }
    std::vector<int> firstOfEach(count);
    for (int lane = 0; lane < lanes; lane += width)
      firstOfEach[sourceOfLane[0][lane]] = lane;
    return b_.CreateShuffleVector(v, firstOfEach);
  }

  llvm::Value *emitUnary(OpKind op, llvm::Value *x) {
    switch (op) {
    case OpKind::NegF: return b_.CreateFNeg(x);
    case OpKind::Exp:
      if (options_.vectorMath && x->getType()->getScalarType()->isFloatTy())
        return callExpF32(*module_, b_, x);
      return intrinsic(llvm::Intrinsic::exp, {x});
    case OpKind::Exp2: return intrinsic(llvm::Intrinsic::exp2, {x});
    case OpKind::Log: return intrinsic(llvm::Intrinsic::log, {x});
    case OpKind::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {x});
    case OpKind::Rsqrt:
      return floatBinary(llvm::Instruction::FDiv, llvm::ConstantFP::get(x->getType(), 1.0),
                         intrinsic(llvm::Intrinsic::sqrt, {x}), false);
    case OpKind::AbsF: return intrinsic(llvm::Intrinsic::fabs, {x});
    case OpKind::Sin: return intrinsic(llvm::Intrinsic::sin, {x});
    case OpKind::Cos: return intrinsic(llvm::Intrinsic::cos, {x});
    case OpKind::Tanh: return libmCall("tanhf", "tanh", x);
    case OpKind::Erf: return libmCall("erff", "erf", x);
    default: internalError(std::string("no codegen for unary ") + opName(op));
    }
  }

  // maximum and minimum of 16-bit floats by comparisons and selects: LLVM's x86 lowering of the
  // 16-bit vector intrinsics, where it widens them itself (no AVX512-FP16), returns a zero
  // operand for NaN, and the optimizer narrows the same intrinsics done in f32 back to them.
  llvm::Value *minMax(llvm::Intrinsic::ID id, llvm::Value *a, llvm::Value *b) {
    llvm::Type *t = a->getType();
    if (!t->getScalarType()->isHalfTy() && !t->getScalarType()->isBFloatTy())
      return intrinsic(id, {a, b});
    const bool maximum = id == llvm::Intrinsic::maximum;
    llvm::Value *aFirst =
        b_.CreateFCmp(maximum ? llvm::CmpInst::FCMP_OGT : llvm::CmpInst::FCMP_OLT, a, b);
    llvm::Value *bFirst =
        b_.CreateFCmp(maximum ? llvm::CmpInst::FCMP_OLT : llvm::CmpInst::FCMP_OGT, a, b);
    // Equal operands differ only as zeros: -0 < +0.
    llvm::Type *bits = t->getWithNewType(b_.getInt16Ty());
    llvm::Value *aNegative =
        b_.CreateICmpSLT(b_.CreateBitCast(a, bits), llvm::Constant::getNullValue(bits));
    llvm::Value *equal =
        maximum ? b_.CreateSelect(aNegative, b, a) : b_.CreateSelect(aNegative, a, b);
    llvm::Value *ordered = b_.CreateSelect(aFirst, a, b_.CreateSelect(bFirst, b, equal));
    return b_.CreateSelect(b_.CreateFCmpUNO(a, b), llvm::ConstantFP::getNaN(t), ordered);
  }

  // powf of narrower floats as pow of doubles, rounded once to the operands' type: an f32 pow is
  // an ulp off at times, which rope's angles (a position times base^(-2i/D)) magnify 70000 times.
  llvm::Value *powInDouble(llvm::Value *a, llvm::Value *b) {
    if (a->getType()->getScalarType()->isDoubleTy())
      return intrinsic(llvm::Intrinsic::pow, {a, b});
    return powThroughDoubles(*module_, b_, a, b);
  }

  llvm::Value *emitBinary(const ExprNode &e, llvm::Value *a, llvm::Value *b) {
    using BO = llvm::Instruction::BinaryOps;
    switch (e.op) {
    case OpKind::AddF: return floatBinary(BO::FAdd, a, b, e.reassoc);
    case OpKind::SubF: return floatBinary(BO::FSub, a, b, e.reassoc);
    case OpKind::MulF: return floatBinary(BO::FMul, a, b, e.reassoc);
    case OpKind::DivF: return floatBinary(BO::FDiv, a, b, false);
    case OpKind::RemF: return floatBinary(BO::FRem, a, b, false);
    case OpKind::MaximumF: return minMax(llvm::Intrinsic::maximum, a, b);
    case OpKind::MinimumF: return minMax(llvm::Intrinsic::minimum, a, b);
    case OpKind::PowF: return powInDouble(a, b);
    case OpKind::AddI: return b_.CreateAdd(a, b);
    case OpKind::SubI: return b_.CreateSub(a, b);
    case OpKind::MulI: return b_.CreateMul(a, b);
    case OpKind::DivSI: return b_.CreateSDiv(a, b);
    case OpKind::DivUI: return b_.CreateUDiv(a, b);
    case OpKind::RemSI: return b_.CreateSRem(a, b);
    case OpKind::RemUI: return b_.CreateURem(a, b);
    case OpKind::AndI: return b_.CreateAnd(a, b);
    case OpKind::OrI: return b_.CreateOr(a, b);
    case OpKind::XOrI: return b_.CreateXor(a, b);
    case OpKind::MaxSI: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, a, b);
    case OpKind::MinSI: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, a, b);
    default: internalError(std::string("no codegen for binary ") + opName(e.op));
    }
  }

  llvm::Value *emitCmp(const ExprNode &e, llvm::Value *a, llvm::Value *b) {
    using P = llvm::CmpInst::Predicate;
    static const std::unordered_map<std::string, P> floatPreds = {
        {"false", P::FCMP_FALSE}, {"oeq", P::FCMP_OEQ}, {"ogt", P::FCMP_OGT},
        {"oge", P::FCMP_OGE},     {"olt", P::FCMP_OLT}, {"ole", P::FCMP_OLE},
        {"one", P::FCMP_ONE},     {"ord", P::FCMP_ORD}, {"ueq", P::FCMP_UEQ},
        {"ugt", P::FCMP_UGT},     {"uge", P::FCMP_UGE}, {"ult", P::FCMP_ULT},
        {"ule", P::FCMP_ULE},     {"une", P::FCMP_UNE}, {"uno", P::FCMP_UNO},
        {"true", P::FCMP_TRUE}};
    static const std::unordered_map<std::string, P> intPreds = {
        {"eq", P::ICMP_EQ},   {"ne", P::ICMP_NE},   {"slt", P::ICMP_SLT}, {"sle", P::ICMP_SLE},
        {"sgt", P::ICMP_SGT}, {"sge", P::ICMP_SGE}, {"ult", P::ICMP_ULT}, {"ule", P::ICMP_ULE},
        {"ugt", P::ICMP_UGT}, {"uge", P::ICMP_UGE}};
    if (a->getType()->isFloatingPointTy())
      return b_.CreateFCmp(floatPreds.at(e.name), a, b);
    return b_.CreateICmp(intPreds.at(e.name), a, b);
  }

  llvm::Value *emitCast(const ExprNode &e, llvm::Value *x) {
    llvm::Type *to = typeOf(e.type, e.lanes);
    switch (e.op) {
    case OpKind::IndexCast: return b_.CreateSExtOrTrunc(x, to);
    case OpKind::SIToFP: return b_.CreateSIToFP(x, to);
    case OpKind::UIToFP: return b_.CreateUIToFP(x, to);
    case OpKind::FPToSI: return b_.CreateFPToSI(x, to);
    case OpKind::TruncI: return b_.CreateTrunc(x, to);
    case OpKind::ExtSI: return b_.CreateSExt(x, to);
    case OpKind::ExtUI: return b_.CreateZExt(x, to);
    case OpKind::ExtF: return b_.CreateFPExt(x, to);
    case OpKind::TruncF:
      if (to->getScalarType()->isBFloatTy() && x->getType()->getScalarType()->isFloatTy())
        return truncToBfloat16(x, to);
      return b_.CreateFPTrunc(x, to);
    default: internalError(std::string("no codegen for cast ") + opName(e.op));
    }
  }

  // f32 to bf16, rounded to nearest even in integer arithmetic (as runtime::bfloat16Bits), alike
  // on every CPU: AVX512-BF16's instruction flushes subnormals to zero, and CPUs without one
  // would call a runtime function per element.
  llvm::Value *truncToBfloat16(llvm::Value *x, llvm::Type *to) {
    llvm::Type *i32 = x->getType()->getWithNewType(b_.getInt32Ty());
    auto c = [&](uint32_t v) { return llvm::ConstantInt::get(i32, v); };
    llvm::Value *bits = b_.CreateBitCast(x, i32);
    llvm::Value *lowestKept = b_.CreateAnd(b_.CreateLShr(bits, c(16)), c(1));
    llvm::Value *rounded = b_.CreateAdd(bits, b_.CreateAdd(lowestKept, c(0x7fff)));
    llvm::Value *quietNaN = b_.CreateOr(bits, c(0x400000));
    llvm::Value *chosen = b_.CreateSelect(b_.CreateFCmpUNO(x, x), quietNaN, rounded);
    llvm::Value *high =
        b_.CreateTrunc(b_.CreateLShr(chosen, c(16)), to->getWithNewType(b_.getInt16Ty()));
    return b_.CreateBitCast(high, to);
  }

  // bf16 arithmetic runs in f32, rounded back by truncToBfloat16 (f32's 24 bits round each
  // op's exact result once more without changing it): LLVM widens it itself, but rounds back
  // with AVX512-BF16's instruction where the CPU has one, which flushes subnormal results to 0.
  static bool isBfloat16(llvm::Value *v) { return v->getType()->getScalarType()->isBFloatTy(); }
  llvm::Value *toFloat(llvm::Value *v) {
    return b_.CreateFPExt(v, v->getType()->getWithNewType(b_.getFloatTy()));
  }

  llvm::Value *emitExpr(const Expr &e) {
    switch (e->kind) {
    case ExprKind::IntConst: return llvm::ConstantInt::get(typeOf(e->type), e->intValue, true);
    case ExprKind::FloatConst: return llvm::ConstantFP::get(typeOf(e->type), e->floatValue);
    case ExprKind::Var: return lookupVar(e->name);
    case ExprKind::DimParam:
      return b_.CreateLoad(b_.getInt64Ty(),
                           b_.CreateConstGEP1_64(b_.getInt64Ty(), dims_, e->intValue),
                           fmt::format("dim{}", e->intValue));
    case ExprKind::ScalarParam: {
      llvm::Value *slot = b_.CreateConstGEP1_64(b_.getInt64Ty(), scalars_, e->intValue);
      llvm::Value *v =
          b_.CreateLoad(memTypeOf(e->type), slot, fmt::format("scalar{}", e->intValue));
      return e->type == ElemKind::I1 ? b_.CreateTrunc(v, b_.getInt1Ty()) : v;
    }
    case ExprKind::Unary: {
      llvm::Value *x = emitExpr(e->args[0]);
      // negf and absf of bf16 stay bf16 fneg and fabs, exact: they become sign-bit operations
      // after the optimizer (SixteenBitFloatBits.h).
      if (isBfloat16(x) && (e->op == OpKind::NegF || e->op == OpKind::AbsF))
        return emitUnary(e->op, x);
      if (isBfloat16(x))
        return truncToBfloat16(emitUnary(e->op, toFloat(x)), x->getType());
      return emitUnary(e->op, x);
    }
    case ExprKind::Binary: {
      llvm::Value *a = emitExpr(e->args[0]);
      llvm::Value *b = emitExpr(e->args[1]);
      // maximum and minimum pick an operand (minMax): nothing to round; pow rounds its double
      // result to bf16 once.
      if (isBfloat16(a) && e->op != OpKind::MaximumF && e->op != OpKind::MinimumF &&
          e->op != OpKind::PowF)
        return truncToBfloat16(emitBinary(*e, toFloat(a), toFloat(b)), a->getType());
      return emitBinary(*e, a, b);
    }
    case ExprKind::Cmp: {
      llvm::Value *a = emitExpr(e->args[0]);
      return emitCmp(*e, a, emitExpr(e->args[1]));
    }
    case ExprKind::Select: {
      llvm::Value *c = emitExpr(e->args[0]);
      llvm::Value *a = emitExpr(e->args[1]);
      return b_.CreateSelect(c, a, emitExpr(e->args[2]));
    }
    case ExprKind::Cast: return emitCast(*e, emitExpr(e->args[0]));
    case ExprKind::Load: {
      const Buffer &buf = p_.buffers[e->intValue];
      llvm::Value *ptr = emitAddress(e->intValue, e->args[0], true);
      llvm::Value *v = b_.CreateAlignedLoad(memTypeOf(buf.elem, e->lanes), ptr,
                                            llvm::Align(std::max(1, elemBits(buf.elem) / 8)));
      // A load of a wider float type widens 16-bit floats (exact).
      if (e->type != buf.elem)
        return b_.CreateFPExt(v, typeOf(e->type, e->lanes));
      // An i1 element is a byte, true when it is not zero (as NumPy reads bools).
      return buf.elem == ElemKind::I1
                 ? b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()))
                 : v;
    }
    case ExprKind::Broadcast: return b_.CreateVectorSplat(e->lanes, emitExpr(e->args[0]));
    case ExprKind::ReduceAdd: {
      std::vector<llvm::Value *> vectors;
      for (const Expr &a : e->args)
        vectors.push_back(emitExpr(a));
      if (vectors.size() > 1)
        return sumsOfVectors(vectors);
      llvm::Value *v = vectors[0];
      // bf16 lanes are summed as its other arithmetic runs, rounding each add.
      if (isBfloat16(v))
        return b_.CreateExtractElement(sumsOfVectors(vectors), uint64_t(0));
      llvm::Value *sum =
          b_.CreateFAddReduce(llvm::ConstantFP::getNegativeZero(v->getType()->getScalarType()), v);
      if (auto *inst = llvm::dyn_cast<llvm::Instruction>(sum))
        setFlags(inst, true);
      return sum;
    }
    case ExprKind::Shuffle:
      return b_.CreateShuffleVector(emitExpr(e->args[0]), emitExpr(e->args[1]), e->picks);
    case ExprKind::Permute: {
      llvm::Value *v = emitExpr(e->args[0]);
      llvm::Value *indices = emitExpr(e->args[1]);
      if (const int lanes = e->args[0]->lanes; lanes < e->lanes) {
        // Widened with poison lanes: the narrow vector's register is the low part of the wide
        // one, so this takes no instruction.
        std::vector<int> widen(e->lanes, llvm::PoisonMaskElem);
        for (int lane = 0; lane < lanes; ++lane)
          widen[lane] = lane;
        v = b_.CreateShuffleVector(v, widen);
      }
      const int bits = e->lanes * elemBits(e->type);
      if (elemBits(e->type) == 32 && elemBits(e->args[1]->type) == 32 && bits <= options_.permuteBits &&
          (bits == 256 || bits == 512)) {
        // vpermps on float lanes; integer lanes go through it as floats.
        llvm::Type *floats = typeOf(ElemKind::F32, e->lanes);
        auto id = bits == 256 ? llvm::Intrinsic::x86_avx2_permps
                              : llvm::Intrinsic::x86_avx512_permvar_sf_512;
        llvm::Value *permuted = b_.CreateIntrinsic(id, {}, {b_.CreateBitCast(v, floats), indices});
        return b_.CreateBitCast(permuted, v->getType());
      }
      // Lane by lane elsewhere (an index hoisted out of a loop hides the pattern from instruction
      // selection, which would otherwise make one permute of it).
      llvm::Value *result = llvm::PoisonValue::get(v->getType());
      for (int lane = 0; lane < e->lanes; ++lane)
        result = b_.CreateInsertElement(
            result, b_.CreateExtractElement(v, b_.CreateExtractElement(indices, lane)), lane);
      return result;
    }
    }
    internalError("unknown loop IR expression");
  }

  // The address of element `index` of `buffer`. An index whose terms change in different loops
  // is summed one loop at a time, outermost first, each partial sum a GEP of its own, with the
  // constant terms last: LLVM hoists each outer part out of the loops it does not change in, and
  // the innermost loop's address is a hoisted pointer plus its own terms and a displacement.
  // (Summed in one index, the innermost loop recomputed the whole sum: S7's 4x4 tile spent 16
  // integer instructions a step on it beside its 16 FMAs, which share their ports.) The partial
  // pointers may lie outside the buffer, so a split address is no `inbounds` GEP.
  llvm::Value *emitAddress(int buffer, const Expr &index, bool inBounds) {
    llvm::Type *elem = memTypeOf(p_.buffers[buffer].elem);
    std::vector<Expr> terms;
    addendsOf(index, terms);
    std::map<int, std::vector<Expr>> byLoop; // by the scope of the innermost value they read
    std::vector<Expr> constants;
    for (const Expr &t : terms)
      (t->kind == ExprKind::IntConst ? constants : byLoop[innermostScopeOf(t)]).push_back(t);
    if (byLoop.size() < 2)
      return inBounds ? b_.CreateInBoundsGEP(elem, bufferPtrs_[buffer], emitExpr(index))
                      : b_.CreateGEP(elem, bufferPtrs_[buffer], emitExpr(index));
    byLoop.rbegin()->second.insert(byLoop.rbegin()->second.end(), constants.begin(),
                                   constants.end());
    llvm::Value *ptr = bufferPtrs_[buffer];
    for (auto &[_, group] : byLoop) {
      llvm::Value *sum = emitExpr(group[0]);
      for (size_t i = 1; i < group.size(); ++i)
        sum = b_.CreateAdd(sum, emitExpr(group[i]));
      ptr = b_.CreateGEP(elem, ptr, sum);
    }
    return ptr;
  }

  static void addendsOf(const Expr &e, std::vector<Expr> &terms) {
    if (e->kind == ExprKind::Binary && e->op == OpKind::AddI) {
      addendsOf(e->args[0], terms);
      addendsOf(e->args[1], terms);
      return;
    }
    terms.push_back(e);
  }

  // The innermost scope whose value `e` reads: 0 for parameters and constants; a load or a
  // mutable local may change anywhere, so the current scope.
  int innermostScopeOf(const Expr &e) {
    const int current = int(scopes_.size()) - 1;
    if (e->kind == ExprKind::Load)
      return current;
    int scope = 0;
    if (e->kind == ExprKind::Var)
      for (int i = current; i >= 0; --i)
        if (auto found = scopes_[size_t(i)].find(e->name); found != scopes_[size_t(i)].end()) {
          scope = llvm::isa<llvm::AllocaInst>(found->second) ? current : i;
          break;
        }
    for (const Expr &arg : e->args)
      scope = std::max(scope, innermostScopeOf(arg));
    return scope;
  }

  void emitBlock(const std::vector<Stmt> &stmts) {
    scopes_.emplace_back();
    for (const Stmt &s : stmts)
      emit(s);
    scopes_.pop_back();
  }

  void emit(const Stmt &s) {
    work_[fn_] += runs_ * double(nodesOf(*s));
    switch (s->kind) {
    case StmtKind::Block: emitBlock(s->body); return;
    case StmtKind::Let: {
      llvm::Value *v = emitExpr(s->value);
      if (!v->hasName() && !llvm::isa<llvm::Constant>(v))
        v->setName(s->name);
      scopes_.back()[s->name] = v;
      return;
    }
    case StmtKind::Local: {
      llvm::IRBuilder<> entry(entryBlock_, entryBlock_->begin());
      llvm::AllocaInst *slot = entry.CreateAlloca(typeOf(s->type, s->lanes), nullptr, s->name);
      b_.CreateStore(emitExpr(s->value), slot);
      scopes_.back()[s->name] = slot;
      return;
    }
    case StmtKind::Assign: b_.CreateStore(emitExpr(s->value), storageOfLocal(s->name)); return;
    case StmtKind::Store: {
      const Buffer &buf = p_.buffers[s->buffer];
      llvm::Value *value = emitExpr(s->value);
      if (buf.elem == ElemKind::I1)
        value = b_.CreateZExt(value, memTypeOf(buf.elem, s->value->lanes));
      llvm::Value *ptr = emitAddress(s->buffer, s->index, true);
      b_.CreateAlignedStore(value, ptr, llvm::Align(std::max(1, elemBits(buf.elem) / 8)));
      return;
    }
    case StmtKind::Prefetch: {
      // For reading, into L2 (locality 2: prefetcht1); a plain GEP, as the index may run past
      // the buffer.
      llvm::Value *ptr = emitAddress(s->buffer, s->index, false);
      b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr->getType()},
                         {ptr, b_.getInt32(0), b_.getInt32(2), b_.getInt32(1)});
      return;
    }
    case StmtKind::For: emitFor(*s); return;
    case StmtKind::Check: {
      // On failure: status = {id + 1, observed, bound}, and the kernel returns.
      llvm::Value *ok = emitExpr(s->value);
      auto *failBB = llvm::BasicBlock::Create(ctx_, "check.fail", fn_);
      auto *okBB = llvm::BasicBlock::Create(ctx_, "check.ok", fn_);
      b_.CreateCondBr(ok, okBB, failBB, llvm::MDBuilder(ctx_).createBranchWeights(1 << 20, 1));
      b_.SetInsertPoint(failBB);
      llvm::Value *observed = b_.CreateSExtOrTrunc(emitExpr(s->index), b_.getInt64Ty());
      llvm::Value *bound = b_.CreateSExtOrTrunc(emitExpr(s->bound), b_.getInt64Ty());
      // Chunks of a parallel loop may fail at once: the first to claim the status reports.
      llvm::Value *claim = b_.CreateAtomicCmpXchg(
          status_, b_.getInt64(0), b_.getInt64(s->buffer + 1), llvm::MaybeAlign(8),
          llvm::AtomicOrdering::Monotonic, llvm::AtomicOrdering::Monotonic);
      auto *reportBB = llvm::BasicBlock::Create(ctx_, "check.report", fn_);
      auto *leaveBB = llvm::BasicBlock::Create(ctx_, "check.leave", fn_);
      b_.CreateCondBr(b_.CreateExtractValue(claim, 1), reportBB, leaveBB);
      b_.SetInsertPoint(reportBB);
      b_.CreateStore(observed, b_.CreateConstGEP1_64(b_.getInt64Ty(), status_, 1));
      b_.CreateStore(bound, b_.CreateConstGEP1_64(b_.getInt64Ty(), status_, 2));
      b_.CreateBr(leaveBB);
      b_.SetInsertPoint(leaveBB);
      b_.CreateRetVoid();
      b_.SetInsertPoint(okBB);
      return;
    }
    case StmtKind::If: {
      llvm::Value *cond = emitExpr(s->value);
      auto *thenBB = llvm::BasicBlock::Create(ctx_, "then", fn_);
      auto *elseBB = llvm::BasicBlock::Create(ctx_, "else", fn_);
      auto *joinBB = llvm::BasicBlock::Create(ctx_, "join", fn_);
      b_.CreateCondBr(cond, thenBB, elseBB);
      // Of two alternatives either may be the one a call runs (a matmul's branches on its
      // runtime token count: a stream of a few rows, or tiles over a nominal 1024 m blocks), so
      // the lighter counts as much work as the heavier for the cold-code estimate: else the
      // stream's few rows would be cold beside the tiles, and compiled without fused
      // multiply-adds (8 rows by 4096x4096, partly specialized: 1.86 ms against 1.54).
      const double thenWork = workOf(s->body), elseWork = workOf(s->elseBody);
      const double outerRuns = runs_;
      auto emitAlternative = [&](llvm::BasicBlock *bb, const std::vector<Stmt> &stmts,
                                 double work) {
        b_.SetInsertPoint(bb);
        if (work > 0 && !s->elseBody.empty())
          runs_ = outerRuns * std::max(thenWork, elseWork) / work;
        emitBlock(stmts);
        runs_ = outerRuns;
        b_.CreateBr(joinBB);
      };
      emitAlternative(thenBB, s->body, thenWork);
      emitAlternative(elseBB, s->elseBody, elseWork);
      b_.SetInsertPoint(joinBB);
      return;
    }
    }
  }

  void emitFor(const StmtNode &s) {
    llvm::Value *extent = emitExpr(s.value);
    if (s.forKind == ForKind::Parallel) {
      emitParallelFor(s, extent);
      return;
    }
    if (const int64_t step = interleavedStep(s)) {
      // The interleaved vector body takes the multiples of `step`, a loop of one vector an
      // iteration the rest, which leaves the scalar remainder fewer than one vector: a causal
      // softmax's rows, whose lengths are multiples of 16, would each leave 16 to the scalar exp
      // (in a partly specialized S5c, 45% of the softmax's samples went to it, AVX2).
      const std::optional<int64_t> trips = asConstant(s.value);
      if (!trips || *trips % step) {
        llvm::Value *whole = b_.CreateSub(extent, b_.CreateSRem(extent, b_.getInt64(step)),
                                          s.name + ".whole"); // 0 for an extent below 0
        emitLoop(s, b_.getInt64(0), whole, LoopPart::Interleaved);
        emitLoop(s, whole, extent, LoopPart::Rest);
        return;
      }
    }
    emitLoop(s, b_.getInt64(0), extent);
  }

  // The vectors an iteration of the vectorized loop `s` takes where codegen splits off its rest
  // (emitFor): CodegenOptions::expInterleave for exp loops, kInterleave for loops whose trip count
  // is no constant. 0 for loops it leaves whole: short ones (one vector an iteration, emitLoop)
  // and those the vectorizer chooses for.
  unsigned interleaveOf(const StmtNode &s) const {
    if (s.forKind != ForKind::Vectorize || isShort(s))
      return 0;
    if (options_.expInterleave > 1 && computesExp(s.body))
      return unsigned(options_.expInterleave);
    if (options_.vectorBits > 0 && !asConstant(s.value))
      return kInterleave;
    return 0;
  }

  // The f32 elements an iteration of `s`'s interleaved vector body takes (emitFor), 0 where the
  // vectorizer chooses. Loops of 16-bit elements may take twice as many: the vectorizer's
  // epilogue then runs the odd multiple.
  int64_t interleavedStep(const StmtNode &s) const {
    const int64_t lanes = options_.vectorBits > 0 ? options_.vectorBits / 32 : 8;
    return interleaveOf(s) * lanes;
  }

  // Whether `s` runs at most kMaxTripsNotInterleaved trips.
  static bool isShort(const StmtNode &s) {
    const std::optional<int64_t> trips = mostTrips(s.value);
    return trips && *trips <= kMaxTripsNotInterleaved;
  }

  // for name in [begin, end) { body }, at the insertion point: all of the loop, or the
  // interleaved part or the rest of one that emitFor splits, which runs one vector an iteration.
  //
  // The loop tests its index at the bottom, after the body, and a guard before it skips a loop
  // that may run no trip (none where the bounds are constants and it runs at least one): the
  // form LLVM's loop rotation would otherwise make of a loop tested at the top, by copying the
  // test before the loop, for every loop of the kernel.
  enum class LoopPart { All, Interleaved, Rest };
  void emitLoop(const StmtNode &s, llvm::Value *begin, llvm::Value *end,
                LoopPart part = LoopPart::All) {
    llvm::BasicBlock *pre = b_.GetInsertBlock();
    auto *bodyBB = llvm::BasicBlock::Create(ctx_, s.name + ".body", fn_);
    auto *exit = llvm::BasicBlock::Create(ctx_, s.name + ".exit", fn_);
    llvm::Value *entered = b_.CreateICmpSLT(begin, end, s.name + ".entered");
    if (auto *known = llvm::dyn_cast<llvm::ConstantInt>(entered); known && known->isOne())
      b_.CreateBr(bodyBB);
    else
      b_.CreateCondBr(entered, bodyBB, exit);
    b_.SetInsertPoint(bodyBB);
    llvm::PHINode *iv = b_.CreatePHI(b_.getInt64Ty(), 2, s.name);
    iv->addIncoming(begin, pre);
    scopes_.emplace_back();
    scopes_.back()[s.name] = iv;
    if (!s.chunkFirst.empty())
      scopes_.back()[s.chunkFirst] = begin;
    const std::optional<int64_t> trips = mostTrips(s.value); // at most: a causal mask's keys
    const double outerRuns = runs_;
    runs_ *= runsPerTrip(s);
    emitStatements(s.body, s.forKind == ForKind::Parallel ||
                               (outlining_ && s.forKind == ForKind::Serial && trips &&
                                *trips <= kMaxOutlinedTrips));
    runs_ = outerRuns;
    scopes_.pop_back();
    llvm::Value *next = b_.CreateAdd(iv, b_.getInt64(1), s.name + ".next", true, true);
    llvm::BranchInst *latch =
        b_.CreateCondBr(b_.CreateICmpSLT(next, end, s.name + ".more"), bodyBB, exit);
    iv->addIncoming(next, b_.GetInsertBlock());
    // `Vectorize` stays a hint for readers of the loop IR: forcing it with loop metadata makes
    // LLVM warn on stderr about loops its cost model rightly leaves scalar, and gains nothing.
    // A loop that reads or writes memory at indices it loads (ranking and packing the pairs of a
    // gather) is kept scalar instead: widened, each such access becomes one scalar access per
    // lane, several times the IR to optimize and compile for loops that run a few thousand
    // times.
    if (s.forKind != ForKind::Vectorize && addressesThroughLoads(s.body))
      setLoopHint(latch, "llvm.loop.vectorize.enable", llvm::ConstantInt::getFalse(ctx_));
    else if (s.forKind == ForKind::Vectorize && (isShort(s) || part == LoopPart::Rest))
      setLoopHint(latch, "llvm.loop.interleave.count", b_.getInt32(1));
    else if (s.forKind == ForKind::Vectorize && options_.expInterleave > 0 && computesExp(s.body))
      setLoopHint(latch, "llvm.loop.interleave.count", b_.getInt32(options_.expInterleave));
    else if (part == LoopPart::Interleaved)
      setLoopHint(latch, "llvm.loop.interleave.count", b_.getInt32(interleaveOf(s)));
    b_.SetInsertPoint(exit);
  }

  // One hint of loop metadata on the loop whose latch is `latch`.
  void setLoopHint(llvm::BranchInst *latch, const char *name, llvm::Constant *value) {
    llvm::Metadata *hint[] = {llvm::MDString::get(ctx_, name),
                              llvm::ConstantAsMetadata::get(value)};
    llvm::Metadata *self[] = {nullptr, llvm::MDNode::get(ctx_, hint)};
    llvm::MDNode *loop = llvm::MDNode::getDistinct(ctx_, self);
    loop->replaceOperandWith(0, loop);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loop);
  }

  // Whether a statement among `stmts` (not in nested loops) computes exp.
  static bool computesExp(const std::vector<Stmt> &stmts) {
    std::function<bool(const Expr &)> exp = [&](const Expr &e) -> bool {
      if (!e)
        return false;
      if (e->kind == ExprKind::Unary && e->op == OpKind::Exp)
        return true;
      for (const Expr &arg : e->args)
        if (exp(arg))
          return true;
      return false;
    };
    for (const Stmt &st : stmts)
      if (st->kind != StmtKind::For && (exp(st->value) || computesExp(st->body)))
        return true;
    return false;
  }

  // What a statement tree refers to, in the order it first does (loops/TreeShape.h): the names
  // it declares, reads or assigns, and the buffers it reads or writes; with `withShape`, its
  // shape, which only parallel loops need (building it is most of the cost).
  struct Uses {
    std::vector<std::string> names;
    std::vector<int> buffers;
    std::string shape;
  };
  Uses usesOf(const std::vector<Stmt> &stmts, bool withShape = false) const {
    loops::TreeWalk walk(p_, withShape);
    walk.stmts(stmts);
    return {std::move(walk.names), std::move(walk.buffers), std::move(walk.shape)};
  }

  // The statements of a block as runs that share no let or local with the rest: each run
  // declares what it refers to of the block's own names, so it may become a function of its own.
  std::vector<std::pair<size_t, size_t>> independentRuns(const std::vector<Stmt> &stmts) const {
    std::unordered_map<std::string, size_t> declaredAt;
    std::vector<size_t> lastUser(stmts.size());
    for (size_t j = 0; j < stmts.size(); ++j) {
      lastUser[j] = j;
      for (const std::string &name : usesOf({stmts[j]}).names)
        if (auto it = declaredAt.find(name); it != declaredAt.end())
          lastUser[it->second] = j;
      if (stmts[j]->kind == StmtKind::Let || stmts[j]->kind == StmtKind::Local)
        declaredAt[stmts[j]->name] = j;
    }
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t begin = 0; begin < stmts.size();) {
      size_t end = begin + 1;
      for (size_t k = begin; k < end; ++k)
        end = std::max(end, lastUser[k] + 1);
      runs.emplace_back(begin, end);
      begin = end;
    }
    return runs;
  }

  static size_t nodesOf(const Expr &e) {
    size_t n = e ? 1 : 0;
    if (e)
      for (const Expr &a : e->args)
        n += nodesOf(a);
    return n;
  }
  // A statement and its expressions' nodes, not those of the statements it holds.
  static size_t nodesOf(const StmtNode &s) {
    return 1 + nodesOf(s.value) + nodesOf(s.index) + nodesOf(s.bound);
  }

  // How many times a loop runs its body, for the cold-code estimate (runs_): its trips (at most
  // a constant that bounds them, as a causal mask's keys), a runtime trip count as
  // kUnknownTrips, a widened loop's trips over kVectorizedLanes.
  static double runsPerTrip(const StmtNode &loop) {
    const std::optional<int64_t> trips = mostTrips(loop.value);
    const double runs = trips ? double(std::max<int64_t>(*trips, 1)) : kUnknownTrips;
    return loop.forKind == ForKind::Vectorize ? std::max(1.0, runs / kVectorizedLanes) : runs;
  }

  // The work of `stmts` as the cold-code estimate counts it: nodes times the runs of the loops
  // around them.
  static double workOf(const std::vector<Stmt> &stmts) {
    double work = 0;
    for (const Stmt &st : stmts)
      work += double(nodesOf(*st)) +
              (st->kind == StmtKind::For ? runsPerTrip(*st) : 1.0) * workOf(st->body) +
              workOf(st->elseBody);
    return work;
  }

  // Statements and expression nodes: roughly what a tree costs LLVM to optimize and compile.
  static size_t weightOf(const std::vector<Stmt> &stmts, size_t scale = 1) {
    size_t n = 0;
    for (const Stmt &st : stmts) {
      n += scale * nodesOf(*st);
      if (st->kind == StmtKind::For && st->forKind == ForKind::Parallel)
        continue; // a function of its own
      const bool widened = st->kind == StmtKind::For && st->forKind == ForKind::Vectorize;
      n += weightOf(st->body, widened ? kWidenedWeight : scale) + weightOf(st->elseBody, scale);
    }
    return n;
  }

  static bool containsLoop(const std::vector<Stmt> &stmts) {
    for (const Stmt &st : stmts)
      if (st->kind == StmtKind::For || containsLoop(st->body) || containsLoop(st->elseBody))
        return true;
    return false;
  }

  static bool containsCheck(const std::vector<Stmt> &stmts) {
    for (const Stmt &st : stmts)
      if (st->kind == StmtKind::Check || containsCheck(st->body) || containsCheck(st->elseBody))
        return true;
    return false;
  }

  // The statements of the kernel's body, of a parallel loop's body, or of a loop of a few trips
  // among those. With `mayOutline`, each run of them that shares nothing with the others
  // (independentRuns) and weighs kMinOutlinedWeight or more becomes a function of its own,
  // which the engine may compile on another thread (codegen/SplitKernel.h): attention's two
  // products and its softmax, the serial nests of the MoE block before its projections, or a
  // matmul's tiles apart from the packing of its panels (in its k blocks, 16 trips), are each a
  // large share of one function otherwise.
  void emitStatements(const std::vector<Stmt> &stmts, bool mayOutline) {
    const bool outer = outlining_;
    outlining_ = mayOutline;
    emitRuns(stmts, mayOutline);
    outlining_ = outer;
  }
  void emitRuns(const std::vector<Stmt> &stmts, bool mayOutline) {
    std::vector<std::pair<size_t, size_t>> runs;
    if (mayOutline && options_.outlineNests)
      runs = independentRuns(stmts);
    if (runs.size() < 2) {
      for (const Stmt &st : stmts)
        emit(st);
      return;
    }
    // Consecutive runs join until they weigh enough to pay for a function of their own.
    size_t begin = 0, weight = 0;
    for (auto [first, end] : runs) {
      weight += weightOf({stmts.begin() + ptrdiff_t(first), stmts.begin() + ptrdiff_t(end)});
      if (weight < kMinOutlinedWeight && end < stmts.size())
        continue;
      std::vector<Stmt> run(stmts.begin() + ptrdiff_t(begin), stmts.begin() + ptrdiff_t(end));
      if (weight < kMinOutlinedWeight || !emitOutlined(run))
        for (const Stmt &st : run)
          emit(st);
      begin = end;
      weight = 0;
    }
  }

  // `run` as a call to a function of its own; false when it updates an outer local.
  bool emitOutlined(const std::vector<Stmt> &run) {
    std::string name = p_.name + ".nest";
    for (const Stmt &st : run)
      if (st->kind == StmtKind::For) {
        name = fmt::format("{}.{}.nest", p_.name, st->name);
        break;
      }
    std::optional<Outlined> nest = outline(run, name, {}, [&](llvm::Function *) {
      for (const Stmt &st : run)
        emit(st);
    });
    if (!nest)
      return false;
    b_.CreateCall(nest->fn, nest->args);
    if (containsCheck(run)) {
      // A failed check returned from the nest; the kernel stops here, as it would have inline.
      llvm::Value *failed =
          b_.CreateICmpNE(b_.CreateLoad(b_.getInt64Ty(), status_), b_.getInt64(0));
      auto *stopBB = llvm::BasicBlock::Create(ctx_, "nest.failed", fn_);
      auto *goBB = llvm::BasicBlock::Create(ctx_, "nest.ok", fn_);
      b_.CreateCondBr(failed, stopBB, goBB, llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20));
      b_.SetInsertPoint(stopBB);
      b_.CreateRetVoid();
      b_.SetInsertPoint(goBB);
    }
    return true;
  }

  // The values a function for statements of `uses` takes from its caller: their buffers, the
  // kernel's params and the immutable values they read from outside (`captured`, by name).
  // False when they use an outer local, which a copy would not update.
  bool argumentsFor(const Uses &uses, std::vector<std::pair<std::string, llvm::Value *>> &captured,
                    std::vector<llvm::Value *> &args) {
    for (const std::string &used : uses.names)
      for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
        if (auto found = it->find(used); found != it->end()) {
          if (llvm::isa<llvm::AllocaInst>(found->second))
            return false;
          captured.push_back({used, found->second});
          break;
        }
    for (int buffer : uses.buffers)
      args.push_back(bufferPtrs_[buffer]);
    args.push_back(dims_);
    args.push_back(scalars_);
    args.push_back(status_);
    for (auto &[_, v] : captured)
      args.push_back(v);
    return true;
  }

  // A function of its own for `stmts`: what they read from outside (buffers, params, lets, loop
  // variables) becomes its parameters after `leading`, noalias as the kernel body's are, and
  // `args` holds the caller's values for them. `emitInside` fills the body at its entry. None
  // when the statements use an outer local, which a copy would not update.
  struct Outlined {
    llvm::Function *fn;
    std::vector<llvm::Value *> args;
  };
  std::optional<Outlined> outline(const std::vector<Stmt> &stmts, const std::string &name,
                                  const std::vector<llvm::Type *> &leading,
                                  const std::function<void(llvm::Function *)> &emitInside) {
    const Uses uses = usesOf(stmts);
    std::vector<std::pair<std::string, llvm::Value *>> captured;
    Outlined out;
    if (!argumentsFor(uses, captured, out.args))
      return std::nullopt;
    const std::vector<int> &buffers = uses.buffers;
    std::vector<llvm::Type *> params = leading;
    for (llvm::Value *v : out.args)
      params.push_back(v->getType());
    out.fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                    llvm::Function::InternalLinkage, name, *module_);
    out.fn->addFnAttr(llvm::Attribute::NoUnwind);
    size_t param = leading.size();
    for (int buffer : buffers) {
      out.fn->addParamAttr(param, llvm::Attribute::NoAlias);
      if (p_.buffers[buffer].role == BufferRole::Input)
        out.fn->addParamAttr(param, llvm::Attribute::ReadOnly);
      ++param;
    }
    for (int i = 0; i < 3; ++i) // dims, scalars, status
      out.fn->addParamAttr(param++, llvm::Attribute::NoAlias);

    // Emit the body with the builder's state of its own, then restore the caller's.
    llvm::IRBuilderBase::InsertPoint saved = b_.saveIP();
    llvm::Function *savedFn = fn_;
    llvm::BasicBlock *savedEntry = entryBlock_;
    std::vector<llvm::Value *> savedBuffers = bufferPtrs_;
    llvm::Value *savedDims = dims_, *savedScalars = scalars_, *savedStatus = status_;
    auto savedScopes = std::move(scopes_);

    fn_ = out.fn;
    entryBlock_ = llvm::BasicBlock::Create(ctx_, "entry", out.fn);
    b_.SetInsertPoint(entryBlock_);
    size_t next = leading.size();
    std::fill(bufferPtrs_.begin(), bufferPtrs_.end(), nullptr); // the body uses no other
    for (int buffer : buffers)
      bufferPtrs_[buffer] = out.fn->getArg(unsigned(next++));
    dims_ = out.fn->getArg(unsigned(next++));
    scalars_ = out.fn->getArg(unsigned(next++));
    status_ = out.fn->getArg(unsigned(next++));
    scopes_.clear();
    scopes_.emplace_back();
    for (auto &[used, _] : captured)
      scopes_.back()[used] = out.fn->getArg(unsigned(next++));
    emitInside(out.fn);
    b_.CreateRetVoid();

    fn_ = savedFn;
    entryBlock_ = savedEntry;
    bufferPtrs_ = savedBuffers;
    dims_ = savedDims;
    scalars_ = savedScalars;
    status_ = savedStatus;
    scopes_ = std::move(savedScopes);
    b_.restoreIP(saved);
    return out;
  }

  // A parallel loop becomes a function over a [begin, end) chunk that frank_parallel_for calls
  // from several threads. What the body reads from outside (buffers, params, lets, enclosing
  // loop variables) travels in a context struct; an outer mutable local would be a data race.
  // Only the buffers the body uses travel: a kernel with many temporaries would otherwise fill a
  // context field per buffer before every parallel loop (S10: 15 loops x 58 buffers).
  void emitParallelFor(const StmtNode &s, llvm::Value *extent) {
    // An innermost loop over a constant extent runs in chunks of whole grains of kGrain
    // iterations, so that the threads split it where a vector step of the loop LLVM widens
    // ends: a chunk that began or ended inside one ran the iterations around it in the scalar
    // remainder, whose exp and division round differently (a one-row swiglu's results changed
    // by 1-2 ulp with the thread count). The last chunk ends at the extent.
    const auto *constantExtent = llvm::dyn_cast<llvm::ConstantInt>(extent);
    const int64_t grain =
        constantExtent && !containsLoop(s.body) && constantExtent->getSExtValue() >= 2 * kGrain
            ? kGrain
            : 1;
    // A loop whose body has the shape of an earlier one's (the MoE block's gate and up
    // projections) takes the earlier chunk with its own context: one function to compile.
    const Uses uses = usesOf(s.body, /*withShape=*/true);
    // The body's names do not say which one the loop binds to its chunk's first iteration.
    std::string shape =
        s.chunkFirst.empty()
            ? uses.shape
            : fmt::format("{}|first {}", uses.shape,
                          std::find(uses.names.begin(), uses.names.end(), s.chunkFirst) -
                              uses.names.begin());
    if (grain > 1)
      shape += fmt::format("|grains of {} up to {}", grain, constantExtent->getSExtValue());
    std::vector<llvm::Value *> fields;
    if (chunks_.count(shape)) {
      std::vector<std::pair<std::string, llvm::Value *>> captured;
      if (!argumentsFor(uses, captured, fields))
        internalError("a parallel loop updates an outer variable");
    } else {
      // The chunk function, void(i64 begin, i64 end, ptr context), unpacks the context into an
      // always-inline body whose buffer parameters are noalias, as the kernel's own body's are:
      // pointers loaded from memory would lose that, and with it hoisting and vectorization.
      std::optional<Outlined> body =
          outline(s.body, fmt::format("{}.{}.body", p_.name, s.name),
                  {b_.getInt64Ty(), b_.getInt64Ty()}, [&](llvm::Function *impl) {
                    llvm::Value *begin = impl->getArg(0), *end = impl->getArg(1);
                    if (grain > 1) {
                      begin = b_.CreateMul(begin, b_.getInt64(grain), "begin", true, true);
                      end = b_.CreateBinaryIntrinsic(
                          llvm::Intrinsic::smin,
                          b_.CreateMul(end, b_.getInt64(grain), "end", true, true), extent);
                    }
                    emitLoop(s, begin, end);
                  });
      if (!body)
        internalError("a parallel loop updates an outer variable");
      llvm::Function *impl = body->fn;
      impl->addFnAttr(llvm::Attribute::AlwaysInline);
      fields = body->args;
      std::vector<llvm::Type *> fieldTypes;
      for (llvm::Value *v : fields)
        fieldTypes.push_back(v->getType());
      auto *contextType = llvm::StructType::get(ctx_, fieldTypes);
      auto *chunkType = llvm::FunctionType::get(
          b_.getVoidTy(), {b_.getInt64Ty(), b_.getInt64Ty(), b_.getPtrTy()}, false);
      auto *chunk = llvm::Function::Create(chunkType, llvm::Function::InternalLinkage,
                                           fmt::format("{}.{}.chunk", p_.name, s.name), *module_);
      chunk->addFnAttr(llvm::Attribute::NoUnwind);
      llvm::IRBuilder<> unpack(llvm::BasicBlock::Create(ctx_, "entry", chunk));
      std::vector<llvm::Value *> implArgs{chunk->getArg(0), chunk->getArg(1)};
      for (size_t i = 0; i < fields.size(); ++i)
        implArgs.push_back(unpack.CreateLoad(
            fieldTypes[i], unpack.CreateStructGEP(contextType, chunk->getArg(2), unsigned(i))));
      unpack.CreateCall(impl, implArgs);
      unpack.CreateRetVoid();
      chunks_[shape] = {chunk, contextType};
    }
    auto [chunk, contextType] = chunks_.at(shape);
    bool sameContext = contextType->getNumElements() == fields.size();
    for (size_t i = 0; sameContext && i < fields.size(); ++i)
      sameContext = contextType->getElementType(unsigned(i)) == fields[i]->getType();
    if (!sameContext)
      internalError("parallel loops of one shape pass different contexts");

    // Fill the context and hand the loop to the runtime.
    llvm::IRBuilder<> entry(entryBlock_, entryBlock_->begin());
    llvm::AllocaInst *slot = entry.CreateAlloca(contextType, nullptr, s.name + ".context");
    for (size_t i = 0; i < fields.size(); ++i)
      b_.CreateStore(fields[i], b_.CreateStructGEP(contextType, slot, i));
    auto runtime = module_->getOrInsertFunction(
        "frank_parallel_for",
        llvm::FunctionType::get(b_.getVoidTy(),
                                {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty(), b_.getInt64Ty()},
                                false));
    llvm::Value *count = extent, *minChunk = emitExpr(s.bound);
    if (grain > 1) {
      auto grains = [&](llvm::Value *n) {
        return b_.CreateUDiv(b_.CreateAdd(n, b_.getInt64(grain - 1)), b_.getInt64(grain));
      };
      count = grains(extent);
      minChunk = grains(minChunk);
    }
    b_.CreateCall(runtime, {chunk, slot, count, minChunk});
  }

  const Program &p_;
  llvm::LLVMContext &ctx_;
  llvm::IRBuilder<> b_;
  CodegenOptions options_;
  std::unique_ptr<llvm::Module> module_;
  llvm::Function *fn_ = nullptr;
  llvm::BasicBlock *entryBlock_ = nullptr;
  llvm::Value *dims_ = nullptr, *scalars_ = nullptr, *status_ = nullptr;
  bool outlining_ = false; // the statements being emitted may be outlined (emitStatements)
  // How many times a kernel call runs the statements being emitted, and how many statement and
  // expression nodes each function runs a call: the work estimate that picks the cold functions
  // (ColdCode.h).
  double runs_ = 1;
  std::map<llvm::Function *, double> work_;
  std::vector<llvm::Value *> bufferPtrs_;
  std::vector<std::unordered_map<std::string, llvm::Value *>> scopes_;
  // The chunk function and context type of each shape of parallel loop body (usesOf).
  std::unordered_map<std::string, std::pair<llvm::Function *, llvm::StructType *>> chunks_;
};

} // namespace

std::unique_ptr<llvm::Module> codegen(const loops::Program &program, llvm::LLVMContext &context,
                                      const CodegenOptions &options) {
  auto module = Codegen(program, context, options).run();
  foldReciprocalProducts(*module);
  return module;
}

} // namespace frank
