// Math functions called by name during optimization and inlined after it.
#include "codegen/MathFunctions.h"

#include "ir/Diagnostics.h"
#include <llvm/IR/Intrinsics.h>

#include <llvm/ADT/bit.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <fmt/format.h>

#include <cmath>

namespace frank {
namespace {

constexpr const char *kExpPrefix = "frank.exp.";

std::string expName(llvm::Type *type) {
  if (auto *vector = llvm::dyn_cast<llvm::FixedVectorType>(type))
    return fmt::format("{}v{}f32", kExpPrefix, vector->getNumElements());
  return std::string(kExpPrefix) + "f32";
}

llvm::Value *fma(llvm::IRBuilderBase &b, llvm::Value *a, llvm::Value *m, llvm::Value *addend) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, m, addend});
}

// x within [-104, 89]: e^89 overflows and e^-104 rounds to 0, so n stays within [-150, 128],
// the range of two power-of-two factors. Selects that lower to one vminps/vmaxps each and pass
// NaN through.
llvm::Value *clampToExpRange(llvm::IRBuilderBase &b, llvm::Value *x) {
  auto c = [&](double v) { return llvm::ConstantFP::get(x->getType(), v); };
  llvm::Value *clamped = b.CreateSelect(b.CreateFCmpOGT(x, c(89.0)), c(89.0), x);
  return b.CreateSelect(b.CreateFCmpOLT(clamped, c(-104.0)), c(-104.0), clamped);
}

// 2^e for integers e in [-126, 127], built in the exponent bits of a float of `type`.
llvm::Value *powerOfTwo(llvm::IRBuilderBase &b, llvm::Value *e, llvm::Type *type) {
  auto i = [&](int64_t v) { return llvm::ConstantInt::get(e->getType(), v); };
  return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, i(127)), i(23)), type);
}

// exp(x) for f32 or any vector of it, in operations every target has: about 2 ulp over the whole
// range. x = n*ln2 + r with n rounded by adding 1.5*2^23 (no float-to-int conversion, so NaN
// stays NaN and never becomes poison), a degree-6 polynomial for e^r (Cephes), and 2^n as two
// factors built in the exponent bits, so that results past FLT_MAX become +inf and results below
// FLT_MIN become subnormal or 0 by the multiplies themselves, with no selects. The clamps only
// keep n within the two factors' range.
llvm::Value *expPortable(llvm::IRBuilderBase &b, llvm::Value *x) {
  llvm::Type *type = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(type, v); };
  llvm::Type *intType = type->isVectorTy() ? static_cast<llvm::Type *>(llvm::VectorType::getInteger(
                                                 llvm::cast<llvm::VectorType>(type)))
                                           : b.getInt32Ty();
  auto i = [&](int64_t v) { return llvm::ConstantInt::get(intType, v); };
  llvm::Value *clamped = clampToExpRange(b, x);
  const double magic = 12582912.0; // 1.5 * 2^23: adding it rounds to an integer
  llvm::Value *shifted = b.CreateFAdd(b.CreateFMul(clamped, c(1.44269504088896341)), c(magic));
  llvm::Value *n = b.CreateFSub(shifted, c(magic));
  llvm::Value *r = b.CreateFSub(b.CreateFSub(clamped, b.CreateFMul(n, c(0.693359375))),
                                b.CreateFMul(n, c(-2.12194440e-4)));
  llvm::Value *r2 = b.CreateFMul(r, r);
  llvm::Value *poly = c(1.9875691500E-4);
  for (double k :
       {1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1})
    poly = b.CreateFAdd(b.CreateFMul(poly, r), c(k));
  llvm::Value *er = b.CreateFAdd(b.CreateFAdd(b.CreateFMul(poly, r2), r), c(1.0));
  // n as an integer: shifted and magic share their exponent, so their bits differ by n.
  llvm::Value *ni = b.CreateSub(b.CreateBitCast(shifted, intType), i(0x4B400000));
  llvm::Value *half = b.CreateAShr(ni, i(1));
  return b.CreateFMul(b.CreateFMul(er, powerOfTwo(b, half, type)),
                      powerOfTwo(b, b.CreateSub(ni, half), type));
}

// The table forms' range reduction: x = m*ln2 + r with m = n/E, for a table of E entries 2^(j/E)
// (E a power of two), and the entry for n mod E. Adding `magic`, 1.5 * 2^23 / E, to x log2(e)
// rounds it to a multiple of 1/E and leaves n in the low bits of the sum's integer form, `bits`
// (so that `bits` less magic's bits is n), where `permute` (vpermps) finds the entry's index.
struct TableReduction {
  llvm::Value *bits, *m, *r, *power;
  double magic;
};
TableReduction reduceForTable(llvm::IRBuilderBase &b, llvm::Value *x, int entries,
                              llvm::Intrinsic::ID permute) {
  llvm::Type *type = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(type, v); };
  TableReduction t;
  t.magic = 12582912.0 / entries;
  llvm::Value *shifted = fma(b, x, c(1.44269504088896341), c(t.magic));
  t.m = b.CreateFSub(shifted, c(t.magic));
  // ln2 in two parts (Cody and Waite): m times the first is exact wherever e^x is finite and not
  // 0, m having at most 12 bits there.
  t.r = fma(b, t.m, c(-0.693359375), x);
  t.r = fma(b, t.m, c(2.12194440e-4), t.r);
  std::vector<llvm::Constant *> powers;
  for (int j = 0; j < entries; ++j)
    powers.push_back(llvm::ConstantFP::get(b.getFloatTy(), std::exp2(double(j) / entries)));
  t.bits =
      b.CreateBitCast(shifted, llvm::VectorType::getInteger(llvm::cast<llvm::VectorType>(type)));
  t.power = b.CreateIntrinsic(permute, {}, {llvm::ConstantVector::get(powers), t.bits});
  return t;
}

// exp(x) for 16 floats with AVX-512, about 1 ulp: x = (n/16)*ln2 + r, so e^x = 2^floor(n/16) *
// 2^((n mod 16)/16) * e^r. vpermps looks up 2^(j/16) in a 16-lane table with the low four bits of
// n's integer form, |r| <= ln2/32 needs only a cubic, and vscalefps multiplies by 2^floor(n/16)
// with one rounding. Eleven vector operations against the portable version's twenty-three, and
// three of them (the subtraction, the table, the scaling) on the pipes that do not multiply.
//
// The ends of the range need no clamp of x: vscalefps gives +inf for a scale of +inf or any
// scale past 128 (with a finite positive mantissa), 0 for -inf or past -150, and NaN for NaN,
// so n/16 may follow x anywhere. Only r must stay finite and small for the mantissa to be: it is
// garbage once |x| log2(e) passes 2^18, and NaN at +-inf (inf - inf). One vrangeps bounds |r| by
// 1 and replaces a NaN with 1 (it returns the number when the other operand is a quiet NaN).
llvm::Value *expAvx512(llvm::IRBuilderBase &b, llvm::Value *x) {
  llvm::Type *type = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(type, v); };
  TableReduction t = reduceForTable(b, x, 16, llvm::Intrinsic::x86_avx512_permvar_sf_512);
  llvm::Value *r = b.CreateIntrinsic(
      llvm::Intrinsic::x86_avx512_mask_range_ps_512, {},
      {t.r, c(1.0), b.getInt32(0b0010 /* the smaller magnitude, the sign of r */),
       llvm::PoisonValue::get(type), b.getInt16(0xffff), b.getInt32(4 /* current rounding */)});
  // e^r - 1 = r (1 + r (1/2 + r/6)): the 1 in e^r is added exactly by the last multiply-add.
  llvm::Value *q = b.CreateFMul(fma(b, fma(b, r, c(1.0 / 6), c(0.5)), r, c(1.0)), r);
  llvm::Value *mantissa = fma(b, t.power, q, t.power);
  // vscalefps multiplies by 2^floor(m) = 2^floor(n/16).
  return b.CreateIntrinsic(llvm::Intrinsic::x86_avx512_mask_scalef_ps_512, {},
                           {mantissa, t.m, llvm::PoisonValue::get(type), b.getInt16(0xffff),
                            b.getInt32(4 /* current rounding */)});
}

// exp(x) for 8 floats with AVX2, about 1 ulp: x = (n/8)*ln2 + r, so e^x = 2^floor(n/8) *
// 2^((n mod 8)/8) * e^r, as the AVX-512 form does with 16 (the table holds 8 here, vpermps's
// width, so |r| <= ln2/16 takes a quartic). Exp loops with 16 registers are bound by the FMA
// pipes, which the portable form's degree-6 polynomial and two scaling multiplies keep busy:
// swiglu's loop (S2) takes 48.7 cycles per 4 vectors by llvm-mca's Zen 3 model with it and 42.2
// with this form, and S2 on a Zen 3 ran 170-259 us against 182-290 (five rounds of one process
// alternating the kernels, this form faster in each by 4-11%; with exp replaced by a multiply
// it takes 60).
//
// The clamps bound n as the portable form's do, and 2^floor(n/8) is again two factors, the first
// added to the table entry's exponent bits (exact: 2^(j/8) * 2^h stays a normal float for every
// h in range). That add happens before any arithmetic that involves r, so a NaN x, whose n is
// garbage, still reaches the multiply-add by e^r - 1 and stays NaN whatever the entry became.
llvm::Value *expAvx2(llvm::IRBuilderBase &b, llvm::Value *x) {
  llvm::Type *type = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(type, v); };
  llvm::Type *intType = llvm::VectorType::getInteger(llvm::cast<llvm::VectorType>(type));
  auto i = [&](int64_t v) { return llvm::ConstantInt::get(intType, v); };
  TableReduction t = reduceForTable(b, clampToExpRange(b, x), 8, llvm::Intrinsic::x86_avx2_permps);
  // e^r - 1 = r (1 + r (1/2 + r (1/6 + r/24))).
  llvm::Value *q = fma(b, fma(b, fma(b, t.r, c(1.0 / 24), c(1.0 / 6)), t.r, c(0.5)), t.r, c(1.0));
  q = b.CreateFMul(q, t.r);
  // k = floor(n/8).
  const auto magicBits = llvm::bit_cast<uint32_t>(static_cast<float>(t.magic));
  llvm::Value *k = b.CreateAShr(b.CreateSub(t.bits, i(magicBits)), i(3));
  llvm::Value *half = b.CreateAShr(k, i(1));
  llvm::Value *scaledPower = b.CreateBitCast(
      b.CreateAdd(b.CreateBitCast(t.power, intType), b.CreateShl(half, i(23))), type);
  llvm::Value *mantissa = fma(b, scaledPower, q, scaledPower);
  // 2^(k - half), k - half in [-75, 64].
  return b.CreateFMul(mantissa, powerOfTwo(b, b.CreateSub(k, half), type));
}

bool hasLanes(llvm::Type *type, unsigned lanes) {
  auto *vector = llvm::dyn_cast<llvm::FixedVectorType>(type);
  return vector && vector->getNumElements() == lanes;
}

} // namespace

llvm::Value *callExpF32(llvm::Module &module, llvm::IRBuilderBase &builder, llvm::Value *x) {
  llvm::Type *type = x->getType();
  llvm::FunctionCallee callee =
      module.getOrInsertFunction(expName(type), llvm::FunctionType::get(type, {type}, false));
  auto *f = llvm::cast<llvm::Function>(callee.getCallee());
  f->setDoesNotAccessMemory();
  f->setDoesNotThrow();
  f->setWillReturn();
  f->addFnAttr(llvm::Attribute::Speculatable);
  return builder.CreateCall(callee, {x});
}

llvm::Value *powThroughDoubles(llvm::Module &module, llvm::IRBuilderBase &builder, llvm::Value *x,
                               llvm::Value *y) {
  llvm::Type *type = x->getType();
  llvm::Type *wide = type->getWithNewType(builder.getDoubleTy());
  llvm::Value *a = builder.CreateFPExt(x, wide), *b = builder.CreateFPExt(y, wide);
  llvm::Value *power;
  if (type->isVectorTy()) {
    power = builder.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, b);
  } else {
    llvm::FunctionCallee callee =
        module.getOrInsertFunction(kWidenedPow, llvm::FunctionType::get(wide, {wide, wide}, false));
    auto *f = llvm::cast<llvm::Function>(callee.getCallee());
    f->setDoesNotAccessMemory();
    f->setDoesNotThrow();
    f->setWillReturn();
    f->addFnAttr(llvm::Attribute::Speculatable);
    power = builder.CreateCall(callee, {a, b});
  }
  return builder.CreateFPTrunc(power, type);
}

std::vector<llvm::VecDesc> mathVectorMappings() {
  // VecDesc holds string references: these literals outlive every use.
  return {
      {"frank.exp.f32", "frank.exp.v4f32", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v"},
      {"frank.exp.f32", "frank.exp.v8f32", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v"},
      {"frank.exp.f32", "frank.exp.v16f32", llvm::ElementCount::getFixed(16), false,
       "_ZGV_LLVM_N16v"},
  };
}

void defineMathFunctions(llvm::Module &module, MathTarget target) {
  if (llvm::Function *pow = module.getFunction(kWidenedPow)) {
    pow->replaceAllUsesWith(llvm::Intrinsic::getDeclaration(
        &module, llvm::Intrinsic::pow, {llvm::Type::getDoubleTy(module.getContext())}));
    pow->eraseFromParent();
  }
  std::vector<llvm::Function *> declared;
  for (llvm::Function &f : module)
    if (f.isDeclaration() && f.getName().starts_with(kExpPrefix))
      declared.push_back(&f);
  // The vectorizer lists the vector versions it declares as used, to keep them until it calls
  // them; after inlining nothing may refer to them.
  llvm::removeFromUsedLists(module,
                            [&](llvm::Constant *c) { return llvm::is_contained(declared, c); });
  for (llvm::Function *f : declared) {
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", f));
    // Contracted into FMAs as the kernels' own arithmetic is; the error bounds hold either way.
    llvm::FastMathFlags contract;
    contract.setAllowContract(true);
    b.setFastMathFlags(contract);
    llvm::Value *x = f->getArg(0);
    llvm::Value *e = target.avx512 && hasLanes(x->getType(), 16) ? expAvx512(b, x)
                     : target.avx2 && hasLanes(x->getType(), 8)  ? expAvx2(b, x)
                                                                 : expPortable(b, x);
    b.CreateRet(e);
    f->setLinkage(llvm::GlobalValue::InternalLinkage);
    f->removeDeadConstantUsers(); // the old used lists
    std::vector<llvm::CallBase *> calls;
    for (llvm::User *user : f->users())
      calls.push_back(llvm::cast<llvm::CallBase>(user));
    for (llvm::CallBase *call : calls) {
      llvm::InlineFunctionInfo info;
      llvm::InlineResult inlined = llvm::InlineFunction(*call, info);
      if (!inlined.isSuccess())
        internalError(
            fmt::format("inlining {}: {}", f->getName().str(), inlined.getFailureReason()));
    }
    f->eraseFromParent();
  }
}

} // namespace frank
