// Source locations and user-facing errors: every error carries `file:line:col`, the source line
// and a caret.
#pragma once

#include "frank/Tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>

namespace frank {

/// A loaded source text. Locations point into it, so it outlives the IR built from it.
struct SourceFile {
  std::string name;
  std::string text;
};

struct Location {
  std::shared_ptr<const SourceFile> file;
  uint32_t line = 0; // 1-based; 0 means unknown
  uint32_t col = 0;
  /// The call an inlined op came from (its own caller, for calls inlined in turn), if any.
  std::shared_ptr<const Location> caller;

  bool known() const { return file && line > 0; }
  /// "file:line:col"
  std::string str() const;
};

/// Formats `file:line:col: error: message`, then the source line and a caret under the column,
/// then a note with its own line and caret for each call the op was inlined from.
std::string formatDiagnostic(const Location &loc, std::string_view severity,
                             std::string_view message);

/// Throws a frank::Error for a user error at `loc`.
[[noreturn]] void fail(const Location &loc, const std::string &message);

template <class... Args>
[[noreturn]] void failf(const Location &loc, fmt::format_string<Args...> format, Args &&...args) {
  fail(loc, fmt::format(format, std::forward<Args>(args)...));
}

/// The message of an error thrown without a location ("error: ..."), without that prefix: for
/// reporting it at the source location it concerns.
std::string unlocatedMessage(const Error &e);

/// A bug in frank-jit itself, never the user's input: throws frank::InternalError, worded so that
/// it is visibly different from a user error.
[[noreturn]] void internalError(const std::string &message);

} // namespace frank
