// Error formatting shared by every stage.
#include "ir/Diagnostics.h"

#include <algorithm>

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
  text = text.substr(0, text.find('\n'));
  if (text.ends_with('\r'))
    text.remove_suffix(1);
  if (line == 1 && text.starts_with("\xEF\xBB\xBF")) // a byte order mark, which columns skip
    text.remove_prefix(3);
  return text;
}

// At most this many characters of a source line are shown, around the column: a 14 MB line of
// dense elements had been printed whole.
constexpr size_t kShownLineChars = 1000;

std::string formatDiagnostic(const Location &loc, std::string_view severity,
                             std::string_view message) {
  std::string out = fmt::format("{}: {}: {}", loc.str(), severity, message);
  std::string_view line = loc.known() ? sourceLine(*loc.file, loc.line) : std::string_view();
  if (!line.empty()) {
    size_t column = std::min<size_t>(loc.col, line.size() + 1) - 1; // of the caret, from 0
    std::string before, after;
    if (line.size() > kShownLineChars) {
      const size_t first = column > kShownLineChars / 2 ? column - kShownLineChars / 2 : 0;
      if (first > 0)
        before = "...";
      if (first + kShownLineChars < line.size())
        after = "...";
      line = line.substr(first, kShownLineChars);
      column -= first;
    }
    std::string caret(before.size(), ' ');
    for (size_t i = 0; i < column; ++i)
      caret += line[i] == '\t' ? '\t' : ' ';
    // Control characters shown as '?': a NUL had cut the message short, an escape would move
    // the terminal's cursor.
    std::string shown(line);
    for (size_t i = 0; i < shown.size(); ++i) {
      const auto byte = static_cast<unsigned char>(shown[i]);
      if ((byte < 0x20 && byte != '\t') || byte == 0x7f)
        shown[i] = '?';
      // A C1 control character in UTF-8 (U+0080 to U+009F: CSI is U+009B).
      const bool c1 = byte == 0xc2 && i + 1 < shown.size() &&
                      static_cast<unsigned char>(shown[i + 1]) >= 0x80 &&
                      static_cast<unsigned char>(shown[i + 1]) <= 0x9f;
      if (c1)
        shown[i] = shown[i + 1] = '?';
    }
    out += fmt::format("\n{}{}{}\n{}^", before, shown, after, caret);
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
