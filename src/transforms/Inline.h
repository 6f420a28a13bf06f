// \file Inlining: calls to functions of the same module, and `flow.dispatch.region` bodies,
// are spliced into their caller so later passes see one flat function.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Inlines every `util.call` in `fn` (recursively), resolving callees in `module`. Recursion and
/// calls to unresolved external declarations are errors at the call or declaration.
void inlineCalls(FuncOp &fn, const ModuleOp &module);

/// Replaces each `flow.dispatch.region` by its body. The region is a fusion hint; fusion
/// decides on its own whether to honour it.
void inlineDispatchRegions(FuncOp &fn);

} // namespace frank
