// Error formatting shared by every stage.
#include "ir/Diagnostics.h"

namespace frank {

std::string Location::str() const {
  if (!file)
    return "<unknown>";
  return fmt::format("{}:{}:{}", file->name, line, col);
}

static std::string_view sourceLine(const SourceFile &file, uint32_t line) {
  std::string_view text = file.text;
  for (uint32_t i = 1; i < line; ++i) {
    size_t next = text.find('\n');
    if (next == std::string_view::npos)
      return {};
    text.remove_prefix(next + 1);
  }
  return text.substr(0, text.find('\n'));
}

std::string formatDiagnostic(const Location &loc, std::string_view severity,
                             std::string_view message) {
  std::string out = fmt::format("{}: {}: {}", loc.str(), severity, message);
  std::string_view line = loc.known() ? sourceLine(*loc.file, loc.line) : std::string_view();
  if (!line.empty()) {
    std::string caret;
    for (uint32_t i = 1; i < loc.col && i <= line.size(); ++i)
      caret += line[i - 1] == '\t' ? '\t' : ' ';
    out += fmt::format("\n{}\n{}^", line, caret);
  }
  if (loc.caller)
    out += "\n" + formatDiagnostic(*loc.caller, "note", "in the function called here");
  return out;
}

void fail(const Location &loc, const std::string &message) {
  throw Error(formatDiagnostic(loc, "error", message));
}

std::string unlocatedMessage(const Error &e) {
  std::string_view message = e.what();
  if (message.starts_with("error: "))
    message.remove_prefix(7);
  return std::string(message);
}

void internalError(const std::string &message) {
  throw InternalError("internal compiler error (a bug in frank-jit, please report it): " + message);
}

} // namespace frank
