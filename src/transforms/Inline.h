// \file Inlining: calls to functions of the same module, and `flow.dispatch.region` bodies,
// are spliced into their caller so later passes see one flat function.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Checks every `util.call` of `module`'s functions: its callee is defined, takes the call's
/// argument types and returns its result types, and no chain of calls comes back to a function
/// it started from. A module of linked files is checked whole, as a verifier checks calls.
void checkCalls(const ModuleOp &module);

/// Inlines every `util.call` in `fn` (recursively), resolving callees in `module`. Recursion and
/// calls to unresolved external declarations are errors at the call or declaration.
void inlineCalls(FuncOp &fn, const ModuleOp &module);

/// Replaces each `flow.dispatch.region` by its body. The region is a fusion hint; fusion
/// decides on its own whether to honour it.
void inlineDispatchRegions(FuncOp &fn);

} // namespace frank
