// The diagnostics of every stage after the parser, as tables: specialization, unsupported
// constructs, linking, .npy files, command-line flags and run-time checks. Each case states the
// exact location and the exact first line of its error; ParserTest.cpp holds the parser's and
// the verifier's table. Internal errors (bugs) must stay distinguishable from user errors.
#include "Engine.h"
#include "ir/Diagnostics.h"
#include "Isolation.h"
#include "TestSupport.h"
#include "ToolSupport.h"
#include "frank/Npy.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace frank::test {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

// ---- Internal errors versus user errors ---------------------------------------------------

TEST(InternalErrors, AreTheirOwnTypeAndSayWhatTheyAre) {
  try {
    internalError("x");
    FAIL() << "internalError returned";
  } catch (const InternalError &e) {
    EXPECT_EQ(std::string(e.what()),
              "internal compiler error (a bug in frank-jit, please report it): x");
  }
  // Callers that report any frank failure still catch it as an Error.
  EXPECT_THROW(internalError("x"), Error);
}

TEST(InternalErrors, UserErrorsAreNotInternal) {
  try {
    Context ctx;
    ctx.loadString("util.func @f( {\n", "t.mlir");
    FAIL() << "a parse error was accepted";
  } catch (const InternalError &e) {
    FAIL() << "a parse error reported as a bug: " << e.what();
  } catch (const Error &e) {
    EXPECT_THAT(e.what(), testing::StartsWith("t.mlir:1:15: error: "));
  }
}

TEST(InternalErrors, CommandLineExitsOneForUserErrors) {
  std::string path = tempPath("bad.mlir");
  writeFile(path, "util.func @f( {\n");
  ToolResult r = runTool({"compile", path});
  EXPECT_FAILURE(r);
  EXPECT_THAT(r.err, testing::StartsWith(path + ":1:15: error: "));
  EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("internal")));
}

// ---- Shared checking ------------------------------------------------------------------------

/// Checks an error text: its first line is exactly `where: error: message` (or `error: message`
/// when `where` is empty), and a `file:line:col` location is followed by the source line from
/// `source` and a caret under the column.
void expectError(const std::string &text, const std::string &where, const std::string &message,
                 const std::string &source) {
  std::vector<std::string> lines = splitLines(text);
  ASSERT_FALSE(lines.empty()) << "an empty error message";
  std::string first = where.empty() ? "error: " + message : where + ": error: " + message;
  EXPECT_EQ(lines[0], first) << "full error:\n" << text;
  unsigned line = 0, col = 0;
  size_t colon = where.find(':');
  if (colon == std::string::npos ||
      std::sscanf(where.c_str() + colon + 1, "%u:%u", &line, &col) != 2) {
    EXPECT_EQ(lines.size(), 1u) << "an unlocated error with context lines:\n" << text;
    return;
  }
  std::vector<std::string> sourceLines = splitLines(source);
  if (line > sourceLines.size() || sourceLines[line - 1].empty()) {
    // End of file after a final newline: there is no source line to show.
    EXPECT_EQ(lines.size(), 1u) << text;
    return;
  }
  ASSERT_EQ(lines.size(), 3u) << "expected message, source line and caret:\n" << text;
  EXPECT_EQ(lines[1], sourceLines[line - 1]);
  EXPECT_EQ(lines[2], std::string(col - 1, ' ') + "^");
}

Tensor f32(std::vector<int64_t> shape) { return Tensor::zeros(DType::F32, std::move(shape)); }

/// An i32 tensor holding `values`.
Tensor i32(std::vector<int64_t> shape, std::vector<int32_t> values) {
  Tensor t = Tensor::zeros(DType::I32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.as<int32_t>()[i] = values[i];
  return t;
}

/// An i64 tensor holding `values`.
Tensor i64(std::vector<int64_t> shape, std::vector<int64_t> values) {
  Tensor t = Tensor::zeros(DType::I64, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.as<int64_t>()[i] = values[i];
  return t;
}

// ---- Sources the cases share ----------------------------------------------------------------

// Line 8 divides tensor data; line 14 divides two scalars.
const char *kDivide =
    R"(util.func @quotients(%a: tensor<?xi32>, %b: tensor<?xi32>) -> tensor<?xi32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xi32>
  %e = tensor.empty(%n) : tensor<?xi32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<?xi32>, tensor<?xi32>) outs(%e : tensor<?xi32>) {
  ^bb0(%x: i32, %y: i32, %o: i32):
    %q = arith.divsi %x, %y : i32
    linalg.yield %q : i32
  } -> tensor<?xi32>
  util.return %r : tensor<?xi32>
}
util.func @remainder(%a: i32, %b: i32) -> i32 {
       %r = arith.remui %a, %b : i32
  util.return %r : i32
}
)";

const char *kRuntimeStep = R"(util.func @f(%step: index, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %step iter_args(%acc = %x) -> (f32) {
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  }
  util.return %r : f32
}
)";

const char *kSliceAt =
    R"(util.func @f(%t: tensor<?xf32>, %at: index, %size: index) -> tensor<?xf32> {
       %r = tensor.extract_slice %t[%at] [%size] [1] : tensor<?xf32> to tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";

const char *kCast = R"(util.func @f(%t: tensor<?xf32>) -> tensor<4xf32> {
       %r = tensor.cast %t : tensor<?xf32> to tensor<4xf32>
  util.return %r : tensor<4xf32>
}
)";

// Slices whose sizes come from an argument: the inserted tensor and the declared slice type
// must agree with them (line 4 and line 8).
const char *kSlicesOfGivenSize =
    R"(util.func @insert(%a: tensor<?x?xf32>, %z: tensor<?x?xf32>, %n: index) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %a, %c0 : tensor<?x?xf32>
  %r = tensor.insert_slice %a into %z[0, 0] [%t, %n] [1, 1] : tensor<?x?xf32> into tensor<?x?xf32>
  util.return %r : tensor<?x?xf32>
}
util.func @extract(%a: tensor<?xf32>, %n: index) -> tensor<4xf32> {
  %s = tensor.extract_slice %a[0] [%n] [1] : tensor<?xf32> to tensor<4xf32>
  util.return %s : tensor<4xf32>
}
)";

// Concats of runtime extents (line 2 and line 6).
const char *kConcats =
    R"(util.func @rows(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %r = tensor.concat dim(1) %a, %b : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  util.return %r : tensor<?x?xf32>
}
util.func @three(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<3x4xf32> {
  %r = tensor.concat dim(0) %a, %b : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<3x4xf32>
  util.return %r : tensor<3x4xf32>
}
)";

// Two results, for outputs given to Kernel::run.
const char *kTwoResults =
    R"(util.func @two(%a: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  util.return %a, %a : tensor<?xf32>, tensor<?xf32>
}
)";

// A loop whose carried tensor grows by a row each iteration (the yield on line 5).
const char *kGrowingCarry =
    R"(util.func @grow(%h0: tensor<?x4xf32>, %t: tensor<1x4xf32>, %k: index) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %k step %c1 iter_args(%h = %h0) -> (tensor<?x4xf32>) {
    %c = tensor.concat dim(0) %h, %t : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
    scf.yield %c : tensor<?x4xf32>
  }
  util.return %r : tensor<?x4xf32>
}
)";

// A slice and a collapse to static dims of sizes that tensor.dim reads (lines 3 and 6).
const char *kStaticFromDims =
    R"(util.func @rows(%a: tensor<?x4xf32>) -> tensor<2x4xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?x4xf32>
       %r = tensor.extract_slice %a[0, 0] [%n, 4] [1, 1] : tensor<?x4xf32> to tensor<2x4xf32>
  util.return %r : tensor<2x4xf32>
}
util.func @flat(%a: tensor<?x?xf32>) -> tensor<6xf32> {
  %r = tensor.collapse_shape %a [[0, 1]] : tensor<?x?xf32> into tensor<6xf32>
  util.return %r : tensor<6xf32>
}
)";

// Reshapes to static dims from runtime ones (line 2 and line 6).
const char *kReshapesToStaticDims = R"(util.func @collapse(%a: tensor<?x?xf32>) -> tensor<6xf32> {
  %s = tensor.collapse_shape %a [[0, 1]] : tensor<?x?xf32> into tensor<6xf32>
  util.return %s : tensor<6xf32>
}
util.func @expand(%a: tensor<?xf32>, %n: index) -> tensor<3x2xf32> {
  %s = tensor.expand_shape %a [[0, 1]] output_shape [%n, 2] : tensor<?xf32> into tensor<3x2xf32>
  util.return %s : tensor<3x2xf32>
}
)";

// Line 4 holds an scf.if on tensors that a float argument decides.
const char *kIfOnRuntimeCondition =
    R"(util.func @f(%a: tensor<2xf32>, %b: tensor<2xf32>, %x: f32) -> tensor<2xf32> {
  %z = arith.constant 0.0 : f32
  %c = arith.cmpf ogt, %x, %z : f32
  %r = scf.if %c -> (tensor<2xf32>) {
    scf.yield %a : tensor<2xf32>
  } else {
    scf.yield %b : tensor<2xf32>
  }
  util.return %r : tensor<2xf32>
}
)";

// A slice whose size (lines 4-5) and window (line 6) come from arguments: %t's last %n-th, from
// %at to its end.
const char *kSliceFromArguments =
    R"(util.func @f(%t: tensor<?xf32>, %n: index, %at: index) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %t, %c0 : tensor<?xf32>
  %part = arith.divui %d, %n : index
  %size = arith.subi %part, %at : index
  %r = tensor.extract_slice %t[%at] [%size] [1] : tensor<?xf32> to tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";

// A division at line 7 by a float argument made an integer, whose result a body adds.
const char *kDivisorFromFloat = R"(#id = affine_map<(d0) -> (d0)>
util.func @f(%t: tensor<?xf32>, %x: f32) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %t, %c0 : tensor<?xf32>
  %i = arith.fptosi %x : f32 to i64
  %n = arith.index_cast %i : i64 to index
  %q = arith.divui %d, %n : index
  %qi = arith.index_cast %q : index to i64
  %qf = arith.sitofp %qi : i64 to f32
  %e = tensor.empty(%d) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%t : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %qf : f32
    linalg.yield %s : f32
  } -> tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";

// Sizes the host cannot know before the call: from a float argument (line 4) and from tensor
// data (line 8). They had stopped the call with an internal compiler error.
const char *kSizesFromValues =
    R"(util.func @from_float(%t: tensor<?xf32>, %x: f32) -> tensor<?xf32> {
  %i = arith.fptosi %x : f32 to i64
  %n = arith.index_cast %i : i64 to index
  %r = tensor.extract_slice %t[0] [%n] [1] : tensor<?xf32> to tensor<?xf32>
  util.return %r : tensor<?xf32>
}
util.func @from_data(%lens: tensor<2xi64>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %l = tensor.extract %lens[%c0] : tensor<2xi64>
  %n = arith.index_cast %l : i64 to index
  %r = tensor.empty(%n) : tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";

// A gather (line 2) into slices of a width the caller chooses: they must be the rows' width.
const char *kRowsOfWidth =
    R"(util.func @rows(%w: tensor<?x?xf32>, %ids: tensor<?xi64>, %out: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %rows = iree_linalg_ext.gather dimension_map = [0]
      ins(%w, %ids : tensor<?x?xf32>, tensor<?xi64>)
      outs(%out : tensor<?x?xf32>) -> tensor<?x?xf32>
  util.return %rows : tensor<?x?xf32>
}
)";

// Line 7 holds the generic whose loop dims tie %a and %b together.
const char *kAdd = R"(util.func @add(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = tensor.dim %a, %c0 : tensor<?x?xf32>
  %n = tensor.dim %a, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  util.return %r : tensor<?x?xf32>
}
util.func @scale(%v: tensor<4xf32>, %k: f32) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%v : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %k : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  util.return %r : tensor<4xf32>
}
)";

// Sizes from integer arguments: assumed ranges (lines 2 and 24), a size (line 14), a divisor
// (line 9).
const char *kSized = R"(util.func @sized(%n: index) -> tensor<?xf32> {
  %m = util.assume.int %n<umin = 1, umax = 64, udiv = 4> : index
  %e = tensor.empty(%m) : tensor<?xf32>
  util.return %e : tensor<?xf32>
}
util.func @split(%x: tensor<?xf32>, %parts: index) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %len = tensor.dim %x, %c0 : tensor<?xf32>
  %each = arith.divui %len, %parts : index
  %e = tensor.empty(%each) : tensor<?xf32>
  util.return %e : tensor<?xf32>
}
util.func @raw(%n: index) -> tensor<?xf32> {
  %e = tensor.empty(%n) : tensor<?xf32>
  util.return %e : tensor<?xf32>
}
util.func @narrow(%k: i8, %flag: i1) -> i8 {
  util.return %k : i8
}
util.func @half(%h: f16) -> f16 {
  util.return %h : f16
}
util.func @capped(%n: index) -> tensor<?xf32> {
  %m = util.assume.int %n<umax = 8> : index
  %e = tensor.empty(%m) : tensor<?xf32>
  util.return %e : tensor<?xf32>
}
util.func @reshaped(%x: tensor<?xf32>, %a: index, %b: index) -> tensor<?x?xf32> {
  %y = tensor.expand_shape %x [[0, 1]] output_shape [%a, %b] : tensor<?xf32> into tensor<?x?xf32>
  util.return %y : tensor<?x?xf32>
}
)";

// A gather (line 7) and a tensor.extract in a generic body (line 18): indices read at run time.
const char *kLookup =
    R"(util.func @lookup(%w: tensor<?x?xf32>, %ids: tensor<?xi64>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %ids, %c0 : tensor<?xi64>
  %d = tensor.dim %w, %c1 : tensor<?x?xf32>
  %init = tensor.empty(%b, %d) : tensor<?x?xf32>
  %rows = iree_linalg_ext.gather dimension_map = [0]
      ins(%w, %ids : tensor<?x?xf32>, tensor<?xi64>)
      outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
  util.return %rows : tensor<?x?xf32>
}
util.func @pick(%t: tensor<?xf32>, %ids: tensor<?xi64>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %ids, %c0 : tensor<?xi64>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%ids : tensor<?xi64>) outs(%e : tensor<?xf32>) {
  ^bb0(%id: i64, %o: f32):
    %i = arith.index_cast %id : i64 to index
    %v = tensor.extract %t[%i] : tensor<?xf32>
    linalg.yield %v : f32
  } -> tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";

// A contraction (line 9), for --config overrides.
const char *kMatmul =
    R"(util.func @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x?xf32>
  %n = tensor.dim %b, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%f : tensor<?x?xf32>) -> tensor<?x?xf32>
  util.return %r : tensor<?x?xf32>
}
)";

// kMatmul with the lowering choices `config` set on its matmul.
std::string matmulWithConfig(const std::string &config) {
  std::string text = kMatmul;
  const std::string op = "linalg.matmul ";
  return text.replace(text.find(op), op.size(),
                      fmt::format("linalg.matmul {{frank.config = \"{}\"}} ", config));
}

// ---- The API table: specialization, unsupported constructs, run-time checks ----------------

struct ApiCase {
  const char *name;
  const char *text; // loaded as "t.mlir"
  std::function<void(Module &)> call;
  const char *where; // "t.mlir:L:C", or "" where no source text is involved
  const char *message;
  bool boundsChecks = true;
};

std::ostream &operator<<(std::ostream &os, const ApiCase &c) { return os << c.name; }

const ApiCase kApiCases[] = {
    // ---- Arguments against the signature.
    {"argument_count", kAdd,
     [](Module &m) {
       m.function("add")({f32({2, 3})});
     },
     "", "in call to '@add': expected 2 arguments, got 1"},
    {"argument_rank", kAdd,
     [](Module &m) {
       m.function("add")({f32({6}), f32({2, 3})});
     },
     "",
     "in call to '@add': argument #0 (%a) has rank 2 ('tensor<?x?xf32>') but was given rank 1 "
     "('6xf32')"},
    {"argument_dtype", kAdd,
     [](Module &m) {
       m.function("add")({f32({2, 3}), i64({2, 3}, {})});
     },
     "", "in call to '@add': argument #1 (%b) has element type f32 but was given i64 ('2x3xi64')"},
    {"argument_static_dim", kAdd,
     [](Module &m) {
       m.function("scale")({f32({5}), Scalar::f32(2)});
     },
     "",
     "in call to '@scale': argument #0 (%v) dim 0 is 4 in the signature ('tensor<4xf32>') but "
     "was given 5"},
    {"argument_negative_dim", kAdd,
     [](Module &m) {
       m.function("add").specialize({Tensor::borrow(nullptr, DType::F32, {2, -3}), f32({2, 3})});
     },
     "", "in call to '@add': argument #0 (%a) dim 1 has negative size -3"},
    // -1 is no runtime dim (it had come back as zeros), nor is any negative dim to a generic
    // kernel called directly.
    {"argument_dim_minus_one", kAdd,
     [](Module &m) {
       std::vector<float> x(6);
       m.function("add")({Tensor::borrow(x.data(), DType::F32, {2, -1}), f32({2, 3})});
     },
     "", "in call to '@add': argument #0 (%a) dim 1 has negative size -1"},
    {"generic_kernel_negative_dim", kAdd,
     [](Module &m) {
       std::vector<float> x(6);
       Kernel k = m.function("add").specialize({f32({2, 3}), f32({2, 3})}, Mode::Generic);
       k({Tensor::borrow(x.data(), DType::F32, {2, -3}), f32({2, 3})});
     },
     "", "kernel for '@add': argument #0 dim 1 has negative size -3"},
    // Its bytes wrapped to 0 (2^64), and the kernel read past the memory.
    {"argument_bytes_overflow", kAdd,
     [](Module &m) {
       std::vector<float> x(6);
       m.function("add")({Tensor::borrow(x.data(), DType::F32, {1, int64_t{1} << 62}),
                          Tensor::borrow(x.data(), DType::F32, {1, int64_t{1} << 62})});
     },
     "",
     "in call to '@add': argument #0 (%a) ('1x4611686018427387904xf32') has more than 2^63 "
     "bytes"},
    {"scalar_for_tensor", kAdd,
     [](Module &m) {
       m.function("add")({Scalar::f32(1), f32({2, 3})});
     },
     "", "in call to '@add': argument #0 (%a) is 'tensor<?x?xf32>' but was given a scalar"},
    {"tensor_for_scalar", kAdd,
     [](Module &m) {
       m.function("scale")({f32({4}), f32({1})});
     },
     "", "in call to '@scale': argument #1 (%k) has type 'f32' but was given '1xf32'"},
    {"float_for_index", kSized, [](Module &m) { m.function("raw")({Scalar::f32(2)}); }, "",
     "in call to '@raw': argument #0 (%n) is index but was given a float"},
    // An index where a float belongs is an argument out of place, not 4.0.
    {"integer_for_float", kAdd,
     [](Module &m) {
       m.function("scale")({f32({4}), Scalar::index(4)});
     },
     "", "in call to '@scale': argument #1 (%k) is f32 but was given an integer (4)"},
    // The same through a kernel (it had run with 3.0).
    {"kernel_integer_for_float", kAdd,
     [](Module &m) {
       Kernel k = m.function("scale").specialize({f32({4}), Scalar::f32(2)});
       k({f32({4}), Scalar::i64(3)});
     },
     "", "kernel for '@scale': argument #1 is f32 but was given an integer (3)"},
    // A type string names the declared type exactly.
    {"type_string_of_another_float", kAdd,
     [](Module &m) {
       m.function("scale").specialize(std::vector<std::string>{"4xf32", "f16"});
     },
     "", "in call to '@scale': argument #1 (%k) is f32 but was given 'f16'"},
    {"emit_unknown_stage", kAdd,
     [](Module &m) {
       m.function("add").emit(static_cast<Stage>(6), {"2x3xf32", "2x3xf32"});
     },
     "", "no stage 6 to emit"},
    {"float_out_of_range_of_f32", kAdd,
     [](Module &m) {
       m.function("scale")({f32({4}), Scalar{DType::F64, false, 1e300, 0}});
     },
     "", "in call to '@scale': argument #1 (%k) is f32 but 1e+300 does not fit"},
    {"integer_out_of_range_of_i8", kSized,
     [](Module &m) {
       m.function("narrow")({Scalar::i64(300), Scalar::i1(true)});
     },
     "", "in call to '@narrow': argument #0 (%k) is i8 but 300 does not fit"},
    {"flag_not_zero_or_one", kSized,
     [](Module &m) {
       m.function("narrow")({Scalar::i64(1), Scalar::i64(2)});
     },
     "", "in call to '@narrow': argument #1 (%flag) is i1 but was given 2"},
    {"flag_without_value", kSized,
     [](Module &m) {
       m.function("narrow").specialize(std::vector<std::string>{"i8", "i1"});
     },
     "",
     "in call to '@narrow': argument #1 (%flag) is an i1 flag, a specialization key: give its "
     "value as i1=true or i1=false"},
    {"type_string_bad_dims", kAdd,
     [](Module &m) {
       m.function("add").specialize(std::vector<std::string>{"2x-3xf32", "2x3xf32"});
     },
     "",
     "bad type '2x-3xf32': dims must be non-negative integers or ? separated by 'x', as in "
     "32x4096xf32"},
    {"type_string_unknown_element", kAdd,
     [](Module &m) {
       m.function("add").specialize(std::vector<std::string>{"2x3xq8", "2x3xf32"});
     },
     "",
     "bad type '2x3xq8': unknown element type 'q8' (expected f32, f16, bf16, f64, i1, i8, i16, "
     "i32, i64 or index)"},
    {"type_string_past_2_63_bytes", kAdd,
     [](Module &m) {
       m.function("add").specialize(
           std::vector<std::string>{"4294967296x4294967296xf32", "2x3xf32"});
     },
     "", "bad type '4294967296x4294967296xf32': more than 2^63 bytes"},
    {"tensor_past_2_63_bytes", kSized,
     [](Module &m) {
       m.function("raw").specialize(std::vector<std::string>{"index=4611686018427387904"});
     },
     "t.mlir:14:3", "'tensor<4611686018427387904xf32>' has more than 2^63 bytes"},
    {"type_string_bad_scalar_value", kSized,
     [](Module &m) { m.function("raw").specialize(std::vector<std::string>{"index=four"}); }, "",
     "bad scalar 'index=four': 'four' is not a valid index"},
    {"unknown_function", kAdd, [](Module &m) { m.function("mul"); }, "",
     "no function '@mul' in module; it defines: @add, @scale"},
    {"half_scalar_argument", kSized,
     [](Module &m) {
       m.function("half")({Scalar{DType::F16, false, 1.0, 0}});
     },
     "t.mlir:20:17", "unsupported argument type 'f16': scalar float arguments must be f32 or f64"},

    // ---- Shapes that contradict each other, in both modes.
    {"mismatched_dims_specialized", kAdd,
     [](Module &m) {
       m.function("add")({f32({2, 3}), f32({2, 4})});
     },
     "t.mlir:7:3",
     "loop dim d1 of 'linalg.generic' has extent 3 from operand #0 (%a) dim 1 but 4 from operand "
     "#1 (%b) dim 1"},
    {"mismatched_dims_generic", kAdd,
     [](Module &m) {
       m.function("add")({f32({2, 3}), f32({5, 3})}, Mode::Generic);
     },
     "t.mlir:7:3",
     "loop dim d0 of 'linalg.generic' has extent 2 from operand #0 (%a) dim 0 but 5 from operand "
     "#1 (%b) dim 0"},
    {"kernel_called_with_other_shape", kAdd,
     [](Module &m) {
       Kernel k = m.function("add").specialize({f32({2, 3}), f32({2, 3})});
       k({f32({2, 4}), f32({2, 4})});
     },
     "", "kernel for '@add' was compiled for argument #0 as 2x3xf32 but was given 2x4xf32"},
    // Values baked into a kernel: it had run with the values it was compiled for, a slice of
    // 2 at 1 where 3 at 2 was asked for, a flag's other branch.
    {"kernel_called_with_other_baked_index", kSliceAt,
     [](Module &m) {
       Kernel k = m.function("f").specialize({f32({5}), Scalar::index(1), Scalar::index(2)});
       k({f32({5}), Scalar::index(1), Scalar::index(2)});
       k({f32({5}), Scalar::index(2), Scalar::index(3)});
     },
     "", "kernel for '@f' was compiled for argument #1 as index=1 but was given index=2"},
    {"kernel_called_with_other_flag_generic", kSized,
     [](Module &m) {
       Kernel k =
           m.function("narrow").specialize({Scalar::i64(3), Scalar::i1(true)}, Mode::Generic);
       k({Scalar::i64(4), Scalar::i1(true)});
       k({Scalar::i64(4), Scalar::i1(false)});
     },
     "", "kernel for '@narrow' was compiled for argument #1 as i1=1 but was given i1=0"},
    {"output_count", kAdd,
     [](Module &m) {
       Kernel k = m.function("add").specialize({f32({2, 3}), f32({2, 3})});
       std::vector<Tensor> none;
       k.run({f32({2, 3}), f32({2, 3})}, none);
     },
     "", "'@add' has 1 results but 0 output tensors were given"},
    {"output_shape", kAdd,
     [](Module &m) {
       Kernel k = m.function("add").specialize({f32({2, 3}), f32({2, 3})});
       std::vector<Tensor> out{f32({3, 2})};
       k.run({f32({2, 3}), f32({2, 3})}, out);
     },
     "", "output #0 of '@add' must be 2x3xf32 but was given 3x2xf32"},
    {"output_overlaps_argument", kAdd,
     [](Module &m) {
       Kernel k = m.function("add").specialize({f32({2, 3}), f32({2, 3})});
       Tensor a = f32({2, 3});
       std::vector<Tensor> out{a};
       k.run({a, f32({2, 3})}, out);
     },
     "",
     "output #0 of '@add' overlaps argument #0; outputs must not share memory with the "
     "arguments"},
    // Outputs sharing memory had run, the second result overwriting the first; an output of
    // no data, and objects that hold nothing, had crashed.
    {"output_overlaps_output", kTwoResults,
     [](Module &m) {
       Kernel k = m.function("two").specialize({f32({4})});
       Tensor out = f32({4});
       std::vector<Tensor> outs{out, out};
       k.run({f32({4})}, outs);
     },
     "", "output #1 of '@two' overlaps output #0; outputs must not share memory"},
    {"output_without_data", kTwoResults,
     [](Module &m) {
       Kernel k = m.function("two").specialize({f32({4})});
       std::vector<Tensor> outs{f32({4}), Tensor::borrow(nullptr, DType::F32, {4})};
       k.run({f32({4})}, outs);
     },
     "", "output #1 of '@two' has no data"},
    {"kernel_holding_nothing", kTwoResults, [](Module &) { Kernel()({f32({4})}); }, "",
     "this Kernel holds nothing (it was default-constructed or moved from)"},
    {"function_holding_nothing", kTwoResults, [](Module &) { Function()({f32({4})}); }, "",
     "this Function holds nothing (it was default-constructed or moved from)"},
    {"module_holding_nothing", kTwoResults, [](Module &) { Module().function("two"); }, "",
     "this Module holds nothing (it was default-constructed or moved from)"},

    // ---- Integer arguments that size things.
    {"assume_below_minimum", kSized, [](Module &m) { m.function("sized")({Scalar::index(0)}); },
     "t.mlir:2:3", "%n = 0 violates its 'util.assume.int' range: it is below umin = 1"},
    {"assume_above_maximum", kSized, [](Module &m) { m.function("sized")({Scalar::index(68)}); },
     "t.mlir:2:3", "%n = 68 violates its 'util.assume.int' range: it is above umax = 64"},
    {"assume_not_a_multiple", kSized, [](Module &m) { m.function("sized")({Scalar::index(6)}); },
     "t.mlir:2:3", "%n = 6 violates its 'util.assume.int' range: it is not a multiple of udiv = 4"},
    {"assume_negative", kSized, [](Module &m) { m.function("sized")({Scalar::index(-4)}); },
     "t.mlir:2:3", "%n = -4 violates its 'util.assume.int' range: it is below umin = 1"},
    // The bounds are unsigned: -1 is above any umax, not a small size.
    {"assume_negative_against_umax", kSized,
     [](Module &m) { m.function("capped")({Scalar::index(-1)}); }, "t.mlir:24:3",
     "%n = -1 violates its 'util.assume.int' range: it is above umax = 8"},
    {"negative_size", kSized, [](Module &m) { m.function("raw")({Scalar::index(-1)}); },
     "t.mlir:14:3", "'tensor.empty' dim 0 has negative size -1 (%n)"},
    {"negative_size_generic", kSized,
     [](Module &m) { m.function("raw")({Scalar::index(-1)}, Mode::Generic); }, "t.mlir:14:3",
     "'tensor.empty' dim 0 has negative size -1 (%n)"},
    // Two negative sizes multiply to the source's: each size is checked, in both modes.
    {"negative_reshape", kSized,
     [](Module &m) {
       m.function("reshaped")({f32({6}), Scalar::index(-2), Scalar::index(-3)});
     },
     "t.mlir:29:3", "'tensor.expand_shape' output dim 0 is negative (-2)"},
    {"negative_reshape_generic", kSized,
     [](Module &m) {
       m.function("reshaped")({f32({6}), Scalar::index(-2), Scalar::index(-3)}, Mode::Generic);
     },
     "t.mlir:29:3", "'tensor.expand_shape' output dim 0 is negative (-2)"},
    // Generic mode had read past the slice's dims (a crash) where specialization reported it;
    // the types as written decide it now, as the module parses.
    {"rank_reduced_insert_generic",
     "func.func @f(%u: tensor<?xf32>) -> tensor<?xf32> {\n"
     "  %e = tensor.empty() : tensor<f32>\n"
     "  %r = tensor.insert_slice %e into %u[0] [0] [1] : tensor<f32> into tensor<?xf32>\n"
     "  return %r : tensor<?xf32>\n"
     "}\n",
     [](Module &m) { m.function("f")({f32({5})}, Mode::Generic); }, "t.mlir:3:52",
     "sizes [0] cannot be rank-reduced to 'tensor<f32>'"},
    {"zero_divisor", kSized,
     [](Module &m) {
       m.function("split")({f32({8}), Scalar::index(0)});
     },
     "t.mlir:9:3", "division by zero in 'arith.divui'"},
    {"zero_divisor_generic", kSized,
     [](Module &m) {
       m.function("split")({f32({8}), Scalar::index(0)}, Mode::Generic);
     },
     "t.mlir:9:3", "division by zero in 'arith.divui'"},

    // ---- Constructs that parse but that the later stages do not take.
    {"recursive_call",
     "util.func @f(%x: f32) -> f32 {\n"
     "  %y = util.call @f(%x) : (f32) -> f32\n"
     "  util.return %y : f32\n"
     "}\n",
     [](Module &m) { m.function("f")({Scalar::f32(1)}); }, "t.mlir:2:3",
     "recursive call to '@f' is not supported"},
    {"scf_if_on_runtime_condition", kIfOnRuntimeCondition,
     [](Module &m) {
       m.function("f")({f32({2}), f32({2}), Scalar::f32(1)});
     },
     "t.mlir:4:3",
     "unsupported: 'scf.if' outside a linalg body whose condition is not known when the kernel "
     "is compiled (only i1 arguments and constants decide such branches)"},
    {"scf_if_on_runtime_condition_generic", kIfOnRuntimeCondition,
     [](Module &m) {
       m.function("f")({f32({2}), f32({2}), Scalar::f32(1)}, Mode::Generic);
     },
     "t.mlir:4:3",
     "unsupported: 'scf.if' outside a linalg body whose condition is not known when the kernel "
     "is compiled (only i1 arguments and constants decide such branches)"},
    // Decided by a runtime dim, the branch is as unknown (specialization once refined the
    // regions' types, and then blamed the yields for disagreeing with the results').
    {"scf_if_on_runtime_dim",
     "util.func @f(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {\n"
     "  %c0 = arith.constant 0 : index\n"
     "  %c1 = arith.constant 1 : index\n"
     "  %t = tensor.dim %x, %c0 : tensor<?x?xf32>\n"
     "  %one = arith.cmpi eq, %t, %c1 : index\n"
     "  %r = scf.if %one -> (tensor<?x?xf32>) {\n"
     "    scf.yield %x : tensor<?x?xf32>\n"
     "  } else {\n"
     "    scf.yield %x : tensor<?x?xf32>\n"
     "  }\n"
     "  util.return %r : tensor<?x?xf32>\n"
     "}\n",
     [](Module &m) {
       m.function("f").withRuntimeDims({{"x", 0}})({f32({3, 4})});
     },
     "t.mlir:6:3",
     "unsupported: 'scf.if' outside a linalg body whose condition is not known when the kernel "
     "is compiled (only i1 arguments and constants decide such branches)"},
    {"scf_if_of_scalars_on_runtime_condition",
     "util.func @f(%x: f32) -> f32 {\n"
     "  %z = arith.constant 0.0 : f32\n"
     "  %c = arith.cmpf ogt, %x, %z : f32\n"
     "  %r = scf.if %c -> (f32) {\n"
     "    scf.yield %x : f32\n"
     "  } else {\n"
     "    scf.yield %z : f32\n"
     "  }\n"
     "  util.return %r : f32\n"
     "}\n",
     [](Module &m) { m.function("f")({Scalar::f32(1)}); }, "t.mlir:4:3",
     "unsupported: 'scf.if' outside a linalg body whose condition is not known when the kernel "
     "is compiled (only i1 arguments and constants decide such branches)"},
    {"gather_dimension_map_not_a_permutation",
     "util.func @f(%w: tensor<4x4xf32>, %ids: tensor<2x2xi64>) -> tensor<2xf32> {\n"
     "  %init = tensor.empty() : tensor<2xf32>\n"
     "  %r = iree_linalg_ext.gather dimension_map = [1, 1]\n"
     "      ins(%w, %ids : tensor<4x4xf32>, tensor<2x2xi64>)\n"
     "      outs(%init : tensor<2xf32>) -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n"
     "}\n",
     [](Module &m) {
       m.function("f")({f32({4, 4}), i64({2, 2}, {})});
     },
     "t.mlir:3:3", "'dimension_map' must be a permutation of 0..1"},
    {"scf_for_zero_step",
     "util.func @f(%x: f32) -> f32 {\n"
     "  %c0 = arith.constant 0 : index\n"
     "  %c4 = arith.constant 4 : index\n"
     "  %r = scf.for %i = %c0 to %c4 step %c0 iter_args(%acc = %x) -> (f32) {\n"
     "    %s = arith.addf %acc, %x : f32\n"
     "    scf.yield %s : f32\n"
     "  }\n"
     "  util.return %r : f32\n"
     "}\n",
     [](Module &m) { m.function("f")({Scalar::f32(1)}); }, "t.mlir:4:3",
     "'scf.for' needs a positive step, found 0"},
    {"tensor_dim_index_out_of_range",
     "util.func @f(%a: tensor<?xf32>) -> index {\n"
     "  %c3 = arith.constant 3 : index\n"
     "  %d = tensor.dim %a, %c3 : tensor<?xf32>\n"
     "  util.return %d : index\n"
     "}\n",
     [](Module &m) { m.function("f")({f32({2})}); }, "t.mlir:3:3",
     "'tensor.dim' index 3 is out of range for 'tensor<2xf32>'"},

    // ---- Run-time checks: indices read from tensors, with bounds checks on.
    {"gather_index_too_large", kLookup,
     [](Module &m) {
       m.function("lookup")({f32({3, 4}), i64({2}, {0, 3})});
     },
     "t.mlir:7:3", "index 3 is out of bounds for dim 0 of '%w', which has size 3"},
    {"gather_index_negative", kLookup,
     [](Module &m) {
       m.function("lookup")({f32({3, 4}), i64({2}, {-1, 0})});
     },
     "t.mlir:7:3", "index -1 is out of bounds for dim 0 of '%w', which has size 3"},
    // A gather writes whole slices of its source (IREE verifies it): narrower ones had
    // silently dropped the source's last columns.
    {"gather_slices_narrower_than_the_source", kRowsOfWidth,
     [](Module &m) {
       m.function("rows")({f32({3, 5}), i64({2}, {1, 2}), f32({2, 4})});
     },
     "t.mlir:2:3", "the gather's output has slices of 4 along dim 1 of '%w', which has size 5"},
    {"gather_slices_narrower_than_the_source_generic", kRowsOfWidth,
     [](Module &m) {
       m.function("rows")({f32({3, 5}), i64({2}, {1, 2}), f32({2, 4})}, Mode::Generic);
     },
     "t.mlir:2:3", "the gather's output has slices of 4 along dim 1 of '%w', which has size 5"},
    {"gather_slices_narrower_than_the_source_runtime_dims", kRowsOfWidth,
     [](Module &m) {
       m.function("rows").withRuntimeDims({{"w", 1}, {"out", 1}})(
           {f32({3, 5}), i64({2}, {1, 2}), f32({2, 4})});
     },
     "t.mlir:2:3", "the gather's output has slices of 4 along dim 1 of '%w', which has size 5"},
    {"gather_index_generic", kLookup,
     [](Module &m) {
       m.function("lookup")({f32({3, 4}), i64({1}, {1 << 20})}, Mode::Generic);
     },
     "t.mlir:7:3", "index 1048576 is out of bounds for dim 0 of '%w', which has size 3"},
    {"extract_index_too_large", kLookup,
     [](Module &m) {
       m.function("pick")({f32({5}), i64({3}, {0, 4, 5})});
     },
     "t.mlir:20:5", "index 5 is out of bounds for dim 0 of '%t', which has size 5"},
    {"extract_index_generic", kLookup,
     [](Module &m) {
       m.function("pick")({f32({5}), i64({1}, {-7})}, Mode::Generic);
     },
     "t.mlir:20:5", "index -7 is out of bounds for dim 0 of '%t', which has size 5"},
    // ---- Values that would trap or run past a buffer, known only when the kernel runs.
    {"divide_by_zero_in_body", kDivide,
     [](Module &m) {
       m.function("quotients")({i32({3}, {1, 2, 3}), i32({3}, {1, 0, 1})});
     },
     "t.mlir:8:5", "division by zero in 'arith.divsi'"},
    {"divide_smallest_by_minus_one", kDivide,
     [](Module &m) {
       m.function("quotients")({i32({2}, {1, INT32_MIN}), i32({2}, {1, -1})});
     },
     "t.mlir:8:5", "'arith.divsi' of -2147483648 by -1 overflows i32"},
    {"remainder_by_zero_generic", kDivide,
     [](Module &m) {
       m.function("remainder")({Scalar{DType::I32, false, 0, 7}, Scalar{DType::I32, false, 0, 0}},
                               Mode::Generic);
     },
     "t.mlir:14:8", "division by zero in 'arith.remui'"},
    {"scf_for_runtime_step", kRuntimeStep,
     [](Module &m) {
       m.function("f")({Scalar::index(-1), Scalar::f32(1)}, Mode::Generic);
     },
     "t.mlir:4:3", "'scf.for' needs a positive step, found -1"},
    {"slice_offset_near_overflow", kSliceAt,
     [](Module &m) {
       m.function("f")({f32({5}), Scalar::index(INT64_MAX), Scalar::index(2)}, Mode::Generic);
     },
     "t.mlir:2:8", "the slice window starts at 9223372036854775807 in dim 0, which has size 5"},
    {"slice_size_past_the_end", kSliceAt,
     [](Module &m) {
       m.function("f")({f32({5}), Scalar::index(3), Scalar::index(4)}, Mode::Generic);
     },
     "t.mlir:2:8", "the slice window reaches index 6 in dim 0, which has size 5"},
    // The host evaluates the output's shape before the kernel runs: it checks what the shape
    // is built from first, and names the op (its shapes had failed without a location).
    {"division_by_zero_in_a_shape_generic", kSliceFromArguments,
     [](Module &m) {
       m.function("f")({f32({5}), Scalar::index(0), Scalar::index(0)}, Mode::Generic);
     },
     "t.mlir:4:3", "division by zero in 'arith.divui'"},
    {"slice_of_negative_size_generic", kSliceFromArguments,
     [](Module &m) {
       m.function("f")({f32({5}), Scalar::index(1), Scalar::index(7)}, Mode::Generic);
     },
     "t.mlir:6:3", "the slice window starts at 7 in dim 0, which has size 5"},
    {"slice_of_negative_size_runtime_dim", kSliceFromArguments,
     [](Module &m) {
       m.function("f").withRuntimeDims({{"t", 0}})({f32({5}), Scalar::index(1), Scalar::index(7)});
     },
     "t.mlir:6:3", "the slice window starts at 7 in dim 0, which has size 5"},
    // A divisor from a float is checked by the kernel alone: the host cannot evaluate it.
    {"divisor_from_a_float", kDivisorFromFloat,
     [](Module &m) {
       m.function("f")({f32({4}), Scalar::f32(0.5f)});
     },
     "t.mlir:7:3", "division by zero in 'arith.divui'"},
    {"size_from_a_float", kSizesFromValues,
     [](Module &m) {
       m.function("from_float")({f32({4}), Scalar::f32(2)});
     },
     "t.mlir:4:3",
     "unsupported: the size %n is known only when the kernel runs (sizes come from dims, integer "
     "arguments and constants, not from floats, tensor data or loop results)"},
    {"size_from_tensor_data_generic", kSizesFromValues,
     [](Module &m) {
       m.function("from_data")({i64({2}, {3, 1})}, Mode::Generic);
     },
     "t.mlir:11:3",
     "unsupported: the size %n is known only when the kernel runs (sizes come from dims, integer "
     "arguments and constants, not from floats, tensor data or loop results)"},
    {"cast_to_static_dim_generic", kCast,
     [](Module &m) { m.function("f")({f32({5})}, Mode::Generic); }, "t.mlir:2:8",
     "'tensor.cast' to 'tensor<4xf32>' finds 5 where dim 0 is 4"},
    // Specialization sees only a runtime dim: the kernel checks the cast when it runs.
    {"cast_to_static_dim_runtime_dim", kCast,
     [](Module &m) {
       m.function("f").withRuntimeDims({{"t", 0}})({f32({5})});
     },
     "t.mlir:2:8", "'tensor.cast' to 'tensor<4xf32>' finds 5 where dim 0 is 4"},
    // A slice's sizes known only at the call: an inserted tensor narrower than its window had
    // left the rest of the window as it was and read past its own rows, and an extracted slice
    // returned 3 elements for a declared 'tensor<4xf32>'.
    {"inserted_tensor_narrower_than_its_window_generic", kSlicesOfGivenSize,
     [](Module &m) {
       m.function("insert")({f32({2, 3}), f32({2, 5}), Scalar::index(4)}, Mode::Generic);
     },
     "t.mlir:4:3", "dim 1 of the inserted '%a' is 3 but the slice size is 4"},
    {"inserted_tensor_narrower_than_its_window_runtime_dims", kSlicesOfGivenSize,
     [](Module &m) {
       m.function("insert").withRuntimeDims({{"a", 1}})(
           {f32({2, 3}), f32({2, 5}), Scalar::index(4)});
     },
     "t.mlir:4:3", "dim 1 of the inserted '%a' is 3 but the slice size is 4"},
    {"extracted_slice_smaller_than_its_type_generic", kSlicesOfGivenSize,
     [](Module &m) {
       m.function("extract")({f32({6}), Scalar::index(3)}, Mode::Generic);
     },
     "t.mlir:8:3", "dim 0 of 'tensor<4xf32>' is 4 but the slice size is 3"},
    {"concat_operands_disagree_generic", kConcats,
     [](Module &m) {
       m.function("rows")({f32({2, 1}), f32({3, 3})}, Mode::Generic);
     },
     "t.mlir:2:3", "'tensor.concat' operand #1 (%b) has 3 along dim 0 where the others have 2"},
    {"concat_into_a_static_dim_runtime_dims", kConcats,
     [](Module &m) {
       m.function("three").withRuntimeDims({{"a", 0}, {"b", 0}})({f32({2, 4}), f32({2, 4})});
     },
     "t.mlir:6:3", "dim 0 of 'tensor<3x4xf32>' is 3 but the operands give 4"},
    // Partly specialized, the static dims the types state had given way to the runtime ones
    // (a 'tensor<2x4xf32>' slice of 3 rows returned).
    {"extracted_slice_smaller_than_its_type_runtime_dim", kStaticFromDims,
     [](Module &m) {
       m.function("rows").withRuntimeDims({{"a", 0}})({f32({3, 4})});
     },
     "t.mlir:4:8", "dim 0 of 'tensor<2x4xf32>' is 2 but the slice size is 3"},
    {"collapse_to_a_static_dim_runtime_dim", kStaticFromDims,
     [](Module &m) {
       m.function("flat").withRuntimeDims({{"a", 1}})({f32({2, 4})});
     },
     "t.mlir:8:3", "dim 0 of 'tensor<6xf32>' is 6 but the reshape gives 8"},
    // A carry that changes size: it had been read at its first size each iteration.
    {"loop_carry_grows_generic", kGrowingCarry,
     [](Module &m) {
       m.function("grow")({f32({2, 4}), f32({1, 4}), Scalar::index(3)}, Mode::Generic);
     },
     "t.mlir:6:5", "'scf.yield' operand #0 has 3 along dim 0 where the 'scf.for' carries 2"},
    {"loop_carry_grows_runtime_dim", kGrowingCarry,
     [](Module &m) {
       m.function("grow").withRuntimeDims({{"h0", 0}})(
           {f32({2, 4}), f32({1, 4}), Scalar::index(3)});
     },
     "t.mlir:6:5", "'scf.yield' operand #0 has 3 along dim 0 where the 'scf.for' carries 2"},
    // Likewise reshapes: a 2x2 collapsed into a 'tensor<6xf32>' returned 4 elements.
    {"collapse_to_a_static_dim_generic", kReshapesToStaticDims,
     [](Module &m) { m.function("collapse")({f32({2, 2})}, Mode::Generic); }, "t.mlir:2:3",
     "dim 0 of 'tensor<6xf32>' is 6 but the reshape gives 4"},
    {"expand_to_a_static_dim_generic", kReshapesToStaticDims,
     [](Module &m) { m.function("expand")({f32({4}), Scalar::index(2)}, Mode::Generic); },
     "t.mlir:6:3", "dim 0 of 'tensor<3x2xf32>' is 3 but the reshape gives 2"},
};

class ApiDiagnostics : public testing::TestWithParam<ApiCase> {};

TEST_P(ApiDiagnostics, ExactLocationAndMessage) {
  const ApiCase &c = GetParam();
  // A kernel runs threads, which must not exist in the process that forks the next case.
  Outcome out = runIsolated([&] {
    ContextOptions options;
    options.boundsChecks = c.boundsChecks;
    Context ctx(options);
    Module m = ctx.loadString(c.text, "t.mlir");
    c.call(m);
    return std::string();
  });
  ASSERT_EQ(out.kind, Outcome::Threw) << (out.kind == Outcome::Ok ? "no error" : out.text);
  expectError(out.text, c.where, c.message, c.text);
}

INSTANTIATE_TEST_SUITE_P(Api, ApiDiagnostics, testing::ValuesIn(kApiCases),
                         [](const testing::TestParamInfo<ApiCase> &info) {
                           return std::string(info.param.name);
                         });

// ---- The linking table ----------------------------------------------------------------------

const char *kLibA = R"(module @lib_a {
  util.func public @scale(%t: tensor<?xf32>, %k: f32) -> tensor<?xf32> {
    util.return %t : tensor<?xf32>
  }
}
)";

// Declares @lib_a.scale on line 2.
const char *kApp = R"(module @app {
  util.func private @lib_a.scale(tensor<?xf32>, f32) -> tensor<?xf32>
  util.func public @main(%t: tensor<?xf32>) -> tensor<?xf32> {
    %k = arith.constant 2.0 : f32
    %r = util.call @lib_a.scale(%t, %k) : (tensor<?xf32>, f32) -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
}
)";

struct LinkCase {
  const char *name;
  std::vector<std::pair<std::string, std::string>> files; // written to a scratch directory
  const char *main;                                       // one of `files`, loaded
  std::vector<std::string> linked;                        // LinkOptions::files
  std::vector<std::string> searchPaths;                   // LinkOptions::searchPaths
  const char *where;                                      // relative to the directory
  const char *message;
};

std::ostream &operator<<(std::ostream &os, const LinkCase &c) { return os << c.name; }

const LinkCase kLinkCases[] = {
    {"missing_module",
     {{"app.mlir", kApp}},
     "app.mlir",
     {},
     {"."},
     "app.mlir:2:21",
     "unresolved external function '@lib_a.scale': no module @lib_a in the linked files or the "
     "search path"},
    {"missing_function",
     {{"app.mlir", kApp},
      {"a.mlir", "module @lib_a {\n  util.func public @other() {\n    util.return\n  }\n}\n"}},
     "app.mlir",
     {"a.mlir"},
     {},
     "app.mlir:2:21",
     "unresolved external function '@lib_a.scale': module @lib_a (a.mlir:1:1) has no public "
     "function '@scale'"},
    {"private_function",
     {{"app.mlir", kApp},
      {"a.mlir", "module @lib_a {\n  util.func private @scale(%t: tensor<?xf32>, %k: f32) -> "
                 "tensor<?xf32> {\n    util.return %t : tensor<?xf32>\n  }\n}\n"}},
     "app.mlir",
     {"a.mlir"},
     {},
     "app.mlir:2:21",
     "unresolved external function '@lib_a.scale': module @lib_a (a.mlir:1:1) has no public "
     "function '@scale'"},
    {"signature_mismatch",
     {{"app.mlir", kApp},
      {"a.mlir", "module @lib_a {\n  util.func public @scale(%t: tensor<?xf32>, %k: f64) -> "
                 "tensor<?xf32> {\n    util.return %t : tensor<?xf32>\n  }\n}\n"}},
     "app.mlir",
     {"a.mlir"},
     {},
     "app.mlir:2:21",
     "declaration of '@lib_a.scale' does not match its definition: declared (tensor<?xf32>, f32) "
     "-> (tensor<?xf32>) here, defined (tensor<?xf32>, f64) -> (tensor<?xf32>) at a.mlir:2:20"},
    {"duplicate_linked_module",
     {{"app.mlir", kApp}, {"a.mlir", kLibA}, {"b.mlir", kLibA}},
     "app.mlir",
     {"a.mlir", "b.mlir"},
     {},
     "b.mlir:1:1",
     "module @lib_a is defined twice: here and at a.mlir:1:1"},
    {"duplicate_module_on_search_path",
     {{"app.mlir", kApp}, {"lib/a.mlir", kLibA}, {"lib/b.mlir", kLibA}},
     "app.mlir",
     {},
     {"lib"},
     "app.mlir:2:21",
     "module @lib_a is defined twice on the search path: lib/b.mlir and lib/a.mlir"},
    {"linked_module_named_like_main",
     {{"app.mlir", kApp}, {"other.mlir", "module @app {\n}\n"}},
     "app.mlir",
     {"other.mlir"},
     {},
     "other.mlir:1:1",
     "module @app is defined twice: here and in the main file at app.mlir:1:1"},
    {"linked_file_without_module_name",
     {{"app.mlir", kApp}, {"anon.mlir", "util.func @g() {\n  util.return\n}\n"}},
     "app.mlir",
     {"anon.mlir"},
     {},
     "anon.mlir",
     "a linked file must define a named module ('module @name { ... }')"},
    {"declaration_without_module",
     {{"app.mlir", "util.func private @helper(f32) -> f32\n"}},
     "app.mlir",
     {},
     {},
     "app.mlir:1:19",
     "unresolved external function '@helper': an external declaration names its module, as "
     "'@module.helper'"},
    {"search_path_not_a_directory",
     {{"app.mlir", kApp}},
     "app.mlir",
     {},
     {"nowhere"},
     "nowhere",
     "link search path is not a directory"},
    {"linked_file_missing",
     {{"app.mlir", kApp}},
     "app.mlir",
     {"missing.mlir"},
     {},
     "missing.mlir",
     "cannot open file: No such file or directory"},
    {"linked_file_unused_and_missing",
     {{"app.mlir", "module @app {\n}\n"}},
     "app.mlir",
     {"missing.mlir"},
     {},
     "missing.mlir",
     "cannot open file: No such file or directory"},
    {"linked_file_does_not_parse",
     {{"app.mlir", kApp}, {"a.mlir", "module @lib_a {\n  util.func public @scale(\n"}},
     "app.mlir",
     {"a.mlir"},
     {},
     "a.mlir:3:1",
     "expected a type, found end of file"},
};

class LinkDiagnostics : public testing::TestWithParam<LinkCase> {};

TEST_P(LinkDiagnostics, ExactLocationAndMessage) {
  const LinkCase &c = GetParam();
  fs::path dir = fs::path(testing::TempDir()) / fmt::format("frank_diag_link_{}", c.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string source;
  for (const auto &[name, text] : c.files) {
    fs::create_directories((dir / name).parent_path());
    std::ofstream(dir / name) << text;
  }
  Outcome out = runIsolated([&] {
    LinkOptions link;
    for (const std::string &f : c.linked)
      link.files.push_back((dir / f).string());
    for (const std::string &p : c.searchPaths)
      link.searchPaths.push_back((dir / p).string());
    link.componentLibrary = false;
    Context ctx;
    ctx.load((dir / c.main).string(), link);
    return std::string();
  });
  ASSERT_EQ(out.kind, Outcome::Threw) << (out.kind == Outcome::Ok ? "no error" : out.text);
  // Locations name files by their path; the table names them relative to the directory.
  std::string text = replaceAll(out.text, dir.string() + "/", "");
  std::string where = c.where;
  std::string file = where.substr(0, where.find(':'));
  for (const auto &[name, contents] : c.files)
    if (name == file)
      source = contents;
  expectError(text, c.where, c.message, source);
}

INSTANTIATE_TEST_SUITE_P(Link, LinkDiagnostics, testing::ValuesIn(kLinkCases),
                         [](const testing::TestParamInfo<LinkCase> &info) {
                           return std::string(info.param.name);
                         });

// ---- The .npy table -------------------------------------------------------------------------

/// A .npy file with a hand-written header dict.
std::string npy(const std::string &dict, const std::string &data = "", char major = 1) {
  std::string out = "\x93NUMPY"s + major + '\0';
  size_t width = major == 1 ? 2 : 4;
  for (size_t i = 0; i < width; ++i)
    out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict + data;
}

std::string header(const std::string &descr, const std::string &shape, bool fortran = false) {
  return fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr,
                     fortran ? "True" : "False", shape);
}

struct NpyCase {
  const char *name;
  std::string bytes; // parsed as "x.npy"
  const char *message;
};

std::ostream &operator<<(std::ostream &os, const NpyCase &c) { return os << c.name; }

const NpyCase kNpyCases[] = {
    {"bad_magic", "PK\x03\x04 a zip file",
     "not a .npy file: bad magic string (expected \\x93NUMPY)"},
    {"empty_file", "", "truncated header: the file has only 0 bytes"},
    {"truncated_magic", "\x93NUM", "truncated header: the file has only 4 bytes"},
    {"truncated_header_length", "\x93NUMPY\x01\x00\x10"s,
     "truncated header: the file has only 9 bytes"},
    {"truncated_header", npy(header("<f4", "(2,)")).substr(0, 30),
     "truncated header: the header needs 57 bytes, found 20"},
    {"unsupported_version", npy(header("<f4", "(1,)"), "abcd", 4),
     "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)"},
    {"unsupported_dtype", npy(header("<u2", "(1,)"), "ab"),
     "unsupported dtype '<u2'; supported: '<f4' (f32), '<f2' (f16), '<f8' (f64), '|b1' (i1), "
     "'|i1' (i8), '<i2' (i16), '<i4' (i32), '<i8' (i64)"},
    {"object_dtype", npy(header("|O", "(1,)"), "abcdefgh"),
     "unsupported dtype '|O'; supported: '<f4' (f32), '<f2' (f16), '<f8' (f64), '|b1' (i1), "
     "'|i1' (i8), '<i2' (i16), '<i4' (i32), '<i8' (i64)"},
    {"big_endian", npy(header(">f4", "(1,)"), "abcd"),
     "unsupported dtype '>f4': big-endian data is not supported; save with arr.astype('<f4')"},
    {"fortran_order", npy(header("<f4", "(2, 3)", true), std::string(24, '\0')),
     "Fortran-order arrays are not supported; save with np.ascontiguousarray"},
    {"negative_dimension", npy(header("<f4", "(2, -3)")), "negative dimension -3 in 'shape'"},
    {"shape_too_large", npy(header("<f4", "(4294967296, 4294967296)")),
     "shape (4294967296, 4294967296) is too large"},
    {"header_not_a_dict", npy("[1, 2, 3]"),
     "malformed .npy header dict: expected '{' at the start of the header (at offset 0 in "
     "\"[1, 2, 3]\")"},
    {"header_missing_shape", npy("{'descr': '<f4', 'fortran_order': False, }"),
     "malformed .npy header dict: missing key 'shape' (at offset 42 in \"{'descr': '<f4', "
     "'fortran_order': False, }\")"},
    {"truncated_data", npy(header("<f4", "(2, 3)"), std::string(20, '\0')),
     "truncated data: expected 24 bytes, found 20"},
    {"trailing_data", npy(header("<f4", "(3,)"), std::string(13, '\0')),
     "trailing bytes after the data: expected 12 bytes, found 13"},
};

class NpyDiagnostics : public testing::TestWithParam<NpyCase> {};

TEST_P(NpyDiagnostics, ExactMessage) {
  const NpyCase &c = GetParam();
  Outcome out = runIsolated([&] {
    parseNpy(c.bytes, "x.npy");
    return std::string();
  });
  ASSERT_EQ(out.kind, Outcome::Threw) << (out.kind == Outcome::Ok ? "no error" : out.text);
  expectError(out.text, "x.npy", c.message, "");
}

INSTANTIATE_TEST_SUITE_P(Npy, NpyDiagnostics, testing::ValuesIn(kNpyCases),
                         [](const testing::TestParamInfo<NpyCase> &info) {
                           return std::string(info.param.name);
                         });

// ---- The command-line table -----------------------------------------------------------------

// The files a command line may name, written to a scratch directory as {dir}/NAME.
std::vector<std::pair<std::string, std::string>> cliFiles() {
  Tensor x = f32({2, 3});
  Tensor ids = i64({2}, {0, 7});
  return {{"add.mlir", kAdd},
          {"lookup.mlir", kLookup},
          {"sized.mlir", kSized},
          {"mm.mlir", kMatmul},
          {"mm_tile.mlir", matmulWithConfig("tile=15x1")},
          {"mm_k_block.mlir", matmulWithConfig("k-block=48")},
          {"x.npy", serializeNpy(x)},
          {"ids.npy", serializeNpy(ids)},
          {"bad.npy", "not a .npy file"},
          {"big.npy", npy(header(">f4", "(1,)"), "abcd")}};
}

struct CliCase {
  const char *name;
  std::vector<std::string> argv; // "{dir}/" names the scratch directory
  const char *where;             // "frank-jit", a file, or "add.mlir:L:C"
  const char *message;           // the first line of stderr after "where: error: "
};

std::ostream &operator<<(std::ostream &os, const CliCase &c) { return os << c.name; }

const CliCase kCliCases[] = {
    {"no_command",
     {},
     "frank-jit",
     "choose a command: compile, run, bench, link or cache (see --help)"},
    {"missing_file",
     {"run", "{dir}/none.mlir"},
     "none.mlir",
     "cannot open file: No such file or directory"},
    {"module_is_a_directory", {"link", "{dir}/."}, ".", "is a directory, not an .mlir file"},
    {"input_is_an_endless_device",
     {"run", "{dir}/add.mlir", "--function=add", "--input=@/dev/zero", "--input=2x3xf32=1"},
     "/dev/zero",
     "not a .npy file: bad magic string (expected \\x93NUMPY)"},
    {"print_max_elements_negative",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--print-max-elements=-5"},
     "frank-jit",
     "--print-max-elements=-5 is not a count"},
    {"bench_repetitions_not_a_count",
     {"bench", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--benchmark_repetitions=-3"},
     "frank-jit",
     "--benchmark_repetitions=-3: repetitions are a count from 1"},
    // Google Benchmark's flags outside `bench` did nothing, silently.
    {"benchmark_flag_outside_bench",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--benchmark_repetitions=3"},
     "frank-jit",
     "'--benchmark_repetitions=3' is a flag of `bench` only"},
    // LLVM keeps the last of several occurrences: the first would be dropped without a word.
    {"config_given_twice",
     {"run", "{dir}/mm.mlir", "--input=2x3xf32=1", "--input=3x2xf32=1", "--config=tile=2x1",
      "--config=k-block=0"},
     "frank-jit",
     "--config is given 2 times; give it once"},
    {"config_in_generic_mode",
     {"run", "{dir}/mm.mlir", "--input=2x3xf32=1", "--input=3x2xf32=1", "--mode=generic",
      "--config=tile=2x1"},
     "frank-jit",
     "--config sets the strategies of specialized kernels, and --mode=generic lowers every op to "
     "plain loops"},
    {"bench_filter_not_a_regex",
     {"bench", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--benchmark_filter=("},
     "frank-jit",
     "--benchmark_filter=(: not a regular expression: Mismatched '(' and ')' in regular "
     "expression"},
    // compile needs only types, but data it is given must be good data.
    {"compile_input_file_missing",
     {"compile", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=@{dir}/none.npy",
      "--input=2x3xf32", "--emit=mlir"},
     "none.npy",
     "cannot open file: No such file or directory"},
    {"compile_input_values_miscounted",
     {"compile", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,2", "--input=2x3xf32"},
     "frank-jit",
     "--input #0 '2x3xf32=1,2': gives 2 values but 2x3xf32 has 6 elements (give one value to "
     "fill, or all of them)"},
    {"ambiguous_function",
     {"compile", "{dir}/add.mlir", "--input=2x3xf32", "--input=2x3xf32"},
     "frank-jit",
     "add.mlir defines 2 public functions (@add, @scale); choose one with --function=NAME"},
    {"unknown_function",
     {"compile", "{dir}/add.mlir", "--function=sub"},
     "frank-jit",
     "no function '@sub' in module; it defines: @add, @scale"},
    {"too_few_inputs",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1"},
     "frank-jit",
     "'@add' takes 2 arguments (tensor<?x?xf32>, tensor<?x?xf32>) but 1 --input was given"},
    {"input_without_value",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32': needs a value: TYPE=VALUE, TYPE=@file.npy, TYPE=random or @file.npy"},
    {"input_bad_number",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,x", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1,x': 'x' is not a number"},
    {"input_value_count",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,2", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1,2': gives 2 values but 2x3xf32 has 6 elements (give one value to "
     "fill, or all of them)"},
    {"input_random_one_bound",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=random:1", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=random:1': random takes no range or two bounds: random:LO:HI"},
    {"input_random_empty_range",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=random:1:-1",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=random:1:-1': random:1:-1 is an empty range: LO must be below HI"},
    {"input_random_infinite_bound",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=random:-inf:0",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=random:-inf:0': random:-inf:0 needs finite bounds and a finite HI - "
     "LO"},
    {"input_random_fractional_integer_bound",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xi32=random:0:2.5",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi32=random:0:2.5': the bounds of random integers must be integers, not "
     "0:2.5"},
    {"input_random_range_too_wide",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xi8=random:0:1000",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi8=random:0:1000': random:0:1000 does not fit i8"},
    {"input_integer_literal_too_wide",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xi8=1,2,300,4,5,6",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi8=1,2,300,4,5,6': 300 does not fit i8"},
    {"input_integer_literal_fractional",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xi32=1.5", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi32=1.5': '1.5' is not an integer that i32 holds"},
    {"input_random_i64_past_2_53",
     {"run", "{dir}/add.mlir", "--function=add",
      "--input=2x3xi64=random:9007199254740993:9007199254740999", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi64=random:9007199254740993:9007199254740999': "
     "random:9007199254740993:9007199254740999 is outside the random i64 range [-2^53, 2^53]"},
    // A scalar's type is never converted: i1=5 once ran as an epsilon of 5.
    {"input_scalar_of_another_type",
     {"run", "{dir}/add.mlir", "--function=scale", "--input=4xf32=1", "--input=i1=true"},
     "frank-jit",
     "--input #1 'i1=true': the argument is f32, not i1"},
    {"input_scalar_type_without_value",
     {"compile", "{dir}/add.mlir", "--function=scale", "--input=4xf32", "--input=index"},
     "frank-jit",
     "--input #1 'index': the argument is f32, not index"},
    {"input_scalar_integer_too_wide",
     {"run", "{dir}/sized.mlir", "--function=narrow", "--input=i8=300", "--input=i1=true"},
     "frank-jit",
     "--input #0 'i8=300': 300 does not fit i8"},
    // A finite literal the type cannot hold is an error, not an infinity, as in the parser.
    {"input_float_literal_out_of_range",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,2,3,4,5,1e40",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1,2,3,4,5,1e40': 1e40 is out of range for f32"},
    {"input_scalar_float_out_of_range",
     {"run", "{dir}/add.mlir", "--function=scale", "--input=4xf32=1", "--input=f32=-1e39"},
     "frank-jit",
     "--input #1 'f32=-1e39': -1e39 is out of range for f32"},
    {"input_half_literal_past_its_range",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1e400", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1e400': 1e400 is out of range for f32"},
    // Integer bounds are read exactly: -2^53 - 1 once rounded into the range.
    {"input_random_i64_bound_below_2_53",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xi64=random:-9007199254740993:0",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xi64=random:-9007199254740993:0': random:-9007199254740993:0 is outside the "
     "random i64 range [-2^53, 2^53]"},
    {"input_true_for_an_index",
     {"run", "{dir}/sized.mlir", "--function=raw", "--input=index=true"},
     "frank-jit",
     "--input #0 'index=true': 'true' is not an integer that index holds"},
    {"input_random_bound_out_of_range",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=random:0:1e40",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=random:0:1e40': 1e40 is out of range for f32"},
    {"input_hex_float_digits",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=0x7f", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=0x7f': hexadecimal '0x7f' is not f32 bits: f32 takes 8 hex digits "
     "after 0x, and no sign"},
    {"input_empty_value_between_commas",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,,3,4,5,6", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1,,3,4,5,6': has an empty value: a comma with no number before or "
     "after it"},
    {"input_trailing_comma",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1,2,3,4,5,6,",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=1,2,3,4,5,6,': has an empty value: a comma with no number before or "
     "after it"},
    {"input_at_without_a_path",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=@", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x3xf32=@': '@' needs the path of a .npy file"},
    {"input_scalar_from_a_tensor_file",
     {"run", "{dir}/add.mlir", "--function=scale", "--input=4xf32=1", "--input=@{dir}/x.npy"},
     "frank-jit",
     "--input #1 '@x.npy': the argument is f32 but the file holds 2x3xf32 (a scalar comes "
     "from a 0-d .npy file of its type)"},
    {"output_at_without_a_path",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--output=@"},
     "frank-jit",
     "--output '@' must name a file as @file.npy"},
    {"input_tensor_of_index",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2xindex=1", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2xindex=1': tensors of index are not supported"},
    {"input_bad_type",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x-xf32=1", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x-xf32=1': dims must be non-negative integers or ? separated by 'x', as in "
     "32x4096xf32"},
    {"input_runtime_dim_with_data",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x?xf32=1", "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '2x?xf32=1': a tensor with data has no '?' dims (--runtime-dims keeps a dim a "
     "runtime value)"},
    {"runtime_dims_bad",
     {"run", "{dir}/add.mlir", "--function=add", "--runtime-dims=x", "--input=2x3xf32=1",
      "--input=2x3xf32=1"},
     "frank-jit",
     "bad runtime dim 'x': expected ARGUMENT:DIM, as in key:1"},
    {"runtime_dims_unknown_argument",
     {"run", "{dir}/add.mlir", "--function=add", "--runtime-dims=z:0", "--input=2x3xf32=1",
      "--input=2x3xf32=1"},
     "frank-jit",
     "runtime dim z:0: '@add' has no argument 'z' (it has a, b)"},
    {"runtime_dims_twice",
     {"run", "{dir}/add.mlir", "--function=add", "--runtime-dims=a:0", "--runtime-dims=#0:0",
      "--input=2x3xf32=1", "--input=2x3xf32=1"},
     "frank-jit",
     "runtime dim #0:0: dim 0 of argument #0 (%a) is given twice"},
    {"input_bad_integer",
     {"run", "{dir}/sized.mlir", "--function=raw", "--input=index=2.5"},
     "frank-jit",
     "--input #0 'index=2.5': '2.5' is not an integer that index holds"},
    {"input_wrong_rank",
     {"run", "{dir}/add.mlir", "--function=add", "--input=6xf32=1", "--input=2x3xf32=1"},
     "frank-jit",
     "in call to '@add': argument #0 (%a) has rank 2 ('tensor<?x?xf32>') but was given rank 1 "
     "('6xf32')"},
    {"mismatched_dims",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x4xf32=1"},
     "add.mlir:7:3",
     "loop dim d1 of 'linalg.generic' has extent 3 from operand #0 (%a) dim 1 but 4 from operand "
     "#1 (%b) dim 1"},
    {"negative_size",
     {"run", "{dir}/sized.mlir", "--function=raw", "--input=index=-2"},
     "sized.mlir:14:3",
     "'tensor.empty' dim 0 has negative size -2 (%n)"},
    {"npy_disagrees_with_input_type",
     {"run", "{dir}/add.mlir", "--function=add", "--input=3x2xf32=@{dir}/x.npy",
      "--input=2x3xf32=1"},
     "frank-jit",
     "--input #0 '3x2xf32=@x.npy': the file holds 2x3xf32 but the input says 3x2xf32"},
    {"npy_rank_disagrees_with_signature",
     {"run", "{dir}/lookup.mlir", "--function=pick", "--input=@{dir}/x.npy",
      "--input=@{dir}/ids.npy"},
     "frank-jit",
     "in call to '@pick': argument #0 (%t) has rank 1 ('tensor<?xf32>') but was given rank 2 "
     "('2x3xf32')"},
    {"npy_dtype_disagrees_with_signature",
     {"run", "{dir}/lookup.mlir", "--function=pick", "--input=@{dir}/ids.npy",
      "--input=@{dir}/ids.npy"},
     "frank-jit",
     "in call to '@pick': argument #0 (%t) has element type f32 but was given i64 ('2xi64')"},
    {"npy_bad_magic",
     {"run", "{dir}/add.mlir", "--function=add", "--input=@{dir}/bad.npy", "--input=2x3xf32=1"},
     "bad.npy",
     "not a .npy file: bad magic string (expected \\x93NUMPY)"},
    {"npy_big_endian",
     {"run", "{dir}/add.mlir", "--function=add", "--input=1xf32=@{dir}/big.npy",
      "--input=2x3xf32=1"},
     "big.npy",
     "unsupported dtype '>f4': big-endian data is not supported; save with arr.astype('<f4')"},
    {"npy_missing",
     {"run", "{dir}/add.mlir", "--function=add", "--input=@{dir}/none.npy", "--input=2x3xf32=1"},
     "none.npy",
     "cannot open file: No such file or directory"},
    {"gather_index_out_of_range",
     {"run", "{dir}/lookup.mlir", "--function=lookup", "--input=3x2xf32=1",
      "--input=@{dir}/ids.npy"},
     "lookup.mlir:7:3",
     "index 7 is out of bounds for dim 0 of '%w', which has size 3"},
    {"output_without_at",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--output=y.npy"},
     "frank-jit",
     "--output 'y.npy' must name a file as @file.npy"},
    {"output_count",
     {"run", "{dir}/add.mlir", "--function=add", "--input=2x3xf32=1", "--input=2x3xf32=1",
      "--output=@{dir}/y.npy", "--output=@{dir}/z.npy"},
     "frank-jit",
     "'@add' has 1 result but 2 --outputs were given"},
    {"config_unknown_key",
     {"compile", "{dir}/add.mlir", "--function=add", "--config=size=4"},
     "frank-jit",
     "--config='size=4': unknown key 'size' (pipeline, tile, k-block, pack, prefetch, "
     "key-chunks, query-blocks, blocks-outside, n-group, ranks, k-blocks)"},
    {"config_not_key_value",
     {"compile", "{dir}/add.mlir", "--function=add", "--config=tile"},
     "frank-jit",
     "--config='tile': 'tile' is not key=value"},
    {"config_bad_tile",
     {"compile", "{dir}/add.mlir", "--function=add", "--config=tile=3y2"},
     "frank-jit",
     "--config='tile=3y2': tile '3y2' is not MxN with 1 <= M, N <= 16"},
    {"config_unknown_pipeline",
     {"compile", "{dir}/add.mlir", "--function=add", "--config=pipeline=fast"},
     "frank-jit",
     "--config='pipeline=fast': unknown pipeline 'fast' (loops, contraction.outer, "
     "contraction.dot, contraction.gather, contraction.choices, contraction.ranks, "
     "contraction.stream)"},
    // Overrides that do not fit the contraction name it.
    {"config_pipeline_does_not_apply",
     {"compile", "{dir}/mm.mlir", "--input=16x64xf32", "--input=64x32xf32",
      "--config=pipeline=contraction.gather"},
     "mm.mlir:9:3",
     "--config: pipeline contraction.gather does not apply: it reads no operand through a "
     "gather"},
    {"config_tile_does_not_fit",
     {"compile", "{dir}/mm.mlir", "--input=14x64xf32", "--input=64x32xf32", "--config=tile=15x1"},
     "mm.mlir:9:3",
     "--config: tile 15x1 does not fit the contraction.outer nest: M 15 is more than its 14 "
     "rows"},
    {"config_k_block_does_not_divide",
     {"compile", "{dir}/mm.mlir", "--input=16x64xf32", "--input=64x32xf32", "--config=k-block=48"},
     "mm.mlir:9:3",
     "--config: k-block 48 does not divide the nest's one reduction dim"},
    // So do the choices set on the op, named as such; with --config too, both are named.
    {"config_attribute_tile_does_not_fit",
     {"compile", "{dir}/mm_tile.mlir", "--input=14x64xf32", "--input=64x32xf32"},
     "mm_tile.mlir:9:3",
     "frank.config: tile 15x1 does not fit the contraction.outer nest: M 15 is more than its 14 "
     "rows"},
    {"config_attribute_and_flag",
     {"compile", "{dir}/mm_k_block.mlir", "--input=16x64xf32", "--input=64x32xf32",
      "--config=tile=1x1"},
     "mm_k_block.mlir:9:3",
     "--config and frank.config: k-block 48 does not divide the nest's one reduction dim"},
    {"cache_unknown_action",
     {"cache", "prune"},
     "frank-jit",
     "unknown cache command 'prune' (expected stats, ls or clear)"},
    {"cache_no_action", {"cache"}, "frank-jit", "choose a cache command: stats, ls or clear"},
    {"flag_i1_without_value",
     {"compile", "{dir}/sized.mlir", "--function=narrow", "--input=i8", "--input=i1"},
     "frank-jit",
     "in call to '@narrow': argument #1 (%flag) is an i1 flag, a specialization key: give its "
     "value as i1=true or i1=false"},
};

// LLVM's option parser words these itself, without "error:": their exact first lines.
struct FlagCase {
  const char *name;
  std::vector<std::string> argv;
  const char *firstLine; // "{binary}" is the tool's path
};

std::ostream &operator<<(std::ostream &os, const FlagCase &c) { return os << c.name; }

const FlagCase kFlagCases[] = {
    {"unknown_flag",
     {"compile", "{dir}/add.mlir", "--bogus"},
     "frank-jit: Unknown command line argument '--bogus'.  Try: '{binary} --help'"},
    {"unknown_subcommand",
     {"{dir}/add.mlir"},
     "frank-jit: Unknown subcommand '{dir}/add.mlir'.  Try: '{binary} --help'"},
    {"bad_emit_value",
     {"compile", "{dir}/add.mlir", "--emit=bogus"},
     "frank-jit: for the --emit option: Cannot find option named 'bogus'!"},
    {"bad_mode_value",
     {"run", "{dir}/add.mlir", "--mode=fast"},
     "frank-jit: for the --mode option: Cannot find option named 'fast'!"},
    {"bad_seed_value",
     {"run", "{dir}/add.mlir", "--seed=x"},
     "frank-jit: for the --seed option: 'x' value invalid for ulong argument!"},
    {"missing_file_argument",
     {"compile"},
     "frank-jit: Not enough positional command line arguments specified!"},
    // --output belongs to `run`: the parser suggests the nearest flag `compile` has.
    {"flag_of_another_command",
     {"compile", "{dir}/add.mlir", "--output=@y.npy"},
     "frank-jit: Unknown command line argument '--output=@y.npy'.  Try: '{binary} --help'"},
};

/// A scratch directory holding cliFiles(), per test.
std::string writeCliFiles(const std::string &name) {
  fs::path dir = fs::path(testing::TempDir()) / fmt::format("frank_diag_cli_{}", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto &[file, bytes] : cliFiles())
    std::ofstream(dir / file, std::ios::binary) << bytes;
  return dir.string();
}

std::vector<std::string> substituted(const std::vector<std::string> &argv, const std::string &dir) {
  std::vector<std::string> out;
  for (const std::string &a : argv)
    out.push_back(replaceAll(a, "{dir}", dir));
  return out;
}

class CliDiagnostics : public testing::TestWithParam<CliCase> {};

TEST_P(CliDiagnostics, ExitOneAndExactMessage) {
  const CliCase &c = GetParam();
  std::string dir = writeCliFiles(c.name);
  ToolResult r = runTool(substituted(c.argv, dir), {{"FRANK_CACHE", "off"}});
  EXPECT_FAILURE(r);
  std::string err = replaceAll(r.err, dir + "/", "");
  std::string where = c.where;
  std::string file = where.substr(0, where.find(':'));
  std::string source;
  for (const auto &[name, bytes] : cliFiles())
    if (name == file)
      source = bytes;
  // 32 columns are 4 vectors of 8 lanes with AVX2, 2 of 16 with AVX-512.
  std::string message = replaceAll(c.message, "{vectors of 32}",
                                   std::to_string(32 * 32 / targetOfContexts().vectorBits));
  expectError(err, c.where, message, source);
}

INSTANTIATE_TEST_SUITE_P(Cli, CliDiagnostics, testing::ValuesIn(kCliCases),
                         [](const testing::TestParamInfo<CliCase> &info) {
                           return std::string(info.param.name);
                         });

class FlagDiagnostics : public testing::TestWithParam<FlagCase> {};

TEST_P(FlagDiagnostics, ExitOneAndExactFirstLine) {
  const FlagCase &c = GetParam();
  std::string dir = writeCliFiles(c.name);
  ToolResult r = runTool(substituted(c.argv, dir), {{"FRANK_CACHE", "off"}});
  EXPECT_FAILURE(r);
  std::string expected = replaceAll(replaceAll(c.firstLine, "{binary}", kBinary), "{dir}", dir);
  std::vector<std::string> lines = splitLines(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], expected) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Flags, FlagDiagnostics, testing::ValuesIn(kFlagCases),
                         [](const testing::TestParamInfo<FlagCase> &info) {
                           return std::string(info.param.name);
                         });

// ---- Errors inside called functions ---------------------------------------------------------

// An error at an op of a called function (a component, a helper) names each call it was
// inlined through, innermost first, each with its line and caret: the author sees where their
// own code led there. Here @main calls @middle (line 11), which calls @inner (line 7), whose
// slice (line 3) runs past the tensor.
TEST(CallSites, ErrorsInCalledFunctionsNameTheCalls) {
  const char *text = R"(util.func private @inner(%t: tensor<?xf32>, %at: index) -> tensor<?xf32> {
  %c2 = arith.constant 2 : index
  %r = tensor.extract_slice %t[%at] [%c2] [1] : tensor<?xf32> to tensor<?xf32>
  util.return %r : tensor<?xf32>
}
util.func private @middle(%t: tensor<?xf32>, %at: index) -> tensor<?xf32> {
  %r = util.call @inner(%t, %at) : (tensor<?xf32>, index) -> tensor<?xf32>
  util.return %r : tensor<?xf32>
}
util.func public @main(%t: tensor<?xf32>, %at: index) -> tensor<?xf32> {
  %r = util.call @middle(%t, %at) : (tensor<?xf32>, index) -> tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";
  std::vector<std::string> source = splitLines(text);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    Outcome out = runIsolated([&] {
      Context ctx;
      ctx.loadString(text, "t.mlir").function("main")({f32({5}), Scalar::index(4)}, mode);
      return std::string();
    });
    ASSERT_EQ(out.kind, Outcome::Threw) << out.text;
    std::vector<std::string> lines = splitLines(out.text);
    ASSERT_EQ(lines.size(), 9u) << out.text;
    EXPECT_THAT(lines[0], testing::StartsWith("t.mlir:3:3: error: "));
    EXPECT_EQ(lines[1], source[2]);
    EXPECT_EQ(lines[2], "  ^");
    EXPECT_EQ(lines[3], "t.mlir:7:3: note: in the function called here");
    EXPECT_EQ(lines[4], source[6]);
    EXPECT_EQ(lines[5], "  ^");
    EXPECT_EQ(lines[6], "t.mlir:11:3: note: in the function called here");
    EXPECT_EQ(lines[7], source[10]);
    EXPECT_EQ(lines[8], "  ^");
  }
}

// ---- The tables themselves --------------------------------------------------------------------

TEST(DiagnosticsTables, AreLargeAndNamesAreUnique) {
  std::set<std::string> names;
  size_t cases = 0;
  auto add = [&](const char *table, const char *name) {
    ++cases;
    EXPECT_TRUE(names.insert(fmt::format("{}/{}", table, name)).second)
        << "duplicate case " << table << "/" << name;
    EXPECT_EQ(std::string(name).find_first_not_of(
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"),
              std::string::npos)
        << "not a test name: " << name;
  };
  for (const ApiCase &c : kApiCases)
    add("Api", c.name);
  for (const LinkCase &c : kLinkCases)
    add("Link", c.name);
  for (const NpyCase &c : kNpyCases)
    add("Npy", c.name);
  for (const CliCase &c : kCliCases)
    add("Cli", c.name);
  for (const FlagCase &c : kFlagCases)
    add("Flags", c.name);
  EXPECT_EQ(names.size(), cases);
  EXPECT_GE(cases, 40u);
}

} // namespace
} // namespace frank::test
