// Parsing --input values and printing results.
#include "Inputs.h"
#include "frank/Npy.h"
#include "parse/FloatLiterals.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/ADT/StringExtras.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>

namespace frank::cli {

namespace {

[[noreturn]] void bad(size_t position, const std::string &text, const std::string &why) {
  throw Error(fmt::format("error: --input #{} '{}': {}", position, text, why));
}

ElemKind elemKindOf(DType dtype) {
  switch (dtype) {
  case DType::F16: return ElemKind::F16;
  case DType::BF16: return ElemKind::BF16;
  case DType::F32: return ElemKind::F32;
  default: return ElemKind::F64;
  }
}

// `v` in float type `dtype`, rounded to nearest even with subnormals kept.
llvm::APFloat roundTo(double v, DType dtype) {
  llvm::APFloat f(v);
  bool losesInfo = false;
  f.convert(floatSemantics(elemKindOf(dtype)), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return f;
}

bool isHex(const std::string &token) {
  size_t at = !token.empty() && token[0] == '-' ? 1 : 0;
  return token.size() > at + 2 && token[at] == '0' &&
         (token[at + 1] == 'x' || token[at + 1] == 'X');
}

// A float literal for `dtype`: decimal (1e-6, rounded once to the type), inf or nan, or as in
// MLIR its bits in hexadecimal (0x7FC00000 for an f32 NaN, 0x3C00 for an f16 one). A finite
// value the type cannot hold is an error, not an infinity.
double parseFloat(const std::string &token, DType dtype, size_t position, const std::string &text) {
  if (isHex(token)) {
    const size_t digits = hexDigitsOf(elemKindOf(dtype));
    uint64_t bits = 0;
    if (token[0] == '-' || token.size() != digits + 2 ||
        llvm::StringRef(token).drop_front(2).getAsInteger(16, bits))
      bad(position, text,
          fmt::format("hexadecimal '{}' is not {} bits: {} takes {} hex digits after 0x, and no "
                      "sign",
                      token, dtypeName(dtype), dtypeName(dtype), digits));
    return floatFromBits(bits, elemKindOf(dtype));
  }
  bool overflow = false;
  if (std::optional<double> v = roundDecimal(token, elemKindOf(dtype), overflow)) {
    if (overflow)
      bad(position, text, fmt::format("{} is out of range for {}", token, dtypeName(dtype)));
    return *v;
  }
  const std::string name = llvm::StringRef(token).ltrim("+-").lower();
  if (name == "inf" || name == "infinity" || name == "nan")
    return std::strtod(token.c_str(), nullptr);
  bad(position, text, fmt::format("'{}' is not a number", token));
}

template <class T, class ValueAt> void fillFrom(Tensor &t, ValueAt &valueAt) {
  T *data = t.as<T>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    data[i] = static_cast<T>(valueAt(i));
}

// Element i of `t` becomes valueAt(i), converted to the element type; valueAt is called once
// per element, in order.
template <class ValueAt> void fillWith(Tensor &t, ValueAt valueAt) {
  switch (t.dtype()) {
  case DType::F32: fillFrom<float>(t, valueAt); break;
  case DType::F64: fillFrom<double>(t, valueAt); break;
  case DType::I1: fillFrom<uint8_t>(t, valueAt); break;
  case DType::I8: fillFrom<int8_t>(t, valueAt); break;
  case DType::I16: fillFrom<int16_t>(t, valueAt); break;
  case DType::I32: fillFrom<int32_t>(t, valueAt); break;
  case DType::I64: fillFrom<int64_t>(t, valueAt); break;
  case DType::F16:
  case DType::BF16: {
    // Straight from the double: through f32 would round twice.
    auto *data = t.as<uint16_t>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      data[i] =
          static_cast<uint16_t>(roundTo(valueAt(i), t.dtype()).bitcastToAPInt().getZExtValue());
    break;
  }
  }
}

void fillValues(Tensor &t, const std::vector<double> &values) {
  fillWith(t, [&](int64_t i) { return values.size() == 1 ? values[0] : values[size_t(i)]; });
}

// The range an integer element type holds.
std::pair<int64_t, int64_t> integerRange(DType dtype) {
  switch (dtype) {
  case DType::I1: return {0, 1};
  case DType::I8: return {INT8_MIN, INT8_MAX};
  case DType::I16: return {INT16_MIN, INT16_MAX};
  case DType::I32: return {INT32_MIN, INT32_MAX};
  default: return {INT64_MIN, INT64_MAX};
  }
}

// An integer literal that `dtype` holds.
int64_t parseInteger(const std::string &token, DType dtype, size_t position,
                     const std::string &text, bool isIndex = false) {
  const char *type = isIndex ? "index" : dtypeName(dtype);
  if ((token == "true" || token == "false") && dtype == DType::I1)
    return token == "true";
  // Decimal or hexadecimal (0x7f, -0x80), exactly: a double would round past 2^53.
  const bool negative = !token.empty() && token[0] == '-', hex = isHex(token);
  llvm::StringRef digits = llvm::StringRef(token).drop_front((negative ? 1 : 0) + (hex ? 2 : 0));
  uint64_t magnitude = 0;
  // Unsigned hexadecimal may fill all 64 bits (below); otherwise |v| is at most 2^63.
  const bool bitPattern = hex && !negative;
  if (digits.empty() || !llvm::isHexDigit(digits[0]) ||
      digits.getAsInteger(hex ? 16 : 10, magnitude) ||
      (!bitPattern && magnitude > (uint64_t{1} << 63)) ||
      (!negative && !bitPattern && magnitude == (uint64_t{1} << 63)))
    bad(position, text, fmt::format("'{}' is not an integer that {} holds", token, type));
  // Modular (two's complement): 64 bits of hexadecimal read as i64, 0xFFFFFFFFFFFFFFFF is -1.
  int64_t v = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  // As in MLIR, unsigned hexadecimal is the type's bits: 0xFF is -1 as an i8.
  const int bits = dtype == DType::I8    ? 8
                   : dtype == DType::I16 ? 16
                   : dtype == DType::I32 ? 32
                                         : 64;
  if (bitPattern && dtype != DType::I1 && bits < 64 && magnitude < (uint64_t{1} << bits) &&
      magnitude >= (uint64_t{1} << (bits - 1)))
    v = static_cast<int64_t>(magnitude) - (int64_t{1} << bits);
  const auto [least, most] = integerRange(dtype);
  if (v < least || v > most)
    bad(position, text, fmt::format("{} does not fit {}", token, type));
  return v;
}

// Integer elements from exact values.
void fillIntegers(Tensor &t, const std::vector<int64_t> &values) {
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    const int64_t v = values.size() == 1 ? values[0] : values[size_t(i)];
    switch (t.dtype()) {
    case DType::I1: t.as<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::I8: t.as<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::I16: t.as<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DType::I32: t.as<int32_t>()[i] = static_cast<int32_t>(v); break;
    default: t.as<int64_t>()[i] = v; break;
    }
  }
}

// Uniform in [lo, hi): floats, or integers (i1 a fair coin when the range is [0, 2)).
// Deterministic per seed and position. Drawn straight into the tensor: a list of doubles
// beside 117 MB of weights took most of a 0.8 s run.
void fillRandom(Tensor &t, uint64_t seed, size_t position, double lo, double hi) {
  std::mt19937_64 rng(seed * 1000003 + position);
  if (isFloat(t.dtype())) {
    std::uniform_real_distribution<double> dist(lo, hi);
    fillWith(t, [&](int64_t) { return dist(rng); });
  } else {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo),
                                                static_cast<int64_t>(hi) - 1);
    fillWith(t, [&](int64_t) { return static_cast<double>(dist(rng)); });
  }
}

// The range of `random` or `random:LO:HI`: by default floats in [-1, 1), integers in [0, 16),
// i1 in [0, 2). Integer bounds must be integers that the element type holds.
std::pair<double, double> randomRange(const std::string &value, DType dtype, size_t position,
                                      const std::string &text) {
  if (value == "random")
    return isFloat(dtype) ? std::pair{-1.0, 1.0} : std::pair{0.0, dtype == DType::I1 ? 2.0 : 16.0};
  const std::string bounds = value.substr(std::strlen("random:"));
  const size_t colon = bounds.find(':');
  if (colon == std::string::npos)
    bad(position, text, "random takes no range or two bounds: random:LO:HI");
  const std::string loText = bounds.substr(0, colon), hiText = bounds.substr(colon + 1);
  if (isFloat(dtype)) {
    const double lo = parseFloat(loText, dtype, position, text),
                 hi = parseFloat(hiText, dtype, position, text);
    if (!std::isfinite(hi - lo))
      bad(position, text,
          fmt::format("random:{} needs finite bounds and a finite HI - LO", bounds));
    if (!(lo < hi))
      bad(position, text, fmt::format("random:{} is an empty range: LO must be below HI", bounds));
    return {lo, hi};
  }
  // Integer bounds exactly, as i64: HI is one past the last value, so need not fit the type.
  auto integerBound = [&](const std::string &token) {
    if (!isHex(token) && token.find_first_of(".eE") != std::string::npos)
      bad(position, text,
          fmt::format("the bounds of random integers must be integers, not {}", bounds));
    return parseInteger(token, DType::I64, position, text);
  };
  const int64_t lo = integerBound(loText), hi = integerBound(hiText);
  if (lo >= hi)
    bad(position, text, fmt::format("random:{} is an empty range: LO must be below HI", bounds));
  // Random integers are drawn through doubles: exact up to 2^53.
  const auto [least, most] =
      dtype == DType::I64 ? std::pair<int64_t, int64_t>{-(int64_t{1} << 53), int64_t{1} << 53}
                          : integerRange(dtype);
  if (lo < least || hi - 1 > most)
    bad(position, text,
        dtype == DType::I64
            ? fmt::format("random:{} is outside the random i64 range [-2^53, 2^53]", bounds)
            : fmt::format("random:{} does not fit {}", bounds, dtypeName(dtype)));
  return {static_cast<double>(lo), static_cast<double>(hi)};
}

double elementAt(const Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case DType::F32: return t.as<float>()[i];
  case DType::F64: return t.as<double>()[i];
  case DType::I1: return t.as<uint8_t>()[i];
  case DType::I8: return t.as<int8_t>()[i];
  case DType::I16: return t.as<int16_t>()[i];
  case DType::I32: return t.as<int32_t>()[i];
  case DType::I64: return static_cast<double>(t.as<int64_t>()[i]);
  case DType::F16:
  case DType::BF16: return floatFromBits(t.as<uint16_t>()[i], elemKindOf(t.dtype()));
  }
  return 0;
}

// A scalar argument from a 0-d .npy file of its type (index from an int64 one).
Scalar scalarFrom(const Tensor &t, const std::string &declaredType, size_t position,
                  const std::string &text) {
  Scalar s;
  s.type = t.dtype();
  s.isIndex = declaredType == "index" && t.dtype() == DType::I64;
  const std::string held = s.isIndex ? "index" : dtypeName(t.dtype());
  if (!t.shape().empty() || held != declaredType)
    bad(position, text,
        fmt::format("the argument is {} but the file holds {} (a scalar comes from a 0-d .npy "
                    "file of its type)",
                    declaredType, t.shape().empty() ? "a 0-d " + held : t.typeString()));
  if (isFloat(t.dtype()))
    s.f = elementAt(t, 0);
  else
    s.i = t.dtype() == DType::I64 ? t.as<int64_t>()[0] : static_cast<int64_t>(elementAt(t, 0));
  return s;
}

// What `@PATH` holds: a tensor, or the scalar a 0-d file gives a scalar argument.
Arg readInputFile(const std::string &path, const std::string &declaredType, size_t position,
                  const std::string &text) {
  if (path.empty())
    bad(position, text, "'@' needs the path of a .npy file");
  Tensor t = readNpy(path);
  if (isScalarType(declaredType))
    return scalarFrom(t, declaredType, position, text);
  return t;
}

} // namespace

bool isScalarType(const std::string &type) {
  return type == "index" || type == "bf16" ||
         (type.size() >= 2 && (type[0] == 'f' || type[0] == 'i') &&
          std::all_of(type.begin() + 1, type.end(), llvm::isDigit));
}

Arg parseInput(const std::string &text, const std::string &declaredType, uint64_t seed,
               size_t position) {
  if (!text.empty() && text[0] == '@')
    return readInputFile(text.substr(1), declaredType, position, text);
  size_t eq = text.find('=');
  if (eq == std::string::npos)
    bad(position, text, "needs a value: TYPE=VALUE, TYPE=@file.npy, TYPE=random or @file.npy");
  TypeSpec spec;
  try {
    spec = parseTypeSpec(text);
  } catch (const Error &e) {
    std::string why = e.what();
    bad(position, text, why.substr(why.find(": ", why.find("'")) + 2));
  }
  std::string value = spec.value;
  if (std::find(spec.shape.begin(), spec.shape.end(), -1) != spec.shape.end())
    bad(position, text,
        "a tensor with data has no '?' dims (--runtime-dims keeps a dim a runtime value)");
  if (!spec.isTensor) {
    checkScalarType(text, declaredType, position);
    if (!value.empty() && value[0] == '@')
      return readInputFile(value.substr(1), declaredType, position, text);
    Scalar s;
    s.type = spec.dtype;
    s.isIndex = spec.isIndex;
    if (isFloat(spec.dtype))
      s.f = parseFloat(value, spec.dtype, position, text);
    else
      s.i = parseInteger(value, spec.dtype, position, text, spec.isIndex);
    return s;
  }
  if (!value.empty() && value[0] == '@') {
    if (value.size() == 1)
      bad(position, text, "'@' needs the path of a .npy file");
    Tensor t = readNpy(value.substr(1));
    if (t.dtype() != spec.dtype || t.shape() != spec.shape)
      bad(position, text,
          fmt::format("the file holds {} but the input says {}", t.typeString(),
                      text.substr(0, eq)));
    return t;
  }
  Tensor t = Tensor::zeros(spec.dtype, spec.shape);
  if (value == "random" || value.rfind("random:", 0) == 0) {
    const auto [lo, hi] = randomRange(value, spec.dtype, position, text);
    fillRandom(t, seed, position, lo, hi);
    return t;
  }
  std::vector<double> values;
  std::vector<int64_t> integers;
  const bool integral = !isFloat(spec.dtype);
  // Values are separated by commas or spaces, and may be nested in brackets as results print;
  // a comma with no value before it (1,,3) or after it (1,2,) is a typo, not a skipped value.
  std::string token;
  bool sawComma = false, valueSinceComma = false, emptyValue = false;
  auto endToken = [&] {
    if (token.empty())
      return;
    if (integral)
      integers.push_back(parseInteger(token, spec.dtype, position, text));
    else
      values.push_back(parseFloat(token, spec.dtype, position, text));
    token.clear();
    valueSinceComma = true;
  };
  for (char c : value) {
    if (c == ',' || c == ' ' || c == '[' || c == ']') {
      endToken();
      if (c == ',') {
        emptyValue |= !valueSinceComma;
        sawComma = true;
        valueSinceComma = false;
      }
    } else {
      token += c;
    }
  }
  endToken();
  if (emptyValue || (sawComma && !valueSinceComma))
    bad(position, text, "has an empty value: a comma with no number before or after it");
  const size_t count = integral ? integers.size() : values.size();
  if (count != 1 && static_cast<int64_t>(count) != t.numel())
    bad(position, text,
        fmt::format("gives {} values but {} has {} elements (give one value to "
                    "fill, or all of them)",
                    count, text.substr(0, eq), t.numel()));
  if (count > 0 && t.numel() > 0) {
    if (integral)
      fillIntegers(t, integers);
    else
      fillValues(t, values);
  }
  return t;
}

void checkScalarType(const std::string &input, const std::string &declaredType, size_t position) {
  const std::string given = input.substr(0, input.find('='));
  if (isScalarType(declaredType) && isScalarType(given) && given != declaredType)
    bad(position, input, fmt::format("the argument is {}, not {}", declaredType, given));
}

std::string inputType(const Arg &arg) {
  if (const Tensor *t = std::get_if<Tensor>(&arg))
    return t->typeString();
  const Scalar &s = std::get<Scalar>(arg);
  if (s.isIndex)
    return fmt::format("index={}", s.i);
  if (isFloat(s.type))
    return dtypeName(s.type);
  return fmt::format("{}={}", dtypeName(s.type), s.i);
}

std::string formatTensor(const Tensor &t, int64_t maxElements) {
  std::string out = t.typeString() + "=";
  int64_t n = t.numel();
  // Nested brackets per dim, as iree-run-module prints.
  std::vector<int64_t> shape = t.shape();
  int64_t shown = 0;
  std::function<void(size_t, int64_t)> rec = [&](size_t dim, int64_t offset) {
    if (dim == shape.size()) {
      if (shown < maxElements)
        out += isFloat(t.dtype()) ? fmt::format("{:.7g}", elementAt(t, offset))
               : t.dtype() == DType::I64
                   ? fmt::format("{}", t.as<int64_t>()[offset])
                   : fmt::format("{}", static_cast<int64_t>(elementAt(t, offset)));
      ++shown;
      return;
    }
    int64_t stride = 1;
    for (size_t d = dim + 1; d < shape.size(); ++d)
      stride *= shape[d];
    out += "[";
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (shown >= maxElements) {
        out += "...";
        break;
      }
      if (i)
        out += " ";
      rec(dim + 1, offset + i * stride);
    }
    out += "]";
  };
  if (n == 0 && !shape.empty())
    return out + "[]";
  rec(0, 0);
  return out;
}

} // namespace frank::cli
