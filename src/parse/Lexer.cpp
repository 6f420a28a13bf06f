// The lexer: bytes to tokens with locations.
#include "parse/Lexer.h"

#include <algorithm>
#include <cctype>

namespace frank {

const char *tokName(Tok kind) {
  switch (kind) {
  case Tok::Eof: return "end of file";
  case Tok::BareId: return "identifier";
  case Tok::PercentId: return "SSA value";
  case Tok::AtId: return "symbol";
  case Tok::CaretId: return "block label";
  case Tok::HashId: return "attribute alias";
  case Tok::BangId: return "type alias";
  case Tok::Integer: return "integer";
  case Tok::Float: return "float";
  case Tok::String: return "string";
  case Tok::LParen: return "'('";
  case Tok::RParen: return "')'";
  case Tok::LBrace: return "'{'";
  case Tok::RBrace: return "'}'";
  case Tok::LSquare: return "'['";
  case Tok::RSquare: return "']'";
  case Tok::Less: return "'<'";
  case Tok::Greater: return "'>'";
  case Tok::Comma: return "','";
  case Tok::Colon: return "':'";
  case Tok::Equal: return "'='";
  case Tok::Arrow: return "'->'";
  case Tok::Question: return "'?'";
  case Tok::Star: return "'*'";
  case Tok::Plus: return "'+'";
  case Tok::Minus: return "'-'";
  }
  return "token";
}

Lexer::Lexer(std::shared_ptr<const SourceFile> file) : file_(std::move(file)), text_(file_->text) {
  // A UTF-8 byte order mark, as some editors write, is no token; columns count after it.
  if (text_.substr(0, 3) == "\xEF\xBB\xBF")
    pos_ = 3;
}

char Lexer::peekChar(size_t ahead) const {
  return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
}

void Lexer::advance() {
  if (text_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

Location Lexer::locationOf(const Token &tok) const { return {file_, tok.line, tok.col}; }

void Lexer::failHere(const std::string &message) { fail({file_, line_, col_}, message); }

void Lexer::skipWhitespace() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == '/' && peekChar(1) == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n')
        advance();
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      advance();
    } else {
      return;
    }
  }
}

void Lexer::rewindTo(const Token &tok) {
  pos_ = tok.offset;
  line_ = tok.line;
  col_ = tok.col;
}

static bool isIdStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
static bool isIdChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}
static bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

std::vector<int64_t> Lexer::scanDims() {
  skipWhitespace();
  std::vector<int64_t> dims;
  while (true) {
    size_t save = pos_;
    uint32_t saveLine = line_, saveCol = col_;
    int64_t dim;
    if (peekChar() == '?') {
      advance();
      dim = -1;
    } else if (isDigit(peekChar())) {
      dim = 0;
      while (isDigit(peekChar())) {
        if (dim > (int64_t{1} << 50))
          failHere("tensor dimension is too large");
        dim = dim * 10 + (peekChar() - '0');
        advance();
      }
    } else {
      return dims;
    }
    skipWhitespace(); // `? x ? x f32` is a dim list too, as MLIR reads it
    if (peekChar() != 'x') {
      // A bare number is not a dim (the element type must follow the last 'x').
      pos_ = save;
      line_ = saveLine;
      col_ = saveCol;
      return dims;
    }
    advance();
    skipWhitespace();
    dims.push_back(dim);
  }
}

Token Lexer::next() {
  skipWhitespace();
  Token tok;
  tok.offset = pos_;
  tok.line = line_;
  tok.col = col_;
  if (pos_ >= text_.size()) {
    tok.kind = Tok::Eof;
    return tok;
  }
  size_t start = pos_;
  char c = text_[pos_];
  auto finish = [&](Tok kind, size_t skipPrefix = 0, size_t skipSuffix = 0) {
    tok.kind = kind;
    tok.text = text_.substr(start + skipPrefix, pos_ - start - skipPrefix - skipSuffix);
    return tok;
  };
  auto single = [&](Tok kind) {
    advance();
    return finish(kind);
  };
  switch (c) {
  case '(': return single(Tok::LParen);
  case ')': return single(Tok::RParen);
  case '{': return single(Tok::LBrace);
  case '}': return single(Tok::RBrace);
  case '[': return single(Tok::LSquare);
  case ']': return single(Tok::RSquare);
  case '<': return single(Tok::Less);
  case '>': return single(Tok::Greater);
  case ',': return single(Tok::Comma);
  case ':': return single(Tok::Colon);
  case '=': return single(Tok::Equal);
  case '?': return single(Tok::Question);
  case '*': return single(Tok::Star);
  case '+': return single(Tok::Plus);
  case '-':
    advance();
    if (peekChar() == '>') {
      advance();
      return finish(Tok::Arrow);
    }
    return finish(Tok::Minus);
  case '"': {
    advance();
    while (peekChar() != '"') {
      if (pos_ >= text_.size() || peekChar() == '\n')
        fail({file_, tok.line, tok.col}, "unterminated string");
      if (peekChar() == '\\') // an escape: `\"` does not end the string
        advance();
      if (pos_ >= text_.size() || peekChar() == '\n')
        fail({file_, tok.line, tok.col}, "unterminated string");
      advance();
    }
    advance();
    return finish(Tok::String, 1, 1);
  }
  case '%':
  case '@':
  case '^':
  case '#':
  case '!': {
    advance();
    char first = peekChar();
    if (c == '@' && first == '"') { // a quoted symbol, `@"model.f"`: the name is the string's
      advance();
      while (peekChar() != '"') {
        if (pos_ >= text_.size() || peekChar() == '\n' || peekChar() == '\\')
          fail({file_, tok.line, tok.col}, "unterminated or escaped quoted symbol name");
        advance();
      }
      advance();
      if (pos_ - start == 3)
        fail({file_, tok.line, tok.col}, "empty symbol name");
      return finish(Tok::AtId, 2, 1);
    }
    bool ok = c == '%' ? (isIdChar(first) || first == '-' || first == '$')
                       : (isIdStart(first) || first == '$' || (c == '^' && isDigit(first)));
    if (c == '%' && isDigit(first)) {
      while (isDigit(peekChar()))
        advance();
    } else if (ok) {
      while (isIdChar(peekChar()) || (c == '%' && peekChar() == '-'))
        advance();
    } else {
      fail({file_, tok.line, tok.col}, fmt::format("expected an identifier after '{}'", c));
    }
    if (c == '%' && peekChar() == '#' && isDigit(peekChar(1))) {
      advance();
      while (isDigit(peekChar()))
        advance();
    }
    Tok kind = c == '%'   ? Tok::PercentId
               : c == '@' ? Tok::AtId
               : c == '^' ? Tok::CaretId
               : c == '#' ? Tok::HashId
                          : Tok::BangId;
    return finish(kind, 1);
  }
  default: break;
  }
  if (isDigit(c)) {
    if (c == '0' && (peekChar(1) == 'x' || peekChar(1) == 'X') &&
        std::isxdigit(static_cast<unsigned char>(peekChar(2)))) {
      advance();
      advance();
      while (std::isxdigit(static_cast<unsigned char>(peekChar())))
        advance();
      return finish(Tok::Integer);
    }
    while (isDigit(peekChar()))
      advance();
    bool isFloat = false;
    if (peekChar() == '.' && isDigit(peekChar(1))) {
      isFloat = true;
      advance();
      while (isDigit(peekChar()))
        advance();
    } else if (peekChar() == '.') {
      isFloat = true;
      advance();
    }
    if ((peekChar() == 'e' || peekChar() == 'E') &&
        (isDigit(peekChar(1)) ||
         ((peekChar(1) == '+' || peekChar(1) == '-') && isDigit(peekChar(2))))) {
      isFloat = true;
      advance();
      if (peekChar() == '+' || peekChar() == '-')
        advance();
      while (isDigit(peekChar()))
        advance();
    }
    return finish(isFloat ? Tok::Float : Tok::Integer);
  }
  if (isIdStart(c)) {
    while (isIdChar(peekChar()))
      advance();
    return finish(Tok::BareId);
  }
  // A byte that does not print (a NUL would end the message) is named by its value.
  const auto byte = static_cast<unsigned char>(c);
  failHere(byte < 0x20 || byte == 0x7f ? fmt::format("unexpected byte 0x{:02x}", byte)
                                       : fmt::format("unexpected character '{}'", c));
}

} // namespace frank
