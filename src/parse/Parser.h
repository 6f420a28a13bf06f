// \file Parses MLIR text in the frank-jit subset into tensor IR. Type agreement between
// annotations and values is checked here; structural rules are the verifier's.
#pragma once

#include "ir/IR.h"

namespace frank {

/// Parses one file (a `module` or a bare list of functions). Throws frank::Error with
/// `file:line:col: error: ...` on malformed or unsupported text.
std::unique_ptr<ModuleOp> parseModule(std::shared_ptr<const SourceFile> file);

/// Convenience: reads `path` then parses it.
std::unique_ptr<ModuleOp> parseFile(const std::string &path);
std::unique_ptr<ModuleOp> parseString(const std::string &text, const std::string &name);

} // namespace frank
