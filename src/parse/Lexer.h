// Tokens of MLIR's textual syntax, each with its location. `//` comments are whitespace
// everywhere.
#pragma once

#include "ir/Diagnostics.h"

#include <memory>
#include <string_view>
#include <vector>

namespace frank {

enum class Tok : uint8_t {
  Eof,
  BareId,    // arith.addf, f32, d0, affine_map
  PercentId, // %x, %0, %r#1 (text without '%')
  AtId,      // @module.fn (text without '@')
  CaretId,   // ^bb0
  HashId,    // #map
  BangId,    // !alias, !util.list (text without '!')
  Integer,   // 42, 0x1F
  Float,     // 1.0, 1.0e-5
  String,    // "parallel" (text without quotes)
  LParen,
  RParen,
  LBrace,
  RBrace,
  LSquare,
  RSquare,
  Less,
  Greater,
  Comma,
  Colon,
  Equal,
  Arrow,
  Question,
  Star,
  Plus,
  Minus,
};

const char *tokName(Tok kind);

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text;
  size_t offset = 0;
  uint32_t line = 1, col = 1;
};

class Lexer {
public:
  explicit Lexer(std::shared_ptr<const SourceFile> file);

  Token next();
  /// Restarts lexing at a byte offset (the start of a token already returned).
  void rewindTo(const Token &tok);
  /// Reads `(?|[0-9]+)x` repeatedly at the current position: the dims of a tensor type, which
  /// MLIR lexes without separators (`?x4x?xf32`).
  std::vector<int64_t> scanDims();
  Location locationOf(const Token &tok) const;
  const std::shared_ptr<const SourceFile> &file() const { return file_; }

private:
  void skipWhitespace();
  char peekChar(size_t ahead = 0) const;
  void advance();
  [[noreturn]] void failHere(const std::string &message);

  std::shared_ptr<const SourceFile> file_;
  std::string_view text_;
  size_t pos_ = 0;
  uint32_t line_ = 1, col_ = 1;
};

} // namespace frank
