// Horizontal float maxima and minima through integer ones (see MaximumReductions.h).
#include "codegen/MaximumReductions.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include <vector>

namespace frank {
namespace {

// `bits` with the low bits of negative values flipped (an involution): signed integer order is
// then the float order of non-NaN values.
llvm::Value *orderedBits(llvm::IRBuilder<> &b, llvm::Value *bits) {
  const unsigned width = bits->getType()->getScalarSizeInBits();
  return b.CreateXor(bits, b.CreateLShr(b.CreateAShr(bits, width - 1), 1));
}

} // namespace

void lowerMaximumReductions(llvm::Module &module) {
  std::vector<llvm::IntrinsicInst *> reductions;
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &inst : bb)
        if (auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst))
          if (call->getIntrinsicID() == llvm::Intrinsic::vector_reduce_fmaximum ||
              call->getIntrinsicID() == llvm::Intrinsic::vector_reduce_fminimum)
            reductions.push_back(call);
  for (llvm::IntrinsicInst *call : reductions) {
    llvm::Value *vector = call->getArgOperand(0);
    auto *type = llvm::dyn_cast<llvm::FixedVectorType>(vector->getType());
    if (!type || !(type->getElementType()->isFloatTy() || type->getElementType()->isDoubleTy()))
      continue;
    llvm::IRBuilder<> b(call);
    llvm::Type *scalar = type->getElementType();
    llvm::Type *intType = b.getIntNTy(scalar->getPrimitiveSizeInBits());
    llvm::Value *keys = orderedBits(
        b, b.CreateBitCast(vector, llvm::FixedVectorType::get(intType, type->getNumElements())));
    const bool maximum = call->getIntrinsicID() == llvm::Intrinsic::vector_reduce_fmaximum;
    llvm::Value *key = maximum ? b.CreateIntMaxReduce(keys, /*IsSigned=*/true)
                               : b.CreateIntMinReduce(keys, /*IsSigned=*/true);
    llvm::Value *result = b.CreateBitCast(orderedBits(b, key), scalar);
    llvm::Value *anyNaN = b.CreateOrReduce(b.CreateFCmpUNO(vector, vector));
    result = b.CreateSelect(anyNaN, llvm::ConstantFP::getQNaN(scalar), result);
    llvm::Function *declaration = call->getCalledFunction();
    call->replaceAllUsesWith(result);
    call->eraseFromParent();
    if (declaration->use_empty())
      declaration->eraseFromParent();
  }
}

} // namespace frank
