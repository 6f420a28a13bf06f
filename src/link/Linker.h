// \file Linking with iree-link semantics.
//
// A module that needs another module's function declares it as
// `util.func private @M.f(types) -> types`; M is a module *symbol* (`module @M`), never a file
// name. Linking binds each declaration to the public function `f` of module `M`, checks that the
// declared types equal the definition's exactly, and imports the definition under its qualified
// name `M.f`, together with what it needs in turn (its own declarations, resolved depth first,
// and the private helpers of M it calls, renamed `M.g`). Only reachable functions are imported.
//
// Where modules come from, in order: explicit files, then `.mlir` files under the search paths
// (indexed by module symbol; a file is parsed only when its module is needed). A symbol defined
// by two candidate files is an error naming both.
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace frank {

struct LinkSources {
  std::vector<std::string> files;
  std::vector<std::string> searchPaths;
};

/// Resolves every external declaration of `main` in place. Errors name the declaration and, for
/// mismatches and duplicates, both sides.
void linkModule(ModuleOp &main, const LinkSources &sources);

} // namespace frank
