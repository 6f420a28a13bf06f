// \file Cold code: the functions of a kernel that do almost none of its work (the MoE block's
// router, softmax and top-k beside its expert projections) compile with the code generator's
// quick path. The optimizer treats them as it does the rest; after it, they are `optnone`, for
// which instruction selection is LLVM's fast one and most machine passes are skipped: half the
// machine code time for them, on code that runs a few microseconds a call.
//
// Codegen estimates each function's work: the statements it runs per kernel call, by the loop
// IR's trip counts (`markColdFunctions`). The lightest functions that together do at most
// kColdShare of the kernel's work are marked "frank-cold". A function that inlines one that is
// not cold (a chunk its body, a caller a nest in its part) is not cold either
// (`settleColdFunctions`, before optimizing).
#pragma once

#include <map>

namespace llvm {
class Function;
class Module;
} // namespace llvm

namespace frank {

/// At most this share of a kernel's estimated work is cold: if its cold code ran at half the
/// speed, the kernel would take at most 1% longer.
constexpr double kColdShare = 0.01;

/// Marks "frank-cold" the lightest functions by `work` (statements run per kernel call) whose
/// work adds up to at most kColdShare of the total.
void markColdFunctions(const std::map<llvm::Function *, double> &work);

/// Unmarks every function that calls a function marked always-inline that is not cold, until
/// none does: what they become after inlining does work that is not cold.
void settleColdFunctions(llvm::Module &module);

/// The functions still marked, after optimization: `optnone`, for the code generator's quick
/// path.
void compileColdFunctionsQuickly(llvm::Module &module);

/// Whether `f` is marked cold.
bool isCold(const llvm::Function &f);

} // namespace frank
