// The recursive-descent parser: MLIR custom assembly forms of the subset's ops.
#include "parse/Parser.h"
#include "ir/Builder.h"
#include "ir/Ops.h"
#include "loops/Strategy.h"
#include "parse/FloatLiterals.h"
#include "parse/Lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

namespace frank {
namespace {

constexpr int kMaxNesting = 256;

class Parser {
public:
  explicit Parser(std::shared_ptr<const SourceFile> file) : lex_(file) { cur_ = lex_.next(); }

  std::unique_ptr<ModuleOp> parseTopLevel();

private:
  // Token helpers.
  Token take() {
    Token t = cur_;
    cur_ = lex_.next();
    return t;
  }
  bool at(Tok kind) const { return cur_.kind == kind; }
  bool atKeyword(std::string_view word) const { return at(Tok::BareId) && cur_.text == word; }
  bool consumeIf(Tok kind) {
    if (!at(kind))
      return false;
    take();
    return true;
  }
  bool consumeKeyword(std::string_view word) {
    if (!atKeyword(word))
      return false;
    take();
    return true;
  }
  Token expect(Tok kind, std::string_view context) {
    if (!at(kind)) {
      failOnAttributeDictionary();
      failAt(cur_, fmt::format("expected {} {}, found {}", tokName(kind), context, describe(cur_)));
    }
    return take();
  }
  void expectKeyword(std::string_view word, std::string_view context) {
    if (!consumeKeyword(word)) {
      failOnAttributeDictionary();
      failAt(cur_, fmt::format("expected '{}' {}, found {}", word, context, describe(cur_)));
    }
  }
  // A '{' where an op's syntax has none: the attribute dictionary MLIR's printers and
  // importers add (`{torch.debug_name = "x"}`), which the subset does not take.
  // Ops with a region take '{' for it, and a part missing before it is reported as such.
  void failOnAttributeDictionary() {
    if (at(Tok::LBrace) && !opName_.empty() && !opTakesRegion_)
      failAt(cur_, fmt::format("unsupported attribute dictionary on '{}'", opName_));
  }
  // Whether the tokens from here define results (`%a = `, `%a, %b = `, `%p:2 = `): an op after
  // a terminator whose operands may be left out, not its operands.
  bool atResultDefinition() {
    const Token start = cur_;
    bool definition = false;
    while (at(Tok::PercentId)) {
      take();
      if (at(Tok::Equal) || (consumeIf(Tok::Colon) && at(Tok::Integer))) {
        definition = true;
        break;
      }
      if (!consumeIf(Tok::Comma))
        break;
    }
    lex_.rewindTo(start);
    cur_ = lex_.next();
    return definition;
  }
  static std::string describe(const Token &t) {
    if (t.kind == Tok::Eof)
      return "end of file";
    return fmt::format("'{}{}'", prefixOf(t.kind), t.text);
  }
  static const char *prefixOf(Tok kind) {
    switch (kind) {
    case Tok::PercentId: return "%";
    case Tok::AtId: return "@";
    case Tok::CaretId: return "^";
    case Tok::HashId: return "#";
    case Tok::BangId: return "!";
    default: return "";
    }
  }
  Location loc(const Token &t) const { return lex_.locationOf(t); }
  [[noreturn]] void failAt(const Token &t, const std::string &message) { fail(loc(t), message); }
  void skipLoc() {
    if (!atKeyword("loc"))
      return;
    take();
    expect(Tok::LParen, "after 'loc'");
    int depth = 1;
    while (depth > 0) {
      if (at(Tok::Eof))
        failAt(cur_, "unterminated 'loc(' location");
      if (at(Tok::LParen))
        ++depth;
      if (at(Tok::RParen))
        --depth;
      if (at(Tok::HashId))
        locationUses_.push_back(cur_); // checked at the end: MLIR defines them after their uses
      take();
    }
  }

  // Types and attributes.
  Type parseType();
  Type parseTensorType(const Token &start);
  std::vector<Type> parseTypeList(); // T or (T, T) after '->'
  // `%a, %b, ...` as the op's operands (none when `allowNone` and at `)`, which it then closes),
  // then after ':' their types, `(Ta, Tb, ...)`: the operands' tokens and the types.
  std::pair<std::vector<Token>, std::vector<Type>> parseOperandsAndTypes(Op &op, bool allowNone,
                                                                         const std::string &what);
  AffineMap parseAffineMap();
  AffineMap parseMapAttr();
  Literal parseLiteral(const Type &type, const Token &at);
  Literal parseNumber(const Type &type);
  DenseAttr parseDense(const Token &start, Token *typeTokOut = nullptr);
  Type lastDenseType_;
  std::string_view opName_; // the op being parsed, as written (empty outside ops)
  bool opTakesRegion_ = false;
  std::vector<int64_t> parseDenseElements(std::vector<Token> &tokens);

  // Values and scopes.
  Value *parseOperand();
  Value *parseOperandOfType(const Type &type);
  void expectType(const Token &at, const Value *v, const Type &type);
  void define(const std::string &name, Value *value, const Token &at);
  Value *lookupValue(const Token &t);
  void pushScope() { scopes_.emplace_back(); }
  void popScope() { scopes_.pop_back(); }

  // Structure.
  std::unique_ptr<FuncOp> parseFunction();
  void parseBlockBody(Block &block, Tok end);
  void parseRegion(Op &op, bool withHeader, const std::vector<Type> *expectedArgs);
  void parseOp(Block &block);
  void parseOpBody(Op &op, const Token &nameTok, std::vector<Type> &resultTypes);
  void parseGenericAttrs(Op &op);
  AttrList parseIteratorTypes();
  std::string parseIteratorType();
  void skipAttributeValue();
  // At a `#alias` of attribute text (just taken as `use`): parses its text with `parse`, then
  // goes on after the use.
  void parseAliasText(const Token &use, const std::function<void()> &parse);
  // At a `#alias` of attribute text, `parse` of its text; elsewhere nothing.
  template <class T> std::optional<T> parseIfAlias(T (Parser::*parse)()) {
    if (!atTextAlias())
      return std::nullopt;
    T value;
    parseAliasText(take(), [&] { value = (this->*parse)(); });
    return value;
  }
  bool atTextAlias() const { return at(Tok::HashId) && textAliases_.count(std::string(cur_.text)); }
  void parseIndexingMaps(Op &op);
  AttrList parseMapList();
  void checkContractionMaps(const Op &op, const Token &at, int numDims);
  void parseConfigValue(Op &op);
  Token parseDimensionAttr(Op &op);
  AttrList parseIntList(const char *what);
  AttrList parseReassociation();
  void parseMixedList(Op &op, const char *attr, const char *what);
  void parseInsOuts(Op &op, bool requireIns);
  std::vector<Type> parseTypeListAfterArrow();
  void checkReassociation(const Token &at, const AttrList &groups, int64_t groupedRank,
                          int64_t otherRank, const Type &grouped, const Type &other);
  void parseOperandsWithTypes(Op &op, std::string_view keyword);
  void parseTerminatorOperands(Op &op);

  int64_t integerValue(const Token &t, int64_t max);

  Lexer lex_;
  Token cur_;
  std::map<std::string, Type> typeAliases_;
  std::map<std::string, Attribute> attrAliases_;
  // Aliases of other attributes (a trait dictionary, a list of iterator types or of maps): the
  // first token of their text, parsed where they are used, as if written there.
  std::map<std::string, Token> textAliases_;
  std::set<std::string> expanding_; // the text aliases being parsed, innermost last
  std::set<std::string> locationAliases_;
  std::vector<Token> locationUses_; // `#name` inside `loc(...)`
  std::vector<std::map<std::string, Value *>> scopes_;
  std::map<std::string, size_t> packSizes_; // visible pack names -> result count
  int depth_ = 0;
};

// ---- Types -------------------------------------------------------------------------------

bool scalarKindFromName(std::string_view name, ElemKind &kind) {
  static const std::pair<const char *, ElemKind> table[] = {
      {"f16", ElemKind::F16},    {"bf16", ElemKind::BF16}, {"f32", ElemKind::F32},
      {"f64", ElemKind::F64},    {"i1", ElemKind::I1},     {"i8", ElemKind::I8},
      {"i16", ElemKind::I16},    {"i32", ElemKind::I32},   {"i64", ElemKind::I64},
      {"index", ElemKind::Index}};
  for (auto &[n, k] : table)
    if (name == n) {
      kind = k;
      return true;
    }
  return false;
}

int64_t Parser::integerValue(const Token &t, int64_t max) {
  bool hex = t.text.size() > 2 && (t.text[1] == 'x' || t.text[1] == 'X');
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(t.text.data() + (hex ? 2 : 0), t.text.data() + t.text.size(),
                                   value, hex ? 16 : 10);
  if (ec != std::errc() || value > static_cast<uint64_t>(max))
    failAt(t, fmt::format("integer '{}' is out of range (at most {})", t.text, max));
  return static_cast<int64_t>(value);
}

Type Parser::parseType() {
  Token t = cur_;
  if (at(Tok::BangId)) {
    take();
    std::string name(t.text);
    auto alias = typeAliases_.find(name);
    if (alias != typeAliases_.end())
      return alias->second;
    if (name == "util.list") {
      expect(Tok::Less, "in '!util.list<?>'");
      expect(Tok::Question, "in '!util.list<?>'");
      expect(Tok::Greater, "in '!util.list<?>'");
      return Type::opaque("!util.list<?>");
    }
    if (name == "hal.buffer_view" || name == "hal.buffer" || name == "hal.device" ||
        name == "hal.allocator")
      return Type::opaque("!" + name);
    failAt(t, fmt::format("unknown type alias '!{}'", name));
  }
  if (!at(Tok::BareId))
    failAt(t, fmt::format("expected a type, found {}", describe(t)));
  take();
  ElemKind kind;
  if (scalarKindFromName(t.text, kind))
    return Type::scalar(kind);
  if (t.text == "tensor")
    return parseTensorType(t);
  failAt(t, fmt::format("unsupported type '{}'", t.text));
}

Type Parser::parseTensorType(const Token &start) {
  if (!at(Tok::Less))
    failAt(cur_, "expected '<' after 'tensor'");
  // The lexer stands just after '<'. Dims have no separators of their own, so scan them raw.
  std::vector<int64_t> dims = lex_.scanDims();
  cur_ = lex_.next();
  if (at(Tok::Star))
    failAt(cur_, "unsupported type: unranked tensors");
  Token elemTok = cur_;
  // Refused before parsing it: parsing tensor<tensor<...>> would recurse once per level.
  if (at(Tok::BareId) && elemTok.text == "tensor")
    failAt(elemTok, "tensor element type must be a scalar type, found a tensor type");
  Type elem = parseType();
  if (!elem.isScalar())
    failAt(elemTok,
           fmt::format("tensor element type must be a scalar type, found '{}'", elem.str()));
  if (at(Tok::Comma))
    failAt(cur_, "unsupported tensor encoding");
  expect(Tok::Greater, "to close the tensor type");
  if (dims.size() > 8)
    failAt(start, "unsupported tensor rank: at most 8 dims");
  return Type::tensor(elem.elem, std::move(dims));
}

std::vector<Type> Parser::parseTypeList() {
  std::vector<Type> types;
  if (consumeIf(Tok::LParen)) {
    if (consumeIf(Tok::RParen))
      return types;
    do {
      types.push_back(parseType());
      if (at(Tok::LBrace) && opName_.empty())
        failAt(cur_, "unsupported result attributes");
      skipLoc();
    } while (consumeIf(Tok::Comma));
    expect(Tok::RParen, "to close the type list");
    return types;
  }
  types.push_back(parseType());
  return types;
}

// ---- Attributes --------------------------------------------------------------------------

AffineMap Parser::parseAffineMap() {
  // affine_map<(d0, d1) -> (d1, 0)>
  expect(Tok::Less, "after 'affine_map'");
  expect(Tok::LParen, "to open the affine map's dims");
  std::vector<std::string> names;
  if (!at(Tok::RParen)) {
    do {
      Token d = expect(Tok::BareId, "as an affine map dim");
      for (auto &n : names)
        if (n == d.text)
          failAt(d, fmt::format("affine map dim '{}' is declared twice", d.text));
      names.emplace_back(d.text);
    } while (consumeIf(Tok::Comma));
  }
  expect(Tok::RParen, "to close the affine map's dims");
  if (at(Tok::LSquare))
    failAt(cur_, "unsupported affine map: symbols");
  expect(Tok::Arrow, "in the affine map");
  expect(Tok::LParen, "to open the affine map's results");
  AffineMap map;
  map.numDims = static_cast<int>(names.size());
  if (!at(Tok::RParen)) {
    do {
      Token r = cur_;
      AffineResult result;
      if (at(Tok::Integer)) {
        take();
        result.isConstant = true;
        result.value = integerValue(r, int64_t{1} << 40);
      } else if (at(Tok::Minus)) {
        failAt(r, "unsupported affine expression: negative constants");
      } else {
        Token d = expect(Tok::BareId, "as an affine map result");
        auto it = std::find(names.begin(), names.end(), d.text);
        if (it == names.end())
          failAt(d, fmt::format("use of undeclared affine map dim '{}'", d.text));
        result.value = it - names.begin();
      }
      if (at(Tok::Plus) || at(Tok::Minus) || at(Tok::Star) || atKeyword("floordiv") ||
          atKeyword("ceildiv") || atKeyword("mod"))
        failAt(cur_, fmt::format("unsupported affine expression: operator '{}'", cur_.text));
      map.results.push_back(result);
    } while (consumeIf(Tok::Comma));
  }
  expect(Tok::RParen, "to close the affine map's results");
  expect(Tok::Greater, "to close 'affine_map<'");
  return map;
}

AffineMap Parser::parseMapAttr() {
  Token t = cur_;
  if (auto map = parseIfAlias(&Parser::parseMapAttr)) // `#id2 = #id`
    return *map;
  if (consumeIf(Tok::HashId)) {
    auto it = attrAliases_.find(std::string(t.text));
    if (it == attrAliases_.end())
      failAt(t, fmt::format("undefined attribute alias '#{}'", t.text));
    if (!std::holds_alternative<AffineMap>(it->second.value))
      failAt(t, fmt::format("attribute alias '#{}' is not an affine map", t.text));
    return it->second.map();
  }
  if (consumeKeyword("affine_map"))
    return parseAffineMap();
  failAt(t, fmt::format("expected an affine map, found {}", describe(t)));
}

// Hex float literals are bit patterns, as in MLIR: 0xFF800000 : f32 is -inf.
static double floatFromBits(const Token &tok, const Type &type, const Location &loc) {
  std::string_view digits = tok.text.substr(2);
  const size_t want = hexDigitsOf(type.elem);
  if (digits.size() != want)
    fail(loc, fmt::format("hexadecimal float literal for {} needs {} hex digits, found {}",
                          elemName(type.elem), want, digits.size()));
  return floatFromBits(std::stoull(std::string(digits), nullptr, 16), type.elem);
}

// The value of decimal float literal `tok` (its magnitude) for `type`, rounded once to the
// type (FloatLiterals.h). A value the type cannot hold (1e999, or 1e39 as f32) is an error, not
// an infinity: infinities are written in hexadecimal. Decimal integers are float literals too
// (`2 : f32`, MLIR-SUBSET.md §1.2), though upstream MLIR asks for `2.0`.
static double decimalFloat(const Token &tok, const Type &type, const Location &at) {
  bool overflow = false;
  std::optional<double> value = roundDecimal(tok.text, type.elem, overflow);
  if (!value || overflow)
    fail(at, fmt::format("float literal '{}' is out of range for '{}'", tok.text, type.str()));
  return *value;
}

Literal Parser::parseNumber(const Type &type) {
  Token sign = cur_;
  bool negative = consumeIf(Tok::Minus);
  Token t = cur_;
  Literal lit;
  if (at(Tok::Float)) {
    take();
    if (!type.isFloat())
      failAt(t, fmt::format("float literal '{}' for non-float type '{}'", t.text, type.str()));
    lit.kind = Literal::Kind::Float;
    lit.f = decimalFloat(t, type, loc(t));
    if (negative)
      lit.f = -lit.f;
    return lit;
  }
  if (!at(Tok::Integer))
    failAt(t, fmt::format("expected a number, found {}", describe(t)));
  take();
  bool hex = t.text.size() > 2 && (t.text[1] == 'x' || t.text[1] == 'X');
  if (type.isFloat()) {
    lit.kind = Literal::Kind::Float;
    if (hex) {
      if (negative)
        failAt(t, "a hexadecimal float literal cannot be negated");
      lit.f = floatFromBits(t, type, loc(t));
    } else {
      lit.f = decimalFloat(t, type, loc(t));
      if (negative)
        lit.f = -lit.f;
    }
    return lit;
  }
  lit.kind = Literal::Kind::Int;
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(t.text.data() + (hex ? 2 : 0), t.text.data() + t.text.size(),
                                   magnitude, hex ? 16 : 10);
  if (ec != std::errc())
    failAt(t, fmt::format("integer literal '{}' is out of range", t.text));
  lit.i = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  int bits = elemBits(type.elem);
  if (bits < 64) {
    int64_t lo = type.elem == ElemKind::I1 ? 0 : -(int64_t{1} << (bits - 1));
    int64_t hi = (int64_t{1} << bits) - 1; // accept unsigned spellings too
    if (lit.i < lo || lit.i > hi)
      failAt(negative ? sign : t, fmt::format("integer literal '{}{}' does not fit in {}",
                                              negative ? "-" : "", t.text, type.str()));
  }
  return lit;
}

Literal Parser::parseLiteral(const Type &type, const Token &at) {
  if (atKeyword("true") || atKeyword("false")) {
    Token t = take();
    if (type.elem != ElemKind::I1)
      failAt(t, fmt::format("boolean literal for type '{}'", type.str()));
    return {Literal::Kind::Bool, t.text == "true" ? 1 : 0, 0};
  }
  return parseNumber(type);
}

std::vector<int64_t> Parser::parseDenseElements(std::vector<Token> &tokens) {
  if (at(Tok::LSquare)) {
    // Each '[' recurses: bounded like regions, so that deep lists are an error, not a crash.
    take();
    if (++depth_ > kMaxNesting)
      failAt(cur_, fmt::format("nesting too deep (more than {} levels)", kMaxNesting));
    // The list's shape: its length, then the shape every element shares.
    std::vector<int64_t> shape{0};
    std::vector<int64_t> elementShape;
    if (!at(Tok::RSquare)) {
      do {
        Token element = cur_;
        std::vector<int64_t> inner = parseDenseElements(tokens);
        if (shape[0]++ == 0)
          elementShape = inner;
        else if (inner != elementShape)
          failAt(element, fmt::format("dense list element of shape [{}] where the first has [{}]",
                                      fmt::join(inner, ", "), fmt::join(elementShape, ", ")));
      } while (consumeIf(Tok::Comma));
    }
    expect(Tok::RSquare, "to close the dense list");
    --depth_;
    shape.insert(shape.end(), elementShape.begin(), elementShape.end());
    return shape;
  }
  if (at(Tok::String))
    failAt(cur_, "unsupported dense literal: hexadecimal string blobs");
  if (at(Tok::Minus)) {
    tokens.push_back(take());
  }
  if (!(at(Tok::Integer) || at(Tok::Float) || atKeyword("true") || atKeyword("false")))
    failAt(cur_, fmt::format("expected a dense element, found {}", describe(cur_)));
  tokens.push_back(take());
  return {};
}

DenseAttr Parser::parseDense(const Token &start, Token *typeTokOut) {
  // Elements are kept as tokens until the type after ':' is known.
  expect(Tok::Less, "after 'dense'");
  std::vector<Token> tokens;
  // `dense<>`, as MLIR prints a literal of no elements.
  const std::vector<int64_t> shape =
      at(Tok::Greater) ? std::vector<int64_t>{0} : parseDenseElements(tokens);
  expect(Tok::Greater, "to close 'dense<'");
  expect(Tok::Colon, "before the dense literal's type");
  Token typeTok = cur_;
  if (typeTokOut)
    *typeTokOut = typeTok;
  Type type = parseType();
  if (!type.isTensor() || !type.hasStaticShape())
    failAt(typeTok, "a dense literal needs a static tensor type");
  lastDenseType_ = type;
  DenseAttr dense;
  Type elem = Type::scalar(type.elem);
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Re-parse each element, with its sign (so that the range check sees it), against the
    // element type.
    const Token &first = tokens[i];
    if (first.kind == Tok::Minus)
      ++i;
    Token saved = cur_;
    lex_.rewindTo(first);
    cur_ = lex_.next();
    dense.values.push_back(parseLiteral(elem, first));
    lex_.rewindTo(saved);
    cur_ = lex_.next();
  }
  int64_t numel = 1;
  for (int64_t d : type.shape)
    if (__builtin_mul_overflow(numel, d, &numel))
      failAt(typeTok, fmt::format("the dense literal's type {} has too many elements", type.str()));
  // One element without brackets is a splat; lists nest as the type's dims do, as in MLIR (a
  // flat or transposed list had been read in row-major order).
  if (!shape.empty() && shape != type.shape && !(numel == 0 && dense.values.empty()))
    failAt(start, fmt::format("dense literal of shape [{}] does not match its type {}",
                              fmt::join(shape, ", "), type.str()));
  return dense;
}

// ---- Values ------------------------------------------------------------------------------

void Parser::define(const std::string &name, Value *value, const Token &at) {
  for (auto &scope : scopes_)
    if (scope.count(name))
      failAt(at, fmt::format("redefinition of SSA value '%{}'", name));
  scopes_.back()[name] = value;
  if (value) // null reserves the name of a result pack
    value->name = name;
}

Value *Parser::lookupValue(const Token &t) {
  std::string name(t.text);
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) {
      if (!found->second)
        failAt(t, fmt::format("'%{}' names {} results; use '%{}#0' to '%{}#{}'", name,
                              packSizes_[name], name, name, packSizes_[name] - 1));
      return found->second;
    }
  }
  size_t hash = name.find('#');
  if (hash != std::string::npos) {
    std::string base = name.substr(0, hash);
    for (auto &scope : scopes_) {
      auto found = scope.find(base);
      if (found != scope.end()) {
        if (found->second)
          failAt(t, fmt::format("'%{}' is a single value; '#' selects results of a pack", base));
        failAt(t, fmt::format("result number {} is out of range: '%{}' has {} results",
                              name.substr(hash + 1), base, packSizes_[base]));
      }
    }
  }
  failAt(t, fmt::format("use of undefined value '%{}'", name));
}

Value *Parser::parseOperand() { return lookupValue(expect(Tok::PercentId, "as an operand")); }

std::pair<std::vector<Token>, std::vector<Type>>
Parser::parseOperandsAndTypes(Op &op, bool allowNone, const std::string &what) {
  std::vector<Token> toks;
  if (!allowNone || !at(Tok::RParen)) {
    do {
      toks.push_back(cur_);
      op.operands.push_back(parseOperand());
    } while (consumeIf(Tok::Comma));
  }
  if (allowNone)
    expect(Tok::RParen, fmt::format("to close {}", what));
  expect(Tok::Colon, fmt::format("before the types of {}", what));
  if (!at(Tok::LParen))
    expect(Tok::LParen, fmt::format("to open the types of {}", what));
  return {toks, parseTypeList()};
}

void Parser::expectType(const Token &at, const Value *v, const Type &type) {
  if (v->type != type)
    failAt(at, fmt::format("'%{}' has type '{}' but is used as '{}'", v->name, v->type.str(),
                           type.str()));
}

Value *Parser::parseOperandOfType(const Type &type) {
  Token t = cur_;
  Value *v = parseOperand();
  expectType(t, v, type);
  return v;
}

// ---- Structure ---------------------------------------------------------------------------

std::unique_ptr<ModuleOp> Parser::parseTopLevel() {
  auto module = std::make_unique<ModuleOp>();
  module->loc = loc(cur_);
  bool sawModule = false, sawBareFunction = false;
  while (!at(Tok::Eof)) {
    Token t = cur_;
    if (at(Tok::HashId)) {
      take();
      std::string name(t.text);
      if (attrAliases_.count(name) || textAliases_.count(name) || locationAliases_.count(name))
        failAt(t, fmt::format("redefinition of attribute alias '#{}'", name));
      expect(Tok::Equal, "after the attribute alias name");
      if (atKeyword("loc")) {
        locationAliases_.insert(name);
        skipLoc();
        continue;
      }
      if (consumeKeyword("affine_map")) {
        attrAliases_[name] = Attribute{parseAffineMap()};
        continue;
      }
      textAliases_[name] = cur_;
      skipAttributeValue();
      continue;
    }
    if (at(Tok::BangId)) {
      take();
      std::string name(t.text);
      if (typeAliases_.count(name))
        failAt(t, fmt::format("redefinition of type alias '!{}'", name));
      expect(Tok::Equal, "after the type alias name");
      typeAliases_[name] = parseType();
      continue;
    }
    if (atKeyword("module")) {
      if (sawModule || sawBareFunction)
        failAt(t, "a file holds one module, or functions outside any module, not both");
      sawModule = true;
      take();
      module->loc = loc(t);
      if (at(Tok::AtId))
        module->name = std::string(take().text);
      if (atKeyword("attributes"))
        failAt(cur_, "unsupported module attributes");
      expect(Tok::LBrace, "to open the module body");
      while (!at(Tok::RBrace)) {
        if (at(Tok::Eof))
          failAt(cur_, "expected '}' to close the module body, found end of file");
        if (atKeyword("module"))
          failAt(cur_, "unsupported nested module");
        if (!atKeyword("util.func") && !atKeyword("func.func"))
          failAt(cur_,
                 fmt::format("expected a function in the module body, found {}", describe(cur_)));
        module->functions.push_back(parseFunction());
      }
      take();
      skipLoc();
      continue;
    }
    if (atKeyword("util.func") || atKeyword("func.func")) {
      if (sawModule)
        failAt(t, "a file holds one module, or functions outside any module, not both");
      sawBareFunction = true;
      module->functions.push_back(parseFunction());
      continue;
    }
    if (t.kind == Tok::LBrace)
      failAt(t, "unsupported: dialect resources ('{-#' ... '#-}')");
    failAt(t, fmt::format("expected a module, a function or an alias, found {}", describe(t)));
  }
  for (const Token &use : locationUses_)
    if (!locationAliases_.count(std::string(use.text)))
      failAt(use, fmt::format("undefined location alias '#{}'", use.text));
  std::set<std::string> names;
  for (auto &f : module->functions)
    if (!names.insert(f->name).second)
      fail(f->loc, fmt::format("redefinition of function '@{}'", f->name));
  return module;
}

std::unique_ptr<FuncOp> Parser::parseFunction() {
  Token kw = take();
  auto fn = std::make_unique<FuncOp>();
  fn->loc = loc(kw);
  if (consumeKeyword("private"))
    fn->isPublic = false;
  else
    consumeKeyword("public");
  Token nameTok = expect(Tok::AtId, "as the function name");
  fn->name = std::string(nameTok.text);
  fn->loc = loc(nameTok);
  expect(Tok::LParen, "to open the argument list");
  pushScope();
  auto body = std::make_unique<Block>();
  bool named = at(Tok::PercentId);
  if (!at(Tok::RParen)) {
    do {
      if (named) {
        Token argTok = expect(Tok::PercentId, "as an argument name");
        expect(Tok::Colon, "after the argument name");
        Type type = parseType();
        if (at(Tok::LBrace))
          failAt(cur_, "unsupported argument attributes");
        skipLoc();
        Value *arg = body->addArgument(type, {}, loc(argTok));
        define(std::string(argTok.text), arg, argTok);
        fn->argTypes.push_back(type);
      } else {
        if (at(Tok::PercentId))
          failAt(cur_, "mixing named and unnamed arguments");
        fn->argTypes.push_back(parseType());
        if (at(Tok::LBrace))
          failAt(cur_, "unsupported argument attributes");
        skipLoc();
      }
    } while (consumeIf(Tok::Comma));
  }
  expect(Tok::RParen, "to close the argument list");
  if (consumeIf(Tok::Arrow))
    fn->resultTypes = parseTypeList();
  if (atKeyword("attributes"))
    failAt(cur_, "unsupported function attributes");
  if (at(Tok::LBrace)) {
    if (!named && !fn->argTypes.empty())
      failAt(cur_, "a function with a body needs named arguments ('%name: type')");
    take();
    fn->body = std::move(body);
    parseBlockBody(*fn->body, Tok::RBrace);
    take();
  } else if (named) {
    failAt(cur_, fmt::format("expected '{{' to open the body of '@{}', found {}", fn->name,
                             describe(cur_)));
  } else if (fn->isPublic) {
    failAt(nameTok, fmt::format("external declaration '@{}' must be private", fn->name));
  }
  skipLoc();
  popScope();
  packSizes_.clear();
  return fn;
}

void Parser::parseBlockBody(Block &block, Tok end) {
  while (!at(end)) {
    if (at(Tok::Eof))
      failAt(cur_, fmt::format("expected {} to close the block, found end of file", tokName(end)));
    if (at(Tok::CaretId))
      failAt(cur_, "unsupported: regions with more than one block");
    if (at(Tok::LBrace) && !block.ops.empty()) // after ops whose syntax ends in an attribute
      failAt(cur_,
             fmt::format("unsupported attribute dictionary on '{}'", block.ops.back()->name()));
    parseOp(block);
  }
}

void Parser::parseRegion(Op &op, bool withHeader, const std::vector<Type> *expectedArgs) {
  if (++depth_ > kMaxNesting)
    failAt(cur_, fmt::format("nesting too deep (more than {} levels)", kMaxNesting));
  Token open = expect(Tok::LBrace, "to open the region");
  Block *block = op.addRegion();
  pushScope();
  if (withHeader) {
    if (!at(Tok::CaretId))
      failAt(cur_, fmt::format("expected a block header '^bb0(...):' in '{}', found {}", op.name(),
                               describe(cur_)));
    take();
    expect(Tok::LParen, "to open the block arguments");
    if (!at(Tok::RParen)) {
      do {
        Token argTok = expect(Tok::PercentId, "as a block argument");
        expect(Tok::Colon, "after the block argument name");
        Type type = parseType();
        skipLoc();
        Value *arg = block->addArgument(type, {}, loc(argTok));
        define(std::string(argTok.text), arg, argTok);
      } while (consumeIf(Tok::Comma));
    }
    expect(Tok::RParen, "to close the block arguments");
    expect(Tok::Colon, "after the block header");
    if (expectedArgs) {
      if (block->arguments.size() != expectedArgs->size())
        failAt(open, fmt::format("'{}' region needs {} block arguments (one per operand), found {}",
                                 op.name(), expectedArgs->size(), block->arguments.size()));
      for (size_t i = 0; i < expectedArgs->size(); ++i)
        if (block->arguments[i]->type != (*expectedArgs)[i])
          fail(block->arguments[i]->loc,
               op.kind == OpKind::Attention
                   ? fmt::format("the score region's argument is an f32 score whatever the "
                                 "attention's element type, not '{}'",
                                 block->arguments[i]->type.str())
                   : fmt::format("block argument #{} has type '{}' but operand #{} has element "
                                 "type '{}'",
                                 i, block->arguments[i]->type.str(), i, (*expectedArgs)[i].str()));
    }
  }
  parseBlockBody(*block, Tok::RBrace);
  take();
  popScope();
  --depth_;
}

void Parser::parseOp(Block &block) {
  Token first = cur_;
  std::vector<Token> names;
  std::vector<size_t> packCounts;
  if (at(Tok::PercentId)) {
    do {
      Token n = expect(Tok::PercentId, "as a result name");
      if (n.text.find('#') != std::string_view::npos)
        failAt(n, "a result name cannot have a '#N' suffix");
      size_t count = 1;
      if (consumeIf(Tok::Colon)) {
        Token c = expect(Tok::Integer, "as the result count");
        count = static_cast<size_t>(integerValue(c, 1024));
        if (count == 0)
          failAt(c, "a result pack needs at least one result");
      } else {
        count = 0; // a single name
      }
      names.push_back(n);
      packCounts.push_back(count);
    } while (consumeIf(Tok::Comma));
    expect(Tok::Equal, "after the result names");
  }
  Token nameTok = cur_;
  if (at(Tok::String))
    failAt(nameTok, "unsupported generic op syntax (quoted op name)");
  expect(Tok::BareId, "as an op name");
  std::string_view name = nameTok.text;
  if (name == "func.return" || name == "return")
    name = "util.return";
  else if (name == "func.call" || name == "call")
    name = "util.call";
  OpKind kind;
  if (!lookupOpKind(name, kind))
    failAt(nameTok, fmt::format("unsupported op '{}'", nameTok.text));
  auto op = std::make_unique<Op>(kind, loc(names.empty() ? nameTok : first));
  op->parentBlock = &block;
  std::vector<Type> resultTypes;
  std::string_view outerOp = std::exchange(opName_, nameTok.text);
  const bool outerTakesRegion = std::exchange(
      opTakesRegion_, kind == OpKind::ScfFor || kind == OpKind::ScfIf ||
                          kind == OpKind::LinalgGeneric || kind == OpKind::DispatchRegion ||
                          kind == OpKind::Attention || kind == OpKind::TopK ||
                          kind == OpKind::LinalgReduce);
  parseOpBody(*op, nameTok, resultTypes);
  opName_ = outerOp;
  opTakesRegion_ = outerTakesRegion;
  size_t wanted = 0;
  for (size_t c : packCounts)
    wanted += c == 0 ? 1 : c;
  if (wanted != resultTypes.size())
    failAt(names.empty() ? nameTok : names.front(),
           fmt::format("'{}' has {} result{} but {} name{} given", nameTok.text, resultTypes.size(),
                       resultTypes.size() == 1 ? "" : "s", wanted, wanted == 1 ? " is" : "s are"));
  for (const Type &t : resultTypes)
    op->addResult(t);
  size_t next = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string base(names[i].text);
    if (packCounts[i] == 0) {
      define(base, op->result(next++), names[i]);
      continue;
    }
    define(base, nullptr, names[i]);
    scopes_.back()[base] = nullptr;
    packSizes_[base] = packCounts[i];
    for (size_t k = 0; k < packCounts[i]; ++k) {
      Value *v = op->result(next++);
      scopes_.back()[base + "#" + std::to_string(k)] = v;
      v->name = base + "_" + std::to_string(k);
    }
  }
  skipLoc();
  block.ops.push_back(std::move(op));
}

void Parser::parseOperandsWithTypes(Op &op, std::string_view keyword) {
  // ins(%a, %b : T1, T2)
  expectKeyword(keyword, fmt::format("in '{}'", op.name()));
  expect(Tok::LParen, fmt::format("after '{}'", keyword));
  std::vector<Token> toks;
  std::vector<Value *> values;
  if (!at(Tok::Colon) && !at(Tok::RParen)) {
    do {
      toks.push_back(cur_);
      values.push_back(parseOperand());
    } while (consumeIf(Tok::Comma));
  }
  if (!values.empty()) {
    expect(Tok::Colon, fmt::format("before the types of '{}'", keyword));
    for (size_t i = 0; i < values.size(); ++i) {
      if (i)
        expect(Tok::Comma, "between operand types");
      Type t = parseType();
      if (values[i]->type != t)
        failAt(toks[i], fmt::format("'%{}' has type '{}' but is annotated as '{}'", values[i]->name,
                                    values[i]->type.str(), t.str()));
    }
    if (at(Tok::Comma))
      failAt(cur_, fmt::format("more types than operands in '{}'", keyword));
  }
  expect(Tok::RParen, fmt::format("to close '{}(' (one type per operand)", keyword));
  for (Value *v : values)
    op.operands.push_back(v);
}

void Parser::parseTerminatorOperands(Op &op) {
  std::vector<Token> toks;
  if (!at(Tok::PercentId) || atResultDefinition())
    return;
  do {
    toks.push_back(cur_);
    op.operands.push_back(parseOperand());
  } while (consumeIf(Tok::Comma));
  expect(Tok::Colon, fmt::format("before the operand types of '{}'", op.name()));
  for (size_t i = 0; i < toks.size(); ++i) {
    if (i)
      expect(Tok::Comma, fmt::format("between the operand types of '{}'", op.name()));
    Type t = parseType();
    if (op.operands[i]->type != t)
      failAt(toks[i], fmt::format("'%{}' has type '{}' but is annotated as '{}'",
                                  op.operands[i]->name, op.operands[i]->type.str(), t.str()));
  }
  if (at(Tok::Comma))
    failAt(cur_, fmt::format("more types than operands in '{}'", op.name()));
}

AttrList Parser::parseIteratorTypes() {
  if (auto iters = parseIfAlias(&Parser::parseIteratorTypes))
    return *iters;
  if (at(Tok::HashId))
    failAt(cur_, fmt::format("undefined attribute alias '#{}'", cur_.text));
  expect(Tok::LSquare, "to open 'iterator_types'");
  AttrList iters;
  if (!at(Tok::RSquare)) {
    do
      iters.push_back(Attribute{parseIteratorType()});
    while (consumeIf(Tok::Comma));
  }
  expect(Tok::RSquare, "to close 'iterator_types'");
  return iters;
}

std::string Parser::parseIteratorType() {
  if (auto aliased = parseIfAlias(&Parser::parseIteratorType)) // `#par = "parallel"`
    return *aliased;
  Token it = cur_;
  std::string value;
  if (consumeIf(Tok::String)) {
    value = std::string(it.text);
  } else if (at(Tok::HashId) && it.text == "linalg.iterator_type") {
    take();
    expect(Tok::Less, "after '#linalg.iterator_type'");
    value = std::string(expect(Tok::BareId, "as the iterator type").text);
    expect(Tok::Greater, "to close '#linalg.iterator_type<'");
  } else if (at(Tok::HashId)) {
    failAt(it, fmt::format("undefined attribute alias '#{}'", it.text));
  } else {
    failAt(it, fmt::format("expected \"parallel\" or \"reduction\", found {}", describe(it)));
  }
  if (value != "parallel" && value != "reduction")
    failAt(it, fmt::format("unsupported iterator type '{}'", value));
  return value;
}

// An attribute value, skipped where an alias defines it: brackets of any kind to their match.
void Parser::skipAttributeValue() {
  int depth = 0;
  do {
    if (at(Tok::Eof))
      failAt(cur_, "expected an attribute value, found end of file");
    if (at(Tok::LSquare) || at(Tok::LBrace) || at(Tok::LParen) || at(Tok::Less))
      ++depth;
    else if (at(Tok::RSquare) || at(Tok::RBrace) || at(Tok::RParen) || at(Tok::Greater))
      --depth;
    if (depth < 0)
      failAt(cur_, fmt::format("expected an attribute value, found {}", describe(cur_)));
    take();
  } while (depth > 0 || at(Tok::Less)); // `dense<...>`, `#dialect.attr<...>`
}

void Parser::parseAliasText(const Token &use, const std::function<void()> &parse) {
  const std::string name(use.text);
  if (!expanding_.insert(name).second)
    failAt(use, fmt::format("attribute alias '#{}' refers to itself", name));
  const Token after = cur_;
  lex_.rewindTo(textAliases_.at(name));
  cur_ = lex_.next();
  parse();
  lex_.rewindTo(after);
  cur_ = lex_.next();
  expanding_.erase(name);
}

void Parser::parseGenericAttrs(Op &op) {
  if (atTextAlias()) // `linalg.generic #trait ins(...)`
    return parseAliasText(take(), [&] { parseGenericAttrs(op); });
  Token open = expect(Tok::LBrace, "to open the attributes of 'linalg.generic'");
  bool haveMaps = false, haveIters = false;
  do {
    Token key = expect(Tok::BareId, "as an attribute name");
    expect(Tok::Equal, "after the attribute name");
    if (key.text == "indexing_maps") {
      op.attrs["indexing_maps"] = Attribute{parseMapList()};
      haveMaps = true;
    } else if (key.text == "iterator_types") {
      op.attrs["iterator_types"] = Attribute{parseIteratorTypes()};
      haveIters = true;
    } else if (key.text == kConfigAttr) {
      parseConfigValue(op);
    } else if (key.text == kVisibleKeysAttr) {
      // A promise the lowering would trust without checking it: only the compiler makes it,
      // from an attention's mask.
      failAt(key,
             fmt::format("'{}' is derived from an attention's causal mask, not written", key.text));
    } else {
      failAt(key, fmt::format("unsupported attribute '{}' on 'linalg.generic'", key.text));
    }
  } while (consumeIf(Tok::Comma));
  expect(Tok::RBrace, "to close the attributes of 'linalg.generic'");
  if (!haveMaps)
    failAt(open, "'linalg.generic' needs 'indexing_maps'");
  if (!haveIters)
    failAt(open, "'linalg.generic' needs 'iterator_types'");
}

// The value of `frank.config = "tile=4x2,..."`, checked here so that a bad one is an error at
// its place in the source.
void Parser::parseConfigValue(Op &op) {
  Token value = expect(Tok::String, fmt::format("as the value of '{}'", kConfigAttr));
  std::string text(value.text);
  if (op.hasAttr(kConfigAttr))
    failAt(value, fmt::format("'{}' is set twice", kConfigAttr));
  try {
    loops::parseConfig(text, kConfigAttr);
  } catch (const Error &e) {
    failAt(value, unlocatedMessage(e));
  }
  op.attrs[kConfigAttr] = Attribute{text};
}

// `dimension(<n>)`, stored as the op's "dimension" attribute; returns the number's token.
Token Parser::parseDimensionAttr(Op &op) {
  expectKeyword("dimension", fmt::format("in '{}'", op.name()));
  expect(Tok::LParen, "after 'dimension'");
  Token d = expect(Tok::Integer, fmt::format("as the dimension of '{}'", op.name()));
  expect(Tok::RParen, "to close 'dimension('");
  op.attrs["dimension"] = Attribute{integerValue(d, 64)};
  return d;
}

AttrList Parser::parseIntList(const char *what) {
  expect(Tok::LSquare, fmt::format("to open {}", what));
  AttrList list;
  if (!at(Tok::RSquare)) {
    do {
      bool negative = consumeIf(Tok::Minus);
      Token t = expect(Tok::Integer, fmt::format("in {}", what));
      int64_t v = integerValue(t, int64_t{1} << 40);
      list.push_back(Attribute{negative ? -v : v});
    } while (consumeIf(Tok::Comma));
  }
  expect(Tok::RSquare, fmt::format("to close {}", what));
  return list;
}

AttrList Parser::parseReassociation() {
  expect(Tok::LSquare, "to open the reassociation");
  AttrList groups;
  do
    groups.push_back(Attribute{parseIntList("a reassociation group")});
  while (consumeIf(Tok::Comma));
  expect(Tok::RSquare, "to close the reassociation");
  return groups;
}

// [%a, 4, %b]: literals go into attribute `attr`, SSA values become operands and leave
// kDynamic in their place.
void Parser::parseMixedList(Op &op, const char *attr, const char *what) {
  expect(Tok::LSquare, fmt::format("to open {}", what));
  AttrList statics;
  if (!at(Tok::RSquare)) {
    do {
      if (at(Tok::PercentId)) {
        op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
        statics.push_back(Attribute{kDynamic});
      } else {
        Token t = expect(Tok::Integer, fmt::format("or an SSA value in {}", what));
        statics.push_back(Attribute{integerValue(t, int64_t{1} << 40)});
      }
    } while (consumeIf(Tok::Comma));
  }
  expect(Tok::RSquare, fmt::format("to close {}", what));
  op.attrs[attr] = Attribute{statics};
}

void Parser::parseInsOuts(Op &op, bool requireIns) {
  size_t before = op.operands.size();
  if (requireIns || atKeyword("ins"))
    parseOperandsWithTypes(op, "ins");
  op.attrs["num_inputs"] = Attribute{static_cast<int64_t>(op.operands.size() - before)};
  parseOperandsWithTypes(op, "outs");
}

// `-> T`, `-> (T, U)` or, as topk prints it, `-> T, U`.
std::vector<Type> Parser::parseTypeListAfterArrow() {
  expect(Tok::Arrow, "before the result types");
  if (at(Tok::LParen))
    return parseTypeList();
  std::vector<Type> types{parseType()};
  while (consumeIf(Tok::Comma))
    types.push_back(parseType());
  return types;
}

// `[map, ...]`, the value of an `indexing_maps` attribute (maps or their `#aliases`).
AttrList Parser::parseMapList() {
  if (auto maps = parseIfAlias(&Parser::parseMapList))
    return *maps;
  if (at(Tok::HashId) && !attrAliases_.count(std::string(cur_.text)))
    failAt(cur_, fmt::format("undefined attribute alias '#{}'", cur_.text));
  expect(Tok::LSquare, "to open 'indexing_maps'");
  AttrList maps;
  if (!at(Tok::RSquare)) {
    do
      maps.push_back(Attribute{parseMapAttr()});
    while (consumeIf(Tok::Comma));
  }
  expect(Tok::RSquare, "to close 'indexing_maps'");
  return maps;
}

// A matmul's explicit maps, over `numDims` dims ([b,] m, n, k): three, each naming distinct dims
// and one per dim of its operand; the output's dims are the parallel ones, and the one dim it
// leaves out is the reduction, which both inputs read.
void Parser::checkContractionMaps(const Op &op, const Token &at, int numDims) {
  const AttrList &maps = op.attrs.at("indexing_maps").list();
  if (maps.size() != 3)
    failAt(at, fmt::format("'{}' takes 3 indexing maps, found {}", op.name(), maps.size()));
  std::vector<bool> inOutput(numDims, false);
  for (size_t i = 0; i < 3; ++i) {
    const AffineMap &map = maps[i].map();
    if (map.numDims != numDims)
      failAt(at, fmt::format("indexing map #{} of '{}' has {} dims, not {}", i, op.name(),
                             map.numDims, numDims));
    std::vector<bool> seen(numDims, false);
    for (const AffineResult &r : map.results) {
      if (r.isConstant || seen[r.value])
        failAt(at, fmt::format("unsupported: indexing map #{} of '{}' is not a projection of "
                               "distinct dims",
                               i, op.name()));
      seen[r.value] = true;
      if (i == 2)
        inOutput[r.value] = true;
    }
    const Type &type = op.operands[i]->type;
    if (type.isTensor() && type.rank() != static_cast<int64_t>(map.results.size()))
      failAt(at, fmt::format("indexing map #{} of '{}' has {} results for '{}'", i, op.name(),
                             map.results.size(), type.str()));
  }
  const int64_t reductions = std::count(inOutput.begin(), inOutput.end(), false);
  if (reductions != 1)
    failAt(at, fmt::format("unsupported: the output map of '{}' leaves {} dims out; a matmul "
                           "reduces exactly one",
                           op.name(), reductions));
  const int k =
      static_cast<int>(std::find(inOutput.begin(), inOutput.end(), false) - inOutput.begin());
  for (size_t i = 0; i < 2; ++i) {
    const auto &results = maps[i].map().results;
    if (std::none_of(results.begin(), results.end(),
                     [&](const AffineResult &r) { return r.value == k; }))
      failAt(at, fmt::format("indexing map #{} of '{}' does not read the reduction dim d{}", i,
                             op.name(), k));
  }
}

void Parser::parseIndexingMaps(Op &op) {
  Token open = expect(Tok::LBrace, fmt::format("to open the attributes of '{}'", op.name()));
  Token key = expect(Tok::BareId, "as an attribute name");
  if (key.text != "indexing_maps")
    failAt(key, fmt::format("unsupported attribute '{}' on '{}'", key.text, op.name()));
  expect(Tok::Equal, "after the attribute name");
  op.attrs["indexing_maps"] = Attribute{parseMapList()};
  while (consumeIf(Tok::Comma)) {
    Token other = expect(Tok::BareId, "as an attribute name");
    if (other.text != kConfigAttr)
      failAt(other, fmt::format("unsupported attribute '{}' on '{}'", other.text, op.name()));
    expect(Tok::Equal, "after the attribute name");
    parseConfigValue(op);
  }
  expect(Tok::RBrace, fmt::format("to close the attributes of '{}'", op.name()));
  (void)open;
}

// Each group of `groups` lists consecutive dims of the grouped (higher-rank) type; the groups
// cover it in order and there is one per dim of the other type.
void Parser::checkReassociation(const Token &at, const AttrList &groups, int64_t groupedRank,
                                int64_t otherRank, const Type &grouped, const Type &other) {
  if (static_cast<int64_t>(groups.size()) != otherRank)
    failAt(at, fmt::format("the reassociation has {} groups but '{}' has rank {}", groups.size(),
                           other.str(), otherRank));
  int64_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const AttrList &group = groups[g].list();
    if (group.empty())
      failAt(at, fmt::format("reassociation group #{} is empty", g));
    int64_t product = 1;
    bool known = other.shape[g] != kDynamic;
    for (const Attribute &d : group) {
      if (d.integer() != next)
        failAt(at, fmt::format("reassociation groups must list the dims of '{}' in order; "
                               "expected {} in group #{}, found {}",
                               grouped.str(), next, g, d.integer()));
      if (next >= groupedRank)
        failAt(at, fmt::format("the reassociation lists dim {} but '{}' has rank {}", next,
                               grouped.str(), groupedRank));
      known &= grouped.shape[next] != kDynamic;
      if (grouped.shape[next] != kDynamic &&
          __builtin_mul_overflow(product, grouped.shape[next], &product))
        failAt(at, fmt::format("reassociation group #{} of '{}' has too many elements", g,
                               grouped.str()));
      ++next;
    }
    if (known && product != other.shape[g])
      failAt(at, fmt::format("reassociation group #{} of '{}' has {} elements but dim {} of '{}' "
                             "is {}",
                             g, grouped.str(), product, g, other.str(), other.shape[g]));
  }
  if (next != groupedRank)
    failAt(at, fmt::format("the reassociation covers {} dims but '{}' has rank {}", next,
                           grouped.str(), groupedRank));
}

static bool isCmpFPredicate(std::string_view p) {
  static const char *const preds[] = {"false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                                      "ueq",   "ugt", "uge", "ult", "ule", "une", "uno", "true"};
  return std::find(std::begin(preds), std::end(preds), p) != std::end(preds);
}
static bool isCmpIPredicate(std::string_view p) {
  static const char *const preds[] = {"eq",  "ne",  "slt", "sle", "sgt",
                                      "sge", "ult", "ule", "ugt", "uge"};
  return std::find(std::begin(preds), std::end(preds), p) != std::end(preds);
}

void Parser::parseOpBody(Op &op, const Token &nameTok, std::vector<Type> &resultTypes) {
  // Reads ': T', leaving `typeTok` at T so that errors point at the type itself.
  Token typeTok;
  auto colonType = [&] {
    expect(Tok::Colon, fmt::format("before the type of '{}'", op.name()));
    typeTok = cur_;
    return parseType();
  };
  // Flags MLIR prints between operands and type: fast-math flags, integer overflow flags.
  auto rejectFastmath = [&] {
    for (const char *flag : {"fastmath", "overflow"})
      if (atKeyword(flag))
        failAt(cur_, fmt::format("unsupported attribute '{}'", flag));
  };
  OpKind kind = op.kind;
  if (kind == OpKind::ArithConstant) {
    Token t = cur_;
    if (consumeKeyword("dense")) {
      Token typeStart = cur_;
      DenseAttr dense = parseDense(t, &typeTok);
      (void)typeStart;
      op.attrs["value"] = Attribute{dense};
      resultTypes.push_back(lastDenseType_);
      return;
    }
    if ((atKeyword("true") || atKeyword("false"))) {
      Token b = take();
      Type type = Type::scalar(ElemKind::I1);
      if (consumeIf(Tok::Colon)) {
        typeTok = cur_;
        type = parseType();
        if (type != Type::scalar(ElemKind::I1))
          failAt(typeTok, fmt::format("boolean literal for type '{}'", type.str()));
      }
      op.attrs["value"] = Attribute{Literal{Literal::Kind::Bool, b.text == "true" ? 1 : 0, 0}};
      resultTypes.push_back(type);
      return;
    }
    // The type comes after the literal: read ahead, then come back.
    Token litStart = cur_;
    bool negative = consumeIf(Tok::Minus);
    if (atKeyword("dense_resource") || atKeyword("sparse") || atKeyword("array"))
      failAt(cur_, fmt::format("unsupported constant '{}<...>'", cur_.text));
    if (!at(Tok::Integer) && !at(Tok::Float))
      failAt(cur_,
             fmt::format("expected a literal value in 'arith.constant', found {}", describe(cur_)));
    take();
    (void)negative;
    Token typeTok;
    expect(Tok::Colon, "before the type of 'arith.constant'");
    typeTok = cur_;
    Type type = parseType();
    if (!type.isScalar())
      failAt(typeTok, fmt::format("unsupported constant type '{}'", type.str()));
    Token after = cur_;
    lex_.rewindTo(litStart);
    cur_ = lex_.next();
    Literal lit = parseNumber(type);
    lex_.rewindTo(after);
    cur_ = lex_.next();
    op.attrs["value"] = Attribute{lit};
    resultTypes.push_back(type);
    return;
  }
  if (isArithBinary(kind)) {
    Token a = cur_;
    Value *lhs = parseOperand();
    expect(Tok::Comma, "between operands");
    Token b = cur_;
    Value *rhs = parseOperand();
    rejectFastmath();
    Type type = colonType();
    if (!type.isScalar())
      failAt(typeTok, fmt::format("'{}' works on scalars, found '{}'", op.name(), type.str()));
    bool wantFloat = kind == OpKind::AddF || kind == OpKind::SubF || kind == OpKind::MulF ||
                     kind == OpKind::DivF || kind == OpKind::RemF || kind == OpKind::MaximumF ||
                     kind == OpKind::MinimumF || kind == OpKind::PowF;
    if (wantFloat != type.isFloat())
      failAt(typeTok, fmt::format("'{}' needs {} type, found '{}'", op.name(),
                                  wantFloat ? "a float" : "an integer or index", type.str()));
    expectType(a, lhs, type);
    expectType(b, rhs, type);
    op.operands = {lhs, rhs};
    resultTypes.push_back(type);
    return;
  }
  if (isMathUnary(kind)) {
    Token a = cur_;
    Value *x = parseOperand();
    rejectFastmath();
    Type type = colonType();
    if (!type.isFloat())
      failAt(typeTok, fmt::format("'{}' needs a float type, found '{}'", op.name(), type.str()));
    expectType(a, x, type);
    op.operands = {x};
    resultTypes.push_back(type);
    return;
  }
  if (kind == OpKind::CmpF || kind == OpKind::CmpI) {
    // The predicate is a keyword, or a string as MLIR's enum attributes also take it.
    Token p = at(Tok::String)
                  ? take()
                  : expect(Tok::BareId, fmt::format("as the predicate of '{}'", op.name()));
    bool ok = kind == OpKind::CmpF ? isCmpFPredicate(p.text) : isCmpIPredicate(p.text);
    if (!ok)
      failAt(p, fmt::format("unknown predicate '{}' for '{}'", p.text, op.name()));
    expect(Tok::Comma, "after the predicate");
    Token a = cur_;
    Value *lhs = parseOperand();
    expect(Tok::Comma, "between operands");
    Token b = cur_;
    Value *rhs = parseOperand();
    rejectFastmath();
    Type type = colonType();
    if (kind == OpKind::CmpF ? !type.isFloat() : !type.isInteger())
      failAt(typeTok, fmt::format("'{}' cannot compare type '{}'", op.name(), type.str()));
    expectType(a, lhs, type);
    expectType(b, rhs, type);
    op.attrs["predicate"] = Attribute{std::string(p.text)};
    op.operands = {lhs, rhs};
    resultTypes.push_back(Type::scalar(ElemKind::I1));
    return;
  }
  if (kind == OpKind::Select) {
    Value *c = parseOperandOfType(Type::scalar(ElemKind::I1));
    expect(Tok::Comma, "between operands");
    Token a = cur_;
    Value *x = parseOperand();
    expect(Tok::Comma, "between operands");
    Token b = cur_;
    Value *y = parseOperand();
    Type type = colonType();
    if (!type.isScalar())
      failAt(typeTok, fmt::format("'{}' works on scalars, found '{}'", op.name(), type.str()));
    expectType(a, x, type);
    expectType(b, y, type);
    op.operands = {c, x, y};
    resultTypes.push_back(type);
    return;
  }
  if (isCast(kind)) {
    Token a = cur_;
    Value *x = parseOperand();
    Type from = colonType();
    Token fromTok = typeTok;
    expectKeyword("to", fmt::format("in '{}'", op.name()));
    Token toTok = cur_;
    Type to = parseType();
    expectType(a, x, from);
    auto isInt = [](const Type &t) { return t.isInteger() && t.elem != ElemKind::Index; };
    bool ok = false;
    switch (kind) {
    case OpKind::IndexCast:
      ok = (from.isIndex() && isInt(to)) || (isInt(from) && to.isIndex());
      break;
    case OpKind::SIToFP:
    case OpKind::UIToFP: ok = isInt(from) && to.isFloat(); break;
    case OpKind::FPToSI: ok = from.isFloat() && isInt(to); break;
    case OpKind::TruncI:
      ok = isInt(from) && isInt(to) && elemBits(to.elem) < elemBits(from.elem);
      break;
    case OpKind::ExtSI:
    case OpKind::ExtUI:
      ok = isInt(from) && isInt(to) && elemBits(to.elem) > elemBits(from.elem);
      break;
    case OpKind::ExtF:
      ok = from.isFloat() && to.isFloat() && elemBits(to.elem) > elemBits(from.elem);
      break;
    case OpKind::TruncF:
      ok = from.isFloat() && to.isFloat() && elemBits(to.elem) < elemBits(from.elem);
      break;
    default: break;
    }
    if (!ok) {
      // Point at the source type when no target could make the cast legal.
      bool sourceWrong = false;
      switch (kind) {
      case OpKind::SIToFP:
      case OpKind::UIToFP:
      case OpKind::TruncI:
      case OpKind::ExtSI:
      case OpKind::ExtUI: sourceWrong = !isInt(from); break;
      case OpKind::FPToSI:
      case OpKind::ExtF:
      case OpKind::TruncF: sourceWrong = !from.isFloat(); break;
      case OpKind::IndexCast: sourceWrong = !from.isIndex() && !isInt(from); break;
      default: break;
      }
      failAt(sourceWrong ? fromTok : toTok,
             fmt::format("'{}' cannot convert '{}' to '{}'", op.name(), from.str(), to.str()));
    }
    op.operands = {x};
    resultTypes.push_back(to);
    return;
  }
  switch (kind) {
  case OpKind::TensorDim: {
    Token a = cur_;
    Value *t = parseOperand();
    expect(Tok::Comma, "after the tensor of 'tensor.dim'");
    Value *d;
    if (at(Tok::Integer))
      failAt(cur_, "'tensor.dim' takes its dim as an SSA index value ('%c0'), not a literal");
    d = parseOperandOfType(Type::scalar(ElemKind::Index));
    Type type = colonType();
    expectType(a, t, type);
    if (!type.isTensor())
      failAt(a, "'tensor.dim' needs a tensor operand");
    op.operands = {t, d};
    resultTypes.push_back(Type::scalar(ElemKind::Index));
    return;
  }
  case OpKind::TensorEmpty: {
    Token open = expect(Tok::LParen, "after 'tensor.empty'");
    if (!at(Tok::RParen)) {
      do
        op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
      while (consumeIf(Tok::Comma));
    }
    expect(Tok::RParen, "to close the sizes of 'tensor.empty'");
    Type type = colonType();
    if (!type.isTensor())
      failAt(typeTok, "'tensor.empty' needs a tensor type");
    if (static_cast<int64_t>(op.operands.size()) != type.numDynamicDims())
      failAt(open, fmt::format("'tensor.empty' needs one size per '?' in '{}' ({}), found {}",
                               type.str(), type.numDynamicDims(), op.operands.size()));
    resultTypes.push_back(type);
    return;
  }
  case OpKind::LinalgFill: {
    parseOperandsWithTypes(op, "ins");
    parseOperandsWithTypes(op, "outs");
    if (op.operands.size() != 2)
      failAt(nameTok, "'linalg.fill' needs one 'ins' scalar and one 'outs' tensor");
    if (!op.operands[0]->type.isScalar() || !op.operands[1]->type.isTensor())
      failAt(nameTok, "'linalg.fill' fills a tensor ('outs') with a scalar ('ins')");
    if (op.operands[0]->type.elem != op.operands[1]->type.elem)
      failAt(nameTok,
             fmt::format("'linalg.fill' value type '{}' differs from the element type of '{}'",
                         op.operands[0]->type.str(), op.operands[1]->type.str()));
    expect(Tok::Arrow, "before the result type of 'linalg.fill'");
    typeTok = cur_;
    Type type = parseType();
    if (type != op.operands[1]->type)
      failAt(typeTok, fmt::format("result type '{}' differs from the 'outs' type '{}'", type.str(),
                                  op.operands[1]->type.str()));
    resultTypes.push_back(type);
    return;
  }
  case OpKind::LinalgGeneric: {
    parseGenericAttrs(op);
    int numInputs = 0;
    if (atKeyword("ins")) {
      parseOperandsWithTypes(op, "ins");
      numInputs = static_cast<int>(op.operands.size());
    }
    if (!atKeyword("outs"))
      failAt(cur_, fmt::format("expected 'outs' in 'linalg.generic', found {}", describe(cur_)));
    parseOperandsWithTypes(op, "outs");
    if (op.operands.size() != static_cast<size_t>(numInputs) + 1)
      failAt(nameTok, "'linalg.generic' needs exactly one 'outs' operand");
    if (!op.operands.back()->type.isTensor())
      failAt(nameTok, "the 'outs' operand of 'linalg.generic' must be a tensor");
    op.attrs["num_inputs"] = Attribute{int64_t{numInputs}};
    if (atKeyword("attrs"))
      failAt(cur_, "unsupported attribute 'attrs' on 'linalg.generic'");
    std::vector<Type> argTypes;
    for (Value *v : op.operands)
      argTypes.push_back(Type::scalar(v->type.elem));
    parseRegion(op, true, &argTypes);
    expect(Tok::Arrow, "before the result type of 'linalg.generic'");
    typeTok = cur_;
    Type type = parseType();
    if (type != op.operands.back()->type)
      failAt(typeTok, fmt::format("result type '{}' differs from the 'outs' type '{}'", type.str(),
                                  op.operands.back()->type.str()));
    resultTypes.push_back(type);
    return;
  }
  case OpKind::LinalgIndex: {
    Token d = expect(Tok::Integer, "as the dim of 'linalg.index'");
    op.attrs["dim"] = Attribute{integerValue(d, 1024)};
    Type type = colonType();
    if (!type.isIndex())
      failAt(typeTok, "'linalg.index' has type 'index'");
    resultTypes.push_back(type);
    return;
  }
  case OpKind::LinalgYield:
  case OpKind::FlowReturn:
  case OpKind::Return: parseTerminatorOperands(op); return;
  case OpKind::Call: {
    Token callee = expect(Tok::AtId, "as the callee of 'util.call'");
    op.attrs["callee"] = Attribute{std::string(callee.text)};
    expect(Tok::LParen, "to open the call arguments");
    auto [toks, argTypes] = parseOperandsAndTypes(op, true, "the call arguments");
    if (argTypes.size() != op.operands.size())
      failAt(callee,
             fmt::format("call passes {} argument{} but its type lists {}", op.operands.size(),
                         op.operands.size() == 1 ? "" : "s", argTypes.size()));
    for (size_t i = 0; i < toks.size(); ++i)
      expectType(toks[i], op.operands[i], argTypes[i]);
    expect(Tok::Arrow, "before the call's result types");
    resultTypes = parseTypeList();
    return;
  }

  case OpKind::TensorExpandShape:
  case OpKind::TensorCollapseShape: {
    bool expand = kind == OpKind::TensorExpandShape;
    Token a = cur_;
    Value *src = parseOperand();
    op.operands.push_back(src);
    Token groupsTok = cur_;
    AttrList groups = parseReassociation();
    op.attrs["reassociation"] = Attribute{groups};
    bool haveShape = expand && consumeKeyword("output_shape");
    if (haveShape)
      parseMixedList(op, "static_output_shape", "'output_shape'");
    Type from = colonType();
    expectType(a, src, from);
    expectKeyword("into", fmt::format("in '{}'", op.name()));
    Token toTok = cur_;
    Type to = parseType();
    if (!from.isTensor() || !to.isTensor() || from.elem != to.elem)
      failAt(toTok, fmt::format("'{}' reshapes a tensor to a tensor of the same element type, not "
                                "'{}' into '{}'",
                                op.name(), from.str(), to.str()));
    if (expand) {
      checkReassociation(groupsTok, groups, to.rank(), from.rank(), to, from);
      if (!haveShape) {
        if (!to.hasStaticShape())
          failAt(toTok, "'tensor.expand_shape' into a dynamic type needs 'output_shape'");
        AttrList statics;
        for (int64_t d : to.shape)
          statics.push_back(Attribute{d});
        op.attrs["static_output_shape"] = Attribute{statics};
      }
      const AttrList &shape = op.attr("static_output_shape").list();
      if (static_cast<int64_t>(shape.size()) != to.rank())
        failAt(toTok, fmt::format("'output_shape' has {} entries but '{}' has rank {}",
                                  shape.size(), to.str(), to.rank()));
      for (int64_t d = 0; d < to.rank(); ++d)
        if (shape[d].integer() != kDynamic && to.shape[d] != kDynamic &&
            shape[d].integer() != to.shape[d])
          failAt(toTok, fmt::format("'output_shape' gives {} for dim {} of '{}'",
                                    shape[d].integer(), d, to.str()));
    } else {
      checkReassociation(groupsTok, groups, from.rank(), to.rank(), from, to);
    }
    resultTypes.push_back(to);
    return;
  }
  case OpKind::TensorExtract: {
    Token a = cur_;
    Value *t = parseOperand();
    op.operands.push_back(t);
    expect(Tok::LSquare, "to open the indices of 'tensor.extract'");
    if (!at(Tok::RSquare)) {
      do
        op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
      while (consumeIf(Tok::Comma));
    }
    expect(Tok::RSquare, "to close the indices of 'tensor.extract'");
    Type type = colonType();
    expectType(a, t, type);
    if (!type.isTensor())
      failAt(typeTok, "'tensor.extract' reads from a tensor");
    if (static_cast<int64_t>(op.operands.size()) - 1 != type.rank())
      failAt(a, fmt::format("'tensor.extract' from '{}' needs {} indices, found {}", type.str(),
                            type.rank(), op.operands.size() - 1));
    resultTypes.push_back(Type::scalar(type.elem));
    return;
  }
  case OpKind::TensorExtractSlice:
  case OpKind::TensorInsertSlice: {
    bool insert = kind == OpKind::TensorInsertSlice;
    Token a = cur_;
    Value *src = parseOperand();
    op.operands.push_back(src);
    Token d = cur_;
    Value *dst = nullptr;
    if (insert) {
      expectKeyword("into", "in 'tensor.insert_slice'");
      d = cur_;
      dst = parseOperand();
      op.operands.push_back(dst);
    }
    size_t firstDynamic = op.operands.size();
    parseMixedList(op, "static_offsets", "the offsets");
    op.attrs["num_dynamic_offsets"] =
        Attribute{static_cast<int64_t>(op.operands.size() - firstDynamic)};
    parseMixedList(op, "static_sizes", "the sizes");
    Token stridesTok = cur_;
    AttrList strides = parseIntList("the strides (literals)");
    for (const Attribute &st : strides)
      if (st.integer() < 1)
        failAt(stridesTok, fmt::format("slice strides must be at least 1, found {}", st.integer()));
    op.attrs["static_strides"] = Attribute{strides};
    Type from = colonType();
    Token fromTok = typeTok;
    expectType(a, src, from);
    expectKeyword(insert ? "into" : "to", fmt::format("in '{}'", op.name()));
    Token toTok = cur_;
    Type to = parseType();
    if (insert)
      expectType(d, dst, to);
    const Type &full = insert ? to : from;
    const Type &slice = insert ? from : to;
    if (!full.isTensor() || !slice.isTensor() || full.elem != slice.elem)
      failAt(toTok, fmt::format("'{}' needs tensors of one element type", op.name()));
    int64_t rank = full.rank();
    for (const char *list : {"static_offsets", "static_sizes", "static_strides"})
      if (static_cast<int64_t>(op.attr(list).list().size()) != rank)
        failAt(fromTok, fmt::format("'{}' needs {} offsets, sizes and strides for '{}'", op.name(),
                                    rank, full.str()));
    if (slice.rank() > rank)
      failAt(toTok,
             fmt::format("the slice '{}' has a higher rank than '{}'", slice.str(), full.str()));
    // The unit dims a rank-reducing slice drops follow from the types as written, as MLIR's
    // verifier matches them: specialized sizes (a runtime 1) must not drop others.
    std::vector<int64_t> sizes;
    for (const Attribute &size : op.attr("static_sizes").list())
      sizes.push_back(size.integer());
    std::optional<std::vector<bool>> dropped = droppedSliceDims(sizes, slice.shape);
    if (!dropped)
      failAt(insert ? fromTok : toTok, notRankReducible(sizes, slice));
    AttrList mask;
    for (bool d : *dropped)
      mask.push_back(Attribute{int64_t{d}});
    op.attrs[kDroppedDimsAttr] = Attribute{mask};
    resultTypes.push_back(insert ? to : slice);
    return;
  }
  case OpKind::TensorConcat: {
    expectKeyword("dim", "in 'tensor.concat'");
    expect(Tok::LParen, "after 'dim'");
    Token d = expect(Tok::Integer, "as the dim of 'tensor.concat'");
    expect(Tok::RParen, "to close 'dim('");
    op.attrs["dimension"] = Attribute{integerValue(d, 64)};
    auto [toks, types] = parseOperandsAndTypes(op, false, "'tensor.concat'");
    if (types.size() != op.operands.size())
      failAt(nameTok, fmt::format("'tensor.concat' has {} operands but {} types",
                                  op.operands.size(), types.size()));
    for (size_t i = 0; i < toks.size(); ++i)
      expectType(toks[i], op.operands[i], types[i]);
    expect(Tok::Arrow, "before the result type of 'tensor.concat'");
    Token toTok = cur_;
    Type to = parseType();
    for (const Type &t : types)
      if (!t.isTensor() || !to.isTensor() || t.elem != to.elem || t.rank() != to.rank())
        failAt(toTok, fmt::format("'tensor.concat' joins tensors of one rank and element type, not "
                                  "'{}' into '{}'",
                                  t.str(), to.str()));
    if (op.attr("dimension").integer() >= to.rank())
      failAt(d, fmt::format("concat dim {} is out of range for '{}'", d.text, to.str()));
    concatShape(op, to);
    resultTypes.push_back(to);
    return;
  }
  case OpKind::TensorCast: {
    Token a = cur_;
    Value *t = parseOperand();
    Type from = colonType();
    expectType(a, t, from);
    expectKeyword("to", "in 'tensor.cast'");
    Token toTok = cur_;
    Type to = parseType();
    bool ok = from.isTensor() && to.isTensor() && from.elem == to.elem && from.rank() == to.rank();
    for (int64_t i = 0; ok && i < from.rank(); ++i)
      ok = from.shape[i] == kDynamic || to.shape[i] == kDynamic || from.shape[i] == to.shape[i];
    if (!ok)
      failAt(toTok, fmt::format("'tensor.cast' cannot cast '{}' to '{}'", from.str(), to.str()));
    op.operands = {t};
    resultTypes.push_back(to);
    return;
  }
  case OpKind::LinalgMatmul:
  case OpKind::LinalgBatchMatmul: {
    // Transposed or broadcast operands as upstream MLIR spells them, before the lowering
    // choices: `linalg.matmul indexing_maps = [#a, #b, #c] ins(...)`.
    std::optional<Token> mapsTok;
    if (atKeyword("indexing_maps")) {
      mapsTok = take();
      expect(Tok::Equal, "after 'indexing_maps'");
      op.attrs["indexing_maps"] = Attribute{parseMapList()};
    }
    if (consumeIf(Tok::LBrace)) {
      Token key = expect(Tok::BareId, "as an attribute name");
      if (key.text == "indexing_maps")
        failAt(key, fmt::format("'{0}' takes its indexing maps before 'ins', not in braces: "
                                "{0} indexing_maps = [...] ins(...)",
                                op.name()));
      if (key.text != kConfigAttr)
        failAt(key, fmt::format("unsupported attribute '{}' on '{}'", key.text, op.name()));
      expect(Tok::Equal, "after the attribute name");
      parseConfigValue(op);
      expect(Tok::RBrace, fmt::format("to close the attributes of '{}'", op.name()));
    }
    parseInsOuts(op, true);
    int64_t rank = kind == OpKind::LinalgMatmul ? 2 : 3;
    if (op.operands.size() != 3)
      failAt(nameTok, fmt::format("'{}' takes two 'ins' and one 'outs'", op.name()));
    if (mapsTok)
      checkContractionMaps(op, *mapsTok, static_cast<int>(rank) + 1);
    for (Value *v : op.operands) {
      if (!v->type.isTensor() || (!mapsTok && v->type.rank() != rank))
        failAt(nameTok, fmt::format("'{}' needs rank-{} float tensors, found '{}'", op.name(), rank,
                                    v->type.str()));
      if (!isFloatElem(v->type.elem))
        failAt(nameTok, fmt::format("'{}' of '{}': unsupported element type {} (float tensors "
                                    "only)",
                                    op.name(), v->type.str(), elemName(v->type.elem)));
    }
    resultTypes = parseTypeListAfterArrow();
    if (resultTypes.size() != 1 || resultTypes[0] != op.operands[2]->type)
      failAt(nameTok, fmt::format("the result type of '{}' must be the 'outs' type", op.name()));
    return;
  }
  case OpKind::LinalgTranspose:
  case OpKind::LinalgBroadcast: {
    parseInsOuts(op, true);
    if (op.operands.size() != 2)
      failAt(nameTok, fmt::format("'{}' takes one 'ins' and one 'outs'", op.name()));
    bool transpose = kind == OpKind::LinalgTranspose;
    Token key = expect(Tok::BareId, transpose ? "'permutation'" : "'dimensions'");
    if (key.text != (transpose ? "permutation" : "dimensions"))
      failAt(key, fmt::format("expected '{}', found '{}'", transpose ? "permutation" : "dimensions",
                              key.text));
    expect(Tok::Equal, "after the attribute name");
    AttrList dims = parseIntList(transpose ? "the permutation" : "the dimensions");
    op.attrs[transpose ? "permutation" : "dimensions"] = Attribute{dims};
    const Type &in = op.operands[0]->type, &out = op.operands[1]->type;
    if (in.elem != out.elem)
      failAt(nameTok, fmt::format("'{}' needs one element type", op.name()));
    if (transpose) {
      std::vector<bool> seen(in.rank(), false);
      bool ok = static_cast<int64_t>(dims.size()) == in.rank() && in.rank() == out.rank();
      for (const Attribute &d : dims) {
        ok = ok && d.integer() >= 0 && d.integer() < in.rank() && !seen[d.integer()];
        if (ok)
          seen[d.integer()] = true;
      }
      if (!ok)
        failAt(key,
               fmt::format("'permutation' must permute the {} dims of '{}'", in.rank(), in.str()));
    } else {
      bool ok = in.rank() + static_cast<int64_t>(dims.size()) == out.rank();
      for (size_t i = 0; ok && i < dims.size(); ++i)
        ok = dims[i].integer() >= 0 && dims[i].integer() < out.rank() &&
             (i == 0 || dims[i].integer() > dims[i - 1].integer());
      if (!ok)
        failAt(key,
               fmt::format("'dimensions' must list, in order, the dims added to '{}' to make '{}'",
                           in.str(), out.str()));
    }
    if (at(Tok::Arrow))
      resultTypes = parseTypeListAfterArrow();
    else
      resultTypes = {out};
    return;
  }
  case OpKind::LinalgSoftmax: {
    Token d = parseDimensionAttr(op);
    parseInsOuts(op, true);
    if (op.operands.size() != 2 || op.operands[0]->type != op.operands[1]->type ||
        !op.operands[0]->type.isTensor() || !isFloatElem(op.operands[0]->type.elem))
      failAt(nameTok,
             "'linalg.softmax' takes one float tensor in 'ins' and one of the same type in 'outs'");
    if (op.attr("dimension").integer() >= op.operands[0]->type.rank())
      failAt(d, fmt::format("softmax dimension {} is out of range for '{}'", d.text,
                            op.operands[0]->type.str()));
    resultTypes = parseTypeListAfterArrow();
    return;
  }
  case OpKind::LinalgReduce: {
    parseInsOuts(op, true);
    if (op.operands.size() != 2)
      failAt(nameTok, "'linalg.reduce' takes one 'ins' and one 'outs' here");
    Token key = expect(Tok::BareId, "'dimensions'");
    if (key.text != "dimensions")
      failAt(key, fmt::format("expected 'dimensions', found '{}'", key.text));
    expect(Tok::Equal, "after 'dimensions'");
    AttrList dims = parseIntList("the dimensions");
    op.attrs["dimensions"] = Attribute{dims};
    const Type &in = op.operands[0]->type, &out = op.operands[1]->type;
    std::vector<bool> reduced(static_cast<size_t>(in.rank()), false);
    for (const Attribute &dim : dims) {
      const int64_t d = dim.integer();
      if (d < 0 || d >= in.rank())
        failAt(key,
               fmt::format("'linalg.reduce' dimension {} is out of range for '{}'", d, in.str()));
      if (reduced[static_cast<size_t>(d)])
        failAt(key, fmt::format("'linalg.reduce' dimension {} appears twice", d));
      reduced[static_cast<size_t>(d)] = true;
    }
    if (in.rank() - static_cast<int64_t>(dims.size()) != out.rank() || in.elem != out.elem)
      failAt(key, fmt::format("reducing dims {} of '{}' cannot give '{}'",
                              fmt::join(
                                  [&] {
                                    std::vector<int64_t> v;
                                    for (auto &a : dims)
                                      v.push_back(a.integer());
                                    return v;
                                  }(),
                                  ", "),
                              in.str(), out.str()));
    // The region's arguments come in parentheses, without a block label.
    if (++depth_ > kMaxNesting)
      failAt(cur_, "nesting too deep");
    expect(Tok::LParen, "to open the arguments of the 'linalg.reduce' region");
    Block *block = op.addRegion();
    pushScope();
    do {
      Token argTok = expect(Tok::PercentId, "as a region argument");
      expect(Tok::Colon, "after the region argument name");
      Type type = parseType();
      if (type != Type::scalar(in.elem))
        failAt(argTok, fmt::format("the region argument has type '{}' but the element type is '{}'",
                                   type.str(), elemName(in.elem)));
      define(std::string(argTok.text), block->addArgument(type, {}, loc(argTok)), argTok);
    } while (consumeIf(Tok::Comma));
    expect(Tok::RParen, "to close the region arguments");
    if (block->arguments.size() != 2)
      failAt(nameTok, "the 'linalg.reduce' region takes the input and the accumulator");
    expect(Tok::LBrace, "to open the 'linalg.reduce' region");
    parseBlockBody(*block, Tok::RBrace);
    take();
    popScope();
    --depth_;
    resultTypes = {out};
    if (at(Tok::Arrow))
      resultTypes = parseTypeListAfterArrow();
    return;
  }
  case OpKind::Gather: {
    expectKeyword("dimension_map", "in 'iree_linalg_ext.gather'");
    expect(Tok::Equal, "after 'dimension_map'");
    op.attrs["dimension_map"] = Attribute{parseIntList("the dimension map")};
    parseInsOuts(op, true);
    if (op.operands.size() != 3 && op.operands.size() != 4)
      failAt(nameTok,
             "'iree_linalg_ext.gather' takes a source, indices, an optional mask and one 'outs'");
    resultTypes = parseTypeListAfterArrow();
    return;
  }
  case OpKind::TopK: {
    Token d = parseDimensionAttr(op);
    parseInsOuts(op, true);
    int64_t ins = op.attr("num_inputs").integer();
    if ((ins != 1 && ins != 2) || op.operands.size() != static_cast<size_t>(ins) + 2)
      failAt(nameTok, "'iree_linalg_ext.topk' takes values (and optional indices) and two 'outs'");
    const Type &x = op.operands[0]->type;
    if (op.attr("dimension").integer() >= x.rank())
      failAt(d, fmt::format("topk dimension {} is out of range for '{}'", d.text, x.str()));
    std::vector<Type> blockTypes{Type::scalar(x.elem), Type::scalar(x.elem)};
    parseRegion(op, true, &blockTypes);
    resultTypes = parseTypeListAfterArrow();
    return;
  }
  case OpKind::Attention: {
    parseIndexingMaps(op);
    parseInsOuts(op, true);
    int64_t ins = op.attr("num_inputs").integer();
    if (ins != 4 && ins != 5)
      failAt(nameTok, "'iree_linalg_ext.attention' takes query, key, value, scale, an optional "
                      "mask, and one 'outs'");
    if (op.attr("indexing_maps").list().size() != op.operands.size())
      failAt(nameTok,
             fmt::format("'iree_linalg_ext.attention' has {} operands but {} indexing maps",
                         op.operands.size(), op.attr("indexing_maps").list().size()));
    std::vector<Type> blockTypes{Type::scalar(ElemKind::F32)};
    parseRegion(op, true, &blockTypes);
    resultTypes = parseTypeListAfterArrow();
    return;
  }
  case OpKind::ExtYield:
  case OpKind::ScfYield: parseTerminatorOperands(op); return;
  case OpKind::ScfIf: {
    op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::I1)));
    if (at(Tok::Arrow))
      resultTypes = parseTypeListAfterArrow();
    parseRegion(op, false, nullptr);
    if (consumeKeyword("else")) {
      parseRegion(op, false, nullptr);
    } else {
      if (!resultTypes.empty())
        failAt(cur_, "'scf.if' with results needs an 'else' region");
      op.addRegion(); // an empty else
    }
    return;
  }
  case OpKind::ScfFor: {
    Token ivTok = expect(Tok::PercentId, "as the induction variable of 'scf.for'");
    expect(Tok::Equal, "after the induction variable");
    op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
    expectKeyword("to", "in 'scf.for'");
    op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
    expectKeyword("step", "in 'scf.for'");
    op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
    std::vector<Token> iterNames;
    if (consumeKeyword("iter_args")) {
      expect(Tok::LParen, "after 'iter_args'");
      do {
        iterNames.push_back(expect(Tok::PercentId, "as an iter_args name"));
        expect(Tok::Equal, "after the iter_args name");
        op.operands.push_back(parseOperand());
      } while (consumeIf(Tok::Comma));
      expect(Tok::RParen, "to close 'iter_args'");
      resultTypes = parseTypeListAfterArrow();
      if (resultTypes.size() != iterNames.size())
        failAt(ivTok, fmt::format("'scf.for' has {} iter_args but {} result types",
                                  iterNames.size(), resultTypes.size()));
      for (size_t i = 0; i < iterNames.size(); ++i)
        expectType(iterNames[i], op.operands[3 + i], resultTypes[i]);
    }
    // The induction variable and iter_args are the region's block arguments.
    if (++depth_ > kMaxNesting)
      failAt(cur_, "nesting too deep");
    expect(Tok::LBrace, "to open the 'scf.for' body");
    Block *block = op.addRegion();
    pushScope();
    define(std::string(ivTok.text),
           block->addArgument(Type::scalar(ElemKind::Index), {}, loc(ivTok)), ivTok);
    for (size_t i = 0; i < iterNames.size(); ++i)
      define(std::string(iterNames[i].text),
             block->addArgument(resultTypes[i], {}, loc(iterNames[i])), iterNames[i]);
    parseBlockBody(*block, Tok::RBrace);
    // Without iter_args the yield may be left out, as MLIR prints it: the body yields nothing.
    if (iterNames.empty() && std::none_of(block->ops.begin(), block->ops.end(),
                                          [](auto &o) { return o->kind == OpKind::ScfYield; }))
      Builder(*block, block->ops.size(), loc(cur_)).create(OpKind::ScfYield, {}, {});
    take();
    popScope();
    --depth_;
    return;
  }
  case OpKind::AssumeInt: {
    Token a = cur_;
    Value *v = parseOperand();
    expect(Tok::Less, "to open the assumption of 'util.assume.int'");
    do {
      Token key = expect(Tok::BareId, "'umin', 'umax' or 'udiv'");
      if (key.text != "umin" && key.text != "umax" && key.text != "udiv")
        failAt(key, fmt::format("unknown assumption '{}' (expected umin, umax or udiv)", key.text));
      expect(Tok::Equal, "after the assumption name");
      Token n = expect(Tok::Integer, "as the assumed bound");
      op.attrs[std::string(key.text)] = Attribute{integerValue(n, int64_t{1} << 62)};
    } while (consumeIf(Tok::Comma));
    expect(Tok::Greater, "to close the assumption");
    Type type = colonType();
    expectType(a, v, type);
    if (!type.isInteger())
      failAt(typeTok, "'util.assume.int' takes an integer or index value");
    op.operands = {v};
    resultTypes.push_back(type);
    return;
  }
  case OpKind::DispatchRegion: {
    // flow.dispatch.region -> (tensor<?x?xf32>{%d0, %d1}) { ... flow.return %v : T }
    expect(Tok::Arrow, "after 'flow.dispatch.region'");
    expect(Tok::LParen, "to open the result types");
    if (!at(Tok::RParen)) {
      do {
        typeTok = cur_;
        Type type = parseType();
        int64_t given = 0;
        if (consumeIf(Tok::LBrace)) {
          if (!at(Tok::RBrace)) {
            do {
              op.operands.push_back(parseOperandOfType(Type::scalar(ElemKind::Index)));
              ++given;
            } while (consumeIf(Tok::Comma));
          }
          expect(Tok::RBrace, "to close the dim annotation");
        }
        if (given != type.numDynamicDims())
          failAt(typeTok, fmt::format("'{}' needs one dim value per '?' ({}), found {}", type.str(),
                                      type.numDynamicDims(), given));
        resultTypes.push_back(type);
      } while (consumeIf(Tok::Comma));
    }
    expect(Tok::RParen, "to close the result types");
    parseRegion(op, false, nullptr);
    return;
  }
  default: failAt(nameTok, fmt::format("'{}' cannot appear here", nameTok.text));
  }
}

} // namespace

std::unique_ptr<ModuleOp> parseModule(std::shared_ptr<const SourceFile> file) {
  Parser parser(std::move(file));
  return parser.parseTopLevel();
}

std::unique_ptr<ModuleOp> parseString(const std::string &text, const std::string &name) {
  auto file = std::make_shared<SourceFile>();
  file->name = name;
  file->text = text;
  return parseModule(file);
}

std::unique_ptr<ModuleOp> parseFile(const std::string &path) {
  // A directory opens as a stream with nothing in it: an empty module, without a word.
  if (std::filesystem::is_directory(path))
    throw Error(fmt::format("{}: error: is a directory, not an .mlir file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: error: cannot open file: {}", path, std::strerror(errno)));
  // A device or a pipe need not end (`/dev/zero` had been read until memory ran out): reading
  // stops at the first NUL byte, which no MLIR text holds (the parser reports where it is), and
  // a text past kMaxSourceBytes is refused.
  constexpr size_t kMaxSourceBytes = size_t(1) << 30;
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    const std::string_view read(chunk, static_cast<size_t>(in.gcount()));
    text.append(read);
    if (read.find('\0') != std::string_view::npos)
      break;
    if (text.size() > kMaxSourceBytes)
      throw Error(fmt::format("{}: error: more than {} MiB of text, too large for a component",
                              path, kMaxSourceBytes >> 20));
  }
  return parseString(text, path);
}

} // namespace frank
