// Tests for .npy reading and writing: round trips, NumPy's exact header layout, and every error.
#include "frank/Npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace frank;
using namespace std::string_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

const std::vector<DType> kNpyDTypes = {DType::F32, DType::F16, DType::F64, DType::I1,
                                       DType::I8,  DType::I16, DType::I32, DType::I64};

/// A file name under the test temp dir, unique per test so tests can run in parallel.
std::string tempPath(const std::string &leaf) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "frank_npy_" + info->name() + "_" + leaf;
}

/// A .npy file with a hand-written header dict, for the cases np.save would never produce.
std::string npyBytes(const std::string &dict, const std::string &data = "", uint8_t major = 1,
                     uint8_t minor = 0) {
  std::string out = "\x93NUMPY"s + static_cast<char>(major) + static_cast<char>(minor);
  size_t lengthWidth = major == 1 ? 2 : 4;
  for (size_t i = 0; i < lengthWidth; ++i)
    out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict + data;
}

std::string parseError(const std::string &bytes) {
  try {
    parseNpy(bytes, "x.npy");
  } catch (const Error &error) {
    return error.what();
  }
  ADD_FAILURE() << "parseNpy accepted invalid input";
  return "";
}

/// Deterministic contents; i1 must stay 0 or 1 like NumPy's bool.
void fillPattern(Tensor &tensor) {
  auto *bytes = static_cast<unsigned char *>(tensor.data());
  for (size_t i = 0; i < tensor.byteSize(); ++i)
    bytes[i] = tensor.dtype() == DType::I1 ? i % 2 : static_cast<unsigned char>(i * 37 + 11);
}

std::string readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

std::string f32Bytes(std::vector<float> values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(float));
}

} // namespace

TEST(TensorTest, ZerosIsAlignedAndZeroFilled) {
  Tensor tensor = Tensor::zeros(DType::F32, {32, 4096});
  EXPECT_EQ(tensor.numel(), 32 * 4096);
  EXPECT_EQ(tensor.byteSize(), 32u * 4096u * 4u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.data()) % 64, 0u);
  EXPECT_EQ(tensor.typeString(), "32x4096xf32");
  for (int64_t i = 0; i < tensor.numel(); ++i)
    ASSERT_EQ(tensor.as<float>()[i], 0.0f);

  Tensor scalar = Tensor::zeros(DType::I1, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.typeString(), "i1");
  EXPECT_TRUE(Tensor::zeros(DType::BF16, {0, 3}).valid());
  EXPECT_THROW(Tensor::zeros(DType::F32, {-1}), Error);
}

TEST(TensorTest, DTypeNames) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I1, DType::I8,
                     DType::I16, DType::I32, DType::I64})
    EXPECT_EQ(parseDType(dtypeName(type)), type);
  EXPECT_EQ(parseDType("f128"), std::nullopt);
  EXPECT_EQ(dtypeSize(DType::I1), 1u);
  EXPECT_TRUE(isFloat(DType::BF16));
  EXPECT_FALSE(isFloat(DType::I1));
}

TEST(NpyTest, RoundTripsEveryDTypeAndRank) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {0, 3}};
  for (DType type : kNpyDTypes) {
    for (const auto &shape : shapes) {
      Tensor original = Tensor::zeros(type, shape);
      fillPattern(original);
      std::string path = tempPath(original.typeString() + ".npy");
      SCOPED_TRACE(path);
      writeNpy(path, original);

      std::string fileBytes = readFile(path);
      EXPECT_EQ(fileBytes, serializeNpy(original));
      EXPECT_EQ((fileBytes.size() - original.byteSize()) % 64, 0u) << "data must start aligned";

      Tensor loaded = readNpy(path);
      EXPECT_EQ(loaded.dtype(), type);
      EXPECT_EQ(loaded.shape(), shape);
      ASSERT_EQ(loaded.byteSize(), original.byteSize());
      EXPECT_EQ(std::memcmp(loaded.data(), original.data(), original.byteSize()), 0);
      std::remove(path.c_str());
    }
  }
}

TEST(NpyTest, SerializesExactlyLikeNumPy) {
  // np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)): 10 bytes of preamble, the dict,
  // spaces and a newline so that the data starts at byte 128; 0x76 ('v') = 118 header bytes.
  Tensor tensor = Tensor::zeros(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i)
    tensor.as<float>()[i] = static_cast<float>(i);
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expectedHeader = "\x93NUMPY\x01\x00v\x00"s + dict + std::string(58, ' ') + "\n";
  ASSERT_EQ(expectedHeader.size(), 128u);

  std::string bytes = serializeNpy(tensor);
  EXPECT_EQ(bytes.substr(0, 128), expectedHeader);
  EXPECT_EQ(bytes.substr(128), f32Bytes({0, 1, 2, 3, 4, 5}));
}

TEST(NpyTest, SerializesOtherShapesLikeNumPy) {
  std::string scalar = serializeNpy(Tensor::zeros(DType::I64, {}));
  EXPECT_EQ(scalar.substr(10, 57), "{'descr': '<i8', 'fortran_order': False, 'shape': (), }  ");
  EXPECT_EQ(scalar.size(), 128u + 8u);

  std::string vector = serializeNpy(Tensor::zeros(DType::I1, {5}));
  EXPECT_THAT(vector, HasSubstr("{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }"));
  EXPECT_EQ(vector.size(), 128u + 5u);

  // Current NumPy adds 21 - len(str(shape[0])) spaces so the first dimension can grow in
  // place; for this 101-character dict they push the data start from 128 to 192.
  std::string rank16 = serializeNpy(Tensor::zeros(DType::F32, std::vector<int64_t>(16, 1)));
  EXPECT_EQ(rank16.size(), 192u + 4u);
  EXPECT_EQ(rank16.substr(8, 2), "\xb6\x00"s);
}

TEST(NpyTest, ReadsVersion2And3Headers) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n";
  for (uint8_t major : {2, 3}) {
    Tensor tensor = parseNpy(npyBytes(dict, f32Bytes({1.5f, -2, 4}), major), "v.npy");
    EXPECT_EQ(tensor.dtype(), DType::F32);
    EXPECT_EQ(tensor.shape(), std::vector<int64_t>{3});
    EXPECT_EQ(tensor.as<float>()[0], 1.5f);
    EXPECT_EQ(tensor.as<float>()[2], 4.0f);
  }
}

TEST(NpyTest, ParsesHeaderDictVariants) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", {2, 3}},
      {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (6,)}", {6}},
      {"{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }   \n", {2, 3}},
      {"{'descr':'<f4','fortran_order':False,'shape':(1,2,3)}", {1, 2, 3}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", {2, 3}},
  };
  for (const auto &[dict, shape] : cases) {
    SCOPED_TRACE(dict);
    Tensor tensor = parseNpy(npyBytes(dict, std::string(24, '\0')), "h.npy");
    EXPECT_EQ(tensor.shape(), shape);
  }
  Tensor scalar = parseNpy(
      npyBytes("{'descr': '<i2', 'fortran_order': False, 'shape': ()}", "\x07\x00"s), "h.npy");
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.as<int16_t>()[0], 7);
}

TEST(NpyTest, RejectsBadMagic) {
  EXPECT_EQ(parseError("PK\x03\x04 this is a zip file"),
            "x.npy: error: not a .npy file: bad magic string (expected \\x93NUMPY)");
}

TEST(NpyTest, RejectsUnsupportedVersion) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
  EXPECT_EQ(parseError(npyBytes(dict, "", 4)),
            "x.npy: error: unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
  EXPECT_THAT(parseError(npyBytes(dict, "", 1, 1)),
              HasSubstr("unsupported .npy format version 1.1"));
}

TEST(NpyTest, RejectsTruncatedHeader) {
  EXPECT_EQ(parseError("\x93NUMPY\x01"),
            "x.npy: error: truncated header: the file has only 7 bytes");
  EXPECT_EQ(parseError("\x93NUMPY\x02\x00\x10\x00"s),
            "x.npy: error: truncated header: the file has only 10 bytes");
  std::string cut = serializeNpy(Tensor::zeros(DType::F32, {2, 3})).substr(0, 40);
  EXPECT_EQ(parseError(cut),
            "x.npy: error: truncated header: the header needs 118 bytes, found 30");
}

TEST(NpyTest, RejectsMalformedHeaderDict) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"['descr', '<f4']", "expected '{' at the start of the header"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': ()}", "expected '}' after the value of"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}",
       "duplicate key 'descr'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': ()}", "expected ':' after key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "to start the 'shape' tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", "expected an integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ()} junk", "unexpected text after"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x", "unterminated string"},
      {"", "expected '{' at the start of the header"},
  };
  for (const auto &[dict, problem] : cases) {
    SCOPED_TRACE(dict);
    std::string message = parseError(npyBytes(dict));
    EXPECT_THAT(message, StartsWith("x.npy: error: malformed .npy header dict: "));
    EXPECT_THAT(message, HasSubstr(problem));
  }
}

TEST(NpyTest, RejectsUnsupportedDType) {
  EXPECT_EQ(
      parseError(npyBytes("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", "ab")),
      "x.npy: error: unsupported dtype '<u2'; supported: '<f4' (f32), '<f2' (f16), '<f8' (f64), "
      "'|b1' (i1), '|i1' (i8), '<i2' (i16), '<i4' (i32), '<i8' (i64)");
  EXPECT_THAT(
      parseError(npyBytes("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", "a")),
      HasSubstr("unsupported dtype '|u1'"));
}

TEST(NpyTest, RejectsBigEndian) {
  EXPECT_EQ(
      parseError(npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd")),
      "x.npy: error: unsupported dtype '>f4': big-endian data is not supported; save with "
      "arr.astype('<f4')");
}

TEST(NpyTest, RejectsFortranOrder) {
  std::string dict = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }";
  EXPECT_EQ(parseError(npyBytes(dict, std::string(24, '\0'))),
            "x.npy: error: Fortran-order arrays are not supported; save with "
            "np.ascontiguousarray");
}

TEST(NpyTest, RejectsNegativeDimension) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }";
  EXPECT_EQ(parseError(npyBytes(dict)), "x.npy: error: negative dimension -3 in 'shape'");
}

TEST(NpyTest, RejectsHugeShapeWithoutAllocating) {
  std::string dict =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
  EXPECT_THAT(parseError(npyBytes(dict)), HasSubstr("shape (4294967296, 4294967296) is too large"));
  dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }";
  EXPECT_THAT(parseError(npyBytes(dict)), HasSubstr("in 'shape' is too large"));
}

TEST(NpyTest, RejectsTruncatedData) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(parseError(npyBytes(dict, std::string(20, '\0'))),
            "x.npy: error: truncated data: expected 24 bytes, found 20");
}

TEST(NpyTest, RejectsTrailingBytes) {
  std::string bytes = serializeNpy(Tensor::zeros(DType::I32, {3})) + "!";
  EXPECT_EQ(parseError(bytes),
            "x.npy: error: trailing bytes after the data: expected 12 bytes, found 13");
}

TEST(NpyTest, ReportsMissingFile) {
  std::string path = tempPath("does_not_exist.npy");
  try {
    readNpy(path);
    FAIL() << "readNpy accepted a missing file";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": error: cannot open file: No such file or directory");
  }
}

TEST(NpyTest, ReportsUnreadableFile) {
  // A directory opens like a file on Linux but fails on the first read.
  std::string path = ::testing::TempDir();
  try {
    readNpy(path);
    FAIL() << "readNpy accepted a directory";
  } catch (const Error &error) {
    EXPECT_THAT(error.what(), StartsWith(path + ": error: cannot "));
  }
}

TEST(NpyTest, RefusesToWriteBF16) {
  std::string path = tempPath("bf16.npy");
  Tensor tensor = Tensor::zeros(DType::BF16, {4});
  try {
    writeNpy(path, tensor);
    FAIL() << "writeNpy accepted a bf16 tensor";
  } catch (const Error &error) {
    EXPECT_THAT(error.what(), StartsWith(path + ": error: bf16 has no .npy dtype"));
  }
  EXPECT_FALSE(std::ifstream(path).good()) << "no file may be left behind";
  EXPECT_THROW(serializeNpy(tensor), Error);
}

TEST(NpyTest, ReportsUnwritablePath) {
  std::string path = tempPath("no_such_dir/out.npy");
  try {
    writeNpy(path, Tensor::zeros(DType::F32, {1}));
    FAIL() << "writeNpy wrote into a missing directory";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": error: cannot open file for writing: No such file or directory");
  }
}

// A borrowed tensor's shape is checked where it is written: negative dims (whose product
// NumPy cannot read back) and more than 2^63 elements of no data (whose count had wrapped to 0
// and passed as empty).
TEST(NpyTest, RefusesToWriteBorrowedShapesThatAreNoTensor) {
  std::vector<float> data(4);
  try {
    serializeNpy(Tensor::borrow(data.data(), DType::F32, {-2, -2}));
    FAIL() << "serializeNpy wrote a shape of negative dims";
  } catch (const Error &error) {
    EXPECT_THAT(error.what(), HasSubstr("cannot write a tensor of shape (-2, -2): negative"));
  }
  Tensor huge = Tensor::borrow(nullptr, DType::F32, {int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_EQ(huge.numel(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(huge.valid());
  EXPECT_THROW(serializeNpy(huge), Error);
}

// A device or a pipe that does not end is refused from its first bytes, not read to its end.
TEST(NpyTest, ReadsNoFurtherThanTheHeaderDeclares) {
  try {
    readNpy("/dev/zero");
    FAIL() << "readNpy accepted /dev/zero";
  } catch (const Error &error) {
    EXPECT_THAT(error.what(), HasSubstr("/dev/zero: error: not a .npy file: bad magic string"));
  }
}

// A declared size past the machine's memory is refused when the header has been read, before
// the data (a pipe's endless data had been read until the allocation failed).
TEST(NpyTest, RefusesADeclaredSizePastTheMachinesMemory) {
  std::string path = tempPath("huge.npy");
  std::ofstream(path, std::ios::binary)
      << npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 100000000000), }",
                  std::string(4096, '\0'));
  try {
    readNpy(path);
    FAIL() << "readNpy accepted 800 GB of declared data";
  } catch (const Error &error) {
    EXPECT_THAT(error.what(), HasSubstr("shape (1, 2, 100000000000) declares 800000000000 bytes, "
                                        "more than this machine's"));
  }
  Tensor huge = Tensor::borrow(nullptr, DType::F32, {int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_EQ(huge.byteSize(), std::numeric_limits<size_t>::max());
}
