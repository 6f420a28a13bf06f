// \file Shape specialization: binds every argument's concrete shape (and the values of index,
// integer and i1 arguments) so that every tensor type becomes static, except the dims the caller
// keeps as runtime values (partial specialization: `?` in the argument's type).
//
// Algorithm, in one forward walk over the function body:
//  1. Argument types become the given types; integer arguments with values become
//     `arith.constant`s.
//  2. `tensor.dim` of a static dim folds to a constant; integer arithmetic and casts whose
//     operands are constants fold (division by zero is an error at the op).
//  3. `tensor.empty`, reshapes and slices take their sizes from constants (a negative one is an
//     error); a size that depends on a runtime dim stays dynamic. Fill and generic results take
//     their `outs` type.
//  4. Each `linalg.generic` checks that all static operand dims mapped to one loop dim agree,
//     naming both operands and sizes: the error a wrong weight shape produces. Runtime dims are
//     checked by the kernel when it is called.
//  5. Dead scalar ops are removed; the result types are refined.
#pragma once

#include "Signature.h"

#include <string>
#include <vector>

namespace frank {

/// Returns the specialized copy of `fn`. `explain`, if given, receives one line per argument
/// saying what was baked in.
std::unique_ptr<FuncOp> specialize(const FuncOp &fn, const std::vector<ArgSpec> &args,
                                   std::vector<std::string> *explain = nullptr);

/// Generic mode's counterpart: binds only the i1 arguments (flags are specialization keys in
/// both modes) and folds the branches they decide, leaving every shape dynamic.
std::unique_ptr<FuncOp> bindFlags(const FuncOp &fn, const std::vector<ArgSpec> &args);

/// Why an `scf.if` outside a linalg body whose condition is not a constant cannot compile.
inline constexpr const char *kUnknownBranchError =
    "unsupported: 'scf.if' outside a linalg body whose condition is not known when the kernel is "
    "compiled (only i1 arguments and constants decide such branches)";

/// For each loop dim of a generic, the (operand, operand dim) pairs that index it alone.
std::vector<std::vector<std::pair<int, int>>> loopDimSources(const Op &generic);

/// A description like "operand #2 (%weight) dim 0" for messages.
std::string describeOperandDim(const Op &op, int operand, int dim);

/// Removes scalar, `tensor.dim`, `tensor.empty` and `tensor.collapse_shape` ops, and generics of
/// no tensor inputs that cannot stop the kernel, whose results are unused.
void removeDeadOps(Block &block);

} // namespace frank
