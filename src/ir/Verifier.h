// \file Structural checks on tensor IR that need no shapes: terminators, map arity, region
// arguments, where each op may appear. Shape agreement is checked at specialization.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Throws frank::Error at the first violation.
void verifyModule(const ModuleOp &module);
void verifyFunction(const FuncOp &function);

} // namespace frank
