// 16-bit float sign operations and bf16 moves through integer ones (see SixteenBitFloatBits.h).
#include "codegen/SixteenBitFloatBits.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include <vector>

namespace frank {

namespace {

// The bits of 16-bit float value `v` (of type `bitsType`, i16 or a vector of them): those it was
// cast from, when it was (the code generator would round a bf16 cast through f32 and back).
llvm::Value *bitsOf(llvm::IRBuilder<> &b, llvm::Value *v, llvm::Type *bitsType) {
  if (auto *cast = llvm::dyn_cast<llvm::BitCastInst>(v))
    if (cast->getSrcTy() == bitsType)
      return cast->getOperand(0);
  return b.CreateBitCast(v, bitsType);
}

// A phi of bf16 values as a phi of their bits: the code generator keeps a bf16 phi in an f32
// register and rounds what flows into it (a reduction's accumulator), each round a call.
void phiOfBits(llvm::PHINode *phi) {
  llvm::Type *bitsType = phi->getType()->getWithNewType(llvm::Type::getInt16Ty(phi->getContext()));
  auto *bits = llvm::PHINode::Create(bitsType, phi->getNumIncomingValues(), phi->getName(), phi);
  for (unsigned i = 0; i < phi->getNumIncomingValues(); ++i) {
    llvm::IRBuilder<> b(phi->getIncomingBlock(i)->getTerminator());
    bits->addIncoming(bitsOf(b, phi->getIncomingValue(i), bitsType), phi->getIncomingBlock(i));
  }
  llvm::IRBuilder<> b(phi->getParent(), phi->getParent()->getFirstInsertionPt());
  phi->replaceAllUsesWith(b.CreateBitCast(bits, phi->getType()));
  phi->eraseFromParent();
}

} // namespace

void lowerSixteenBitFloatBits(llvm::Module &module) {
  std::vector<llvm::Instruction *> signOps;
  std::vector<llvm::PHINode *> phis;
  std::vector<llvm::LoadInst *> loads;
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &inst : bb) {
        llvm::Type *scalar = inst.getType()->getScalarType();
        if (!scalar->isBFloatTy() && !scalar->isHalfTy())
          continue;
        auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst);
        if (inst.getOpcode() == llvm::Instruction::FNeg ||
            (call && (call->getIntrinsicID() == llvm::Intrinsic::fabs ||
                      call->getIntrinsicID() == llvm::Intrinsic::copysign)))
          signOps.push_back(&inst);
        else if (!scalar->isBFloatTy())
          continue;
        else if (auto *phi = llvm::dyn_cast<llvm::PHINode>(&inst))
          phis.push_back(phi);
        else if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst))
          loads.push_back(load);
        else if (llvm::isa<llvm::SelectInst, llvm::ShuffleVectorInst, llvm::ExtractElementInst>(
                     &inst))
          signOps.push_back(&inst);
      }
  // Loads of bits, cast to bf16 where bf16 is wanted (a bf16 load's value, used as bits, had been
  // rounded from the f32 register it was loaded into).
  for (llvm::LoadInst *load : loads) {
    llvm::IRBuilder<> b(load);
    llvm::Type *type = load->getType();
    llvm::LoadInst *bits =
        b.CreateAlignedLoad(type->getWithNewType(b.getInt16Ty()), load->getPointerOperand(),
                            load->getAlign(), load->isVolatile(), load->getName());
    bits->copyMetadata(*load);
    load->replaceAllUsesWith(b.CreateBitCast(bits, type));
    load->eraseFromParent();
  }
  for (llvm::Instruction *inst : signOps) {
    llvm::IRBuilder<> b(inst);
    llvm::Type *type = inst->getType();
    llvm::Type *bitsType = type->getWithNewType(b.getInt16Ty());
    auto bits = [&](llvm::Value *v) { return frank::bitsOf(b, v, bitsType); };
    auto mask = [&](uint16_t m) { return llvm::ConstantInt::get(bitsType, m); };
    if (llvm::isa<llvm::SelectInst, llvm::ShuffleVectorInst, llvm::ExtractElementInst>(inst)) {
      // Moves of lanes: the same moves of their bits.
      llvm::Value *moved;
      if (auto *select = llvm::dyn_cast<llvm::SelectInst>(inst)) {
        moved = b.CreateSelect(select->getCondition(), bits(select->getTrueValue()),
                               bits(select->getFalseValue()));
      } else if (auto *shuffle = llvm::dyn_cast<llvm::ShuffleVectorInst>(inst)) {
        llvm::Type *sourceBits = shuffle->getOperand(0)->getType()->getWithNewType(b.getInt16Ty());
        moved = b.CreateShuffleVector(frank::bitsOf(b, shuffle->getOperand(0), sourceBits),
                                      frank::bitsOf(b, shuffle->getOperand(1), sourceBits),
                                      shuffle->getShuffleMask());
      } else {
        llvm::Value *vector = inst->getOperand(0);
        moved = b.CreateExtractElement(
            frank::bitsOf(b, vector, vector->getType()->getWithNewType(b.getInt16Ty())),
            inst->getOperand(1));
      }
      inst->replaceAllUsesWith(b.CreateBitCast(moved, type));
      inst->eraseFromParent();
      continue;
    }
    llvm::Value *operand = bits(inst->getOperand(0));
    llvm::Value *result;
    if (inst->getOpcode() == llvm::Instruction::FNeg) {
      result = b.CreateXor(operand, mask(0x8000));
    } else if (llvm::cast<llvm::IntrinsicInst>(inst)->getIntrinsicID() == llvm::Intrinsic::fabs) {
      result = b.CreateAnd(operand, mask(0x7fff));
    } else { // copysign(magnitude, sign)
      result = b.CreateOr(b.CreateAnd(operand, mask(0x7fff)),
                          b.CreateAnd(bits(inst->getOperand(1)), mask(0x8000)));
    }
    inst->replaceAllUsesWith(b.CreateBitCast(result, type));
    inst->eraseFromParent();
  }
  // Last, so that what flows in is bits where it can be.
  for (llvm::PHINode *phi : phis)
    phiOfBits(phi);
  // bf16 values stored as their bits (a store of a bf16 value held in an f32 register rounds it),
  // and bits cast to bf16 and back as they were.
  std::vector<llvm::Instruction *> casts;
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &inst : bb) {
        if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
          llvm::Type *type = store->getValueOperand()->getType();
          if (type->getScalarType()->isBFloatTy()) {
            llvm::IRBuilder<> b(store);
            store->setOperand(
                0, bitsOf(b, store->getValueOperand(), type->getWithNewType(b.getInt16Ty())));
          }
        } else if (llvm::isa<llvm::BitCastInst>(&inst)) {
          casts.push_back(&inst);
        }
      }
  for (llvm::Instruction *cast : casts)
    if (auto *from = llvm::dyn_cast<llvm::BitCastInst>(cast->getOperand(0));
        from && from->getSrcTy() == cast->getType() &&
        from->getDestTy()->getScalarType()->isBFloatTy())
      cast->replaceAllUsesWith(from->getOperand(0));
}

} // namespace frank
