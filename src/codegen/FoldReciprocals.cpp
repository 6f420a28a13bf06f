// x * (1 / d) as x / d (see FoldReciprocals.h).
#include "codegen/FoldReciprocals.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/InstrTypes.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

#include <vector>

namespace frank {

void foldReciprocalProducts(llvm::Module &module) {
  std::vector<llvm::Instruction *> products;
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &inst : bb)
        if (inst.getOpcode() == llvm::Instruction::FMul && inst.hasAllowContract())
          products.push_back(&inst);
  for (llvm::Instruction *mul : products)
    for (unsigned side = 0; side < 2; ++side) {
      auto *div = llvm::dyn_cast<llvm::Instruction>(mul->getOperand(side));
      auto *one = div && div->getOpcode() == llvm::Instruction::FDiv
                      ? llvm::dyn_cast<llvm::ConstantFP>(div->getOperand(0))
                      : nullptr;
      // A reciprocal computed in another block was hoisted out of a loop on purpose
      // (loops/ReciprocalDivisors.h).
      if (!one || !one->isExactlyValue(1.0) || !div->hasOneUse() || !div->hasAllowContract() ||
          div->getParent() != mul->getParent())
        continue;
      auto *quotient =
          llvm::BinaryOperator::CreateFDiv(mul->getOperand(1 - side), div->getOperand(1), "", mul);
      quotient->copyFastMathFlags(mul);
      quotient->takeName(mul);
      mul->replaceAllUsesWith(quotient);
      mul->eraseFromParent();
      div->eraseFromParent();
      break;
    }
}

} // namespace frank
