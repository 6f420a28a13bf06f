// \file Prints tensor IR as MLIR text that the parser reads back to the same IR.
#pragma once

#include "ir/IR.h"

#include <string>

namespace frank {

std::string printModule(const ModuleOp &module);
std::string printFunction(const FuncOp &function);

} // namespace frank
