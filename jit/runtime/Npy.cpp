// NumPy .npy reading and writing: the header dict parser, the dtype table and file I/O.
#include "frank/Npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <unistd.h>

namespace frank {

// .npy data is little-endian and copied as is; a big-endian host would need byte swapping.
static_assert(std::endian::native == std::endian::little, ".npy I/O assumes a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// np.save pads the header so the data starts on this boundary (memory-mapping friendly).
constexpr size_t kHeaderAlignment = 64;
// np.save leaves room to rewrite the first dimension in place when appending rows.
constexpr size_t kGrowthAxisMaxDigits = 21;

struct NpyDType {
  std::string_view descr;
  DType type;
};

// The only descrs accepted: little-endian (or byte-order-free) C types with a frank DType.
constexpr NpyDType kNpyDTypes[] = {
    {"<f4", DType::F32}, {"<f2", DType::F16}, {"<f8", DType::F64}, {"|b1", DType::I1},
    {"|i1", DType::I8},  {"<i2", DType::I16}, {"<i4", DType::I32}, {"<i8", DType::I64},
};

[[noreturn]] void fail(const std::string &name, const std::string &message) {
  throw Error(name + ": error: " + message);
}

std::string errnoText() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

std::string supportedDescrList() {
  std::string list;
  for (const NpyDType &entry : kNpyDTypes) {
    if (!list.empty())
      list += ", ";
    // Appended piecewise: `"'" + std::string(...)` trips GCC 12's -Wrestrict false positive.
    list += '\'';
    list += entry.descr;
    list += "' (";
    list += dtypeName(entry.type);
    list += ')';
  }
  return list;
}

DType dtypeForDescr(const std::string &descr, const std::string &name) {
  for (const NpyDType &entry : kNpyDTypes)
    if (entry.descr == descr)
      return entry.type;
  if (descr.size() > 1 && descr[0] == '>') {
    std::string littleEndian = descr;
    littleEndian[0] = '<';
    for (const NpyDType &entry : kNpyDTypes)
      if (entry.descr == littleEndian)
        fail(name, "unsupported dtype '" + descr +
                       "': big-endian data is not supported; save with arr.astype('" +
                       littleEndian + "')");
  }
  fail(name, "unsupported dtype '" + descr + "'; supported: " + supportedDescrList());
}

/// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string shapeRepr(const std::vector<int64_t> &shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1)
    text += ",";
  return text + ")";
}

struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
};

/// Parses the Python dict literal np.save writes, e.g.
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, accepting any key order,
/// either quote, extra spaces and optional trailing commas. Only these three keys are allowed.
class HeaderParser {
public:
  HeaderParser(std::string_view text, const std::string &name) : text_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader header;
    bool seenDescr = false, seenFortranOrder = false, seenShape = false;
    skipSpaces();
    expect('{', "at the start of the header");
    while (true) {
      skipSpaces();
      if (consume('}'))
        break;
      std::string key = parseString("a key");
      skipSpaces();
      expect(':', "after key '" + key + "'");
      skipSpaces();
      if (key == "descr") {
        markSeen(seenDescr, key);
        header.descr = parseString("a dtype string for 'descr'");
      } else if (key == "fortran_order") {
        markSeen(seenFortranOrder, key);
        header.fortranOrder = parseBool(key);
      } else if (key == "shape") {
        markSeen(seenShape, key);
        header.shape = parseShape();
      } else {
        malformed("unexpected key '" + key + "'");
      }
      skipSpaces();
      if (consume(','))
        continue;
      expect('}', "after the value of '" + key + "'");
      break;
    }
    skipSpaces();
    if (pos_ != text_.size())
      malformed("unexpected text after the closing '}'");
    if (!seenDescr)
      malformed("missing key 'descr'");
    if (!seenFortranOrder)
      malformed("missing key 'fortran_order'");
    if (!seenShape)
      malformed("missing key 'shape'");
    return header;
  }

private:
  [[noreturn]] void malformed(const std::string &problem) {
    // Quote the header (minus its padding) so the user can see what the writer produced.
    std::string_view shown = text_;
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n'))
      shown.remove_suffix(1);
    constexpr size_t kMaxShown = 200;
    std::string quoted(shown.substr(0, kMaxShown));
    if (shown.size() > kMaxShown)
      quoted += "...";
    fail(name_, "malformed .npy header dict: " + problem + " (at offset " + std::to_string(pos_) +
                    " in \"" + quoted + "\")");
  }

  void markSeen(bool &seen, const std::string &key) {
    if (seen)
      malformed("duplicate key '" + key + "'");
    seen = true;
  }

  void skipSpaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c, const std::string &where) {
    if (!consume(c))
      malformed(std::string("expected '") + c + "' " + where);
  }

  bool consumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }

  std::string parseString(const std::string &what) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      malformed("expected " + what + " in quotes");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos)
      malformed("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  bool parseBool(const std::string &key) {
    if (consumeWord("True"))
      return true;
    if (consumeWord("False"))
      return false;
    malformed("expected True or False for '" + key + "'");
  }

  int64_t parseDim() {
    size_t start = pos_;
    bool negative = consume('-');
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
      malformed("expected an integer in 'shape'");
    int64_t magnitude = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      int digit = text_[pos_++] - '0';
      if (magnitude > (std::numeric_limits<int64_t>::max() - digit) / 10)
        fail(name_, std::string("dimension ") + std::string(text_.substr(start, pos_ - start)) +
                        "... in 'shape' is too large");
      magnitude = magnitude * 10 + digit;
    }
    consume('L'); // Python 2 wrote long integers as 3L.
    if (negative && magnitude != 0)
      fail(name_, "negative dimension -" + std::to_string(magnitude) + " in 'shape'");
    return magnitude;
  }

  std::vector<int64_t> parseShape() {
    expect('(', "to start the 'shape' tuple");
    std::vector<int64_t> shape;
    while (true) {
      skipSpaces();
      if (consume(')'))
        return shape;
      shape.push_back(parseDim());
      skipSpaces();
      if (consume(','))
        continue;
      expect(')', "to close the 'shape' tuple");
      return shape;
    }
  }

  std::string_view text_;
  const std::string &name_;
  size_t pos_ = 0;
};

uint32_t readLittleEndian(std::string_view bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i)
    value |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

void appendLittleEndian(std::string &out, uint32_t value, size_t width) {
  for (size_t i = 0; i < width; ++i)
    out += static_cast<char>((value >> (8 * i)) & 0xff);
}

/// `errorPrefix` is "<path>: " when writing a file, empty for plain serialization.
std::string serialize(const Tensor &tensor, const std::string &errorPrefix) {
  auto failWrite = [&](const std::string &message) {
    throw Error(errorPrefix + "error: " + message);
  };
  const NpyDType *npyType = nullptr;
  for (const NpyDType &entry : kNpyDTypes)
    if (entry.type == tensor.dtype())
      npyType = &entry;
  if (!npyType)
    failWrite(std::string(dtypeName(tensor.dtype())) +
              " has no .npy dtype; convert the tensor to f32 first");
  for (int64_t dim : tensor.shape())
    if (dim < 0)
      failWrite("cannot write a tensor of shape " + shapeRepr(tensor.shape()) +
                ": negative dimension");
  if (tensor.numel() == std::numeric_limits<int64_t>::max())
    failWrite("cannot write a tensor of shape " + shapeRepr(tensor.shape()) + ": too large");
  if (!tensor.valid())
    failWrite("cannot write a tensor without data");

  // Same text, key order and padding as np.save, so files compare byte for byte.
  std::string dict = "{'descr': '" + std::string(npyType->descr) +
                     "', 'fortran_order': False, 'shape': " + shapeRepr(tensor.shape()) + ", }";
  if (tensor.rank() > 0)
    dict.append(kGrowthAxisMaxDigits -
                    std::min(kGrowthAxisMaxDigits, std::to_string(tensor.shape()[0]).size()),
                ' ');

  // Version 1.0 stores the header length in 16 bits; NumPy falls back to 2.0 (32 bits) beyond.
  uint8_t major = 1;
  size_t lengthFieldWidth = 2;
  size_t unpadded = kMagic.size() + 2 + lengthFieldWidth + dict.size() + 1;
  // Like NumPy, a header that is already aligned still gets a full block of padding.
  size_t padding = kHeaderAlignment - unpadded % kHeaderAlignment;
  if (dict.size() + padding + 1 > std::numeric_limits<uint16_t>::max()) {
    major = 2;
    lengthFieldWidth = 4;
    unpadded = kMagic.size() + 2 + lengthFieldWidth + dict.size() + 1;
    padding = kHeaderAlignment - unpadded % kHeaderAlignment;
  }
  size_t headerLength = dict.size() + padding + 1;

  std::string out;
  out.reserve(unpadded + padding + tensor.byteSize());
  out += kMagic;
  out += static_cast<char>(major);
  out += '\0';
  appendLittleEndian(out, static_cast<uint32_t>(headerLength), lengthFieldWidth);
  out += dict;
  out.append(padding, ' ');
  out += '\n';
  out.append(static_cast<const char *>(tensor.data()), tensor.byteSize());
  return out;
}

} // namespace

namespace {

// Where a .npy file's data starts, its type and shape, and how many bytes the data takes.
struct NpyLayout {
  NpyHeader header;
  DType type;
  size_t dataStart = 0;
  uint64_t dataBytes = 0;
};

// The layout `bytes` declare. `partial`: the bytes read of a file so far, which may end inside
// the header: nothing until it ends (a bad magic string or version fails at once).
std::optional<NpyLayout> layoutOf(std::string_view bytes, const std::string &name,
                                  bool partial = false) {
  if (bytes.substr(0, kMagic.size()) != kMagic.substr(0, bytes.size()))
    fail(name, "not a .npy file: bad magic string (expected \\x93NUMPY)");
  constexpr size_t kVersionEnd = 8;
  auto truncated = [&](const std::string &message) -> std::optional<NpyLayout> {
    if (!partial)
      fail(name, "truncated header: " + message);
    return std::nullopt;
  };
  if (bytes.size() < kVersionEnd)
    return truncated("the file has only " + std::to_string(bytes.size()) + " bytes");

  auto major = static_cast<unsigned char>(bytes[6]);
  auto minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");

  // 1.0 has a 16-bit header length; 2.0 widened it to 32 bits and 3.0 made the text UTF-8.
  size_t lengthFieldWidth = major == 1 ? 2 : 4;
  size_t headerStart = kVersionEnd + lengthFieldWidth;
  if (bytes.size() < headerStart)
    return truncated("the file has only " + std::to_string(bytes.size()) + " bytes");
  size_t headerLength = readLittleEndian(bytes, kVersionEnd, lengthFieldWidth);
  if (bytes.size() - headerStart < headerLength)
    return truncated("the header needs " + std::to_string(headerLength) + " bytes, found " +
                     std::to_string(bytes.size() - headerStart));

  NpyLayout layout;
  layout.header = HeaderParser(bytes.substr(headerStart, headerLength), name).parse();
  layout.type = dtypeForDescr(layout.header.descr, name);
  // Multi-dimensional Fortran data would need a transpose; 0-d and 1-d arrays never set the flag.
  if (layout.header.fortranOrder)
    fail(name, "Fortran-order arrays are not supported; save with np.ascontiguousarray");

  // Checked so a corrupt shape cannot overflow the size computation or trigger a huge allocation.
  uint64_t expectedBytes = dtypeSize(layout.type);
  for (int64_t dim : layout.header.shape) {
    if (dim != 0 && expectedBytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                                        static_cast<uint64_t>(dim))
      fail(name, std::string("shape ") + shapeRepr(layout.header.shape) + " is too large");
    expectedBytes *= static_cast<uint64_t>(dim);
  }
  layout.dataStart = headerStart + headerLength;
  layout.dataBytes = expectedBytes;
  return layout;
}

} // namespace

Tensor parseNpy(std::string_view bytes, const std::string &name) {
  const NpyLayout layout = *layoutOf(bytes, name);
  const uint64_t expectedBytes = layout.dataBytes;
  size_t foundBytes = bytes.size() - layout.dataStart;
  if (foundBytes < expectedBytes)
    fail(name, "truncated data: expected " + std::to_string(expectedBytes) + " bytes, found " +
                   std::to_string(foundBytes));
  if (foundBytes > expectedBytes)
    fail(name, "trailing bytes after the data: expected " + std::to_string(expectedBytes) +
                   " bytes, found " + std::to_string(foundBytes));

  Tensor tensor = Tensor::zeros(layout.type, layout.header.shape);
  std::memcpy(tensor.data(), bytes.data() + layout.dataStart, expectedBytes);
  return tensor;
}

Tensor readNpy(const std::string &path) {
  errno = 0;
  std::ifstream file(path, std::ios::binary);
  if (!file)
    fail(path, "cannot open file: " + errnoText());
  // Read up to a byte past what the header declares, and no more: a device or a pipe need not
  // end (`--input=@/dev/zero` had read until memory ran out), and it is refused from its first
  // bytes, or once the declared data and a byte after it have come.
  std::string bytes;
  char chunk[1 << 16];
  // A declared size past the machine's memory is refused before it is read (from a pipe, a
  // shape of 800 GB had been read until the allocation failed).
  const uint64_t memoryBytes =
      uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
  std::optional<NpyLayout> layout; // once the header has been read
  while (file.read(chunk, sizeof chunk) || file.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(file.gcount()));
    if (!layout) {
      layout = layoutOf(bytes, path, /*partial=*/true);
      if (layout && layout->dataBytes > memoryBytes)
        fail(path, "shape " + shapeRepr(layout->header.shape) + " declares " +
                       std::to_string(layout->dataBytes) + " bytes, more than this machine's " +
                       std::to_string(memoryBytes) + " bytes of memory");
    }
    if (layout && bytes.size() - layout->dataStart > layout->dataBytes)
      break;
  }
  // eof alone is the normal end; bad means the read itself failed (e.g. a directory).
  if (file.bad())
    fail(path, "cannot read file: " + errnoText());
  return parseNpy(bytes, path);
}

void writeNpy(const std::string &path, const Tensor &tensor) {
  // Serialize first so an unwritable tensor does not leave an empty file behind.
  std::string bytes = serialize(tensor, path + ": ");
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file)
    fail(path, "cannot open file for writing: " + errnoText());
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (file.fail())
    fail(path, "cannot write file: " + errnoText());
}

std::string serializeNpy(const Tensor &tensor) { return serialize(tensor, ""); }

} // namespace frank
