// Specialization: what gets baked in, what folds away, and the errors a bad binding gives.
#include "transforms/Specialize.h"
#include "TestSupport.h"
#include "ir/IntegerSemantics.h"
#include "ir/Printer.h"
#include "parse/Parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using testing::HasSubstr;
using testing::Not;
using testing::ThrowsMessage;

// `%n` (an index argument) sizes the result; `%half` is shape arithmetic on it.
const char *kRepeat = R"(
func.func @f(%x: tensor<?xf32>, %n: index) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %len = tensor.dim %x, %c0 : tensor<?xf32>
  %half = arith.divui %n, %c2 : index
  %rows = arith.addi %half, %half : index
  %e = tensor.empty(%rows, %len) : tensor<?x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
)";

std::unique_ptr<ModuleOp> parse(const char *text) { return parseString(text, "s.mlir"); }

ArgSpec tensorSpec(std::vector<int64_t> shape) { return {Type::tensor(ElemKind::F32, shape), {}}; }

TEST(Specialize, IndexArgumentsAndShapeArithmeticFoldToConstants) {
  auto m = parse(kRepeat);
  std::vector<std::string> explain;
  auto fn =
      specialize(*m->functions[0], {tensorSpec({5}), {Type::scalar(ElemKind::Index), 7}}, &explain);
  std::string text = printFunction(*fn);
  EXPECT_THAT(text, HasSubstr("tensor.empty() : tensor<6x5xf32>"));
  EXPECT_THAT(text, HasSubstr("-> tensor<6x5xf32>"));
  EXPECT_THAT(text, Not(HasSubstr("?")));
  EXPECT_THAT(text, Not(HasSubstr("tensor.dim")));
  EXPECT_THAT(text, Not(HasSubstr("arith.divui")));
  EXPECT_THAT(explain, testing::ElementsAre(
                           "argument #0 (%x): tensor<?xf32> -> tensor<5xf32>, baked in: dim 0 = 5",
                           "argument #1 (%n): index = 7 baked in"));
}

TEST(Specialize, ApiBakesIndexValuesIntoTheKernelKey) {
  Context ctx;
  Function fn = ctx.loadString(kRepeat, "s.mlir").function("f");
  std::vector<float> x{1, 2, 3};
  Tensor t = Tensor::borrow(x.data(), DType::F32, {3});
  auto a = fn({t, Scalar::index(4)});
  auto b = fn({t, Scalar::index(5)}); // 5 / 2 * 2 = 4 rows again, but another value: another kernel
  EXPECT_EQ(a[0].shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(b[0].shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(ctx.cacheStats().misses, 2u);
  EXPECT_EQ(a[0].as<float>()[3 * 3 + 2], 3.f);
  // Generic mode keeps %n a runtime value and evaluates the shape arithmetic per call.
  auto g = fn({t, Scalar::index(9)}, Mode::Generic);
  EXPECT_EQ(g[0].shape(), (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(g[0].as<float>()[7 * 3 + 1], 2.f);
}

TEST(Specialize, NegativeSizeIsReportedAtTheOp) {
  const char *text = R"(
func.func @f(%n: index) -> tensor<?xf32> {
  %c1 = arith.constant 1 : index
  %m = arith.subi %n, %c1 : index
  %e = tensor.empty(%m) : tensor<?xf32>
  return %e : tensor<?xf32>
}
)";
  auto m = parse(text);
  EXPECT_THAT(
      [&] {
        specialize(*m->functions[0], {{Type::scalar(ElemKind::Index), 0}});
      },
      ThrowsMessage<Error>(
          HasSubstr("s.mlir:5:3: error: 'tensor.empty' dim 0 has negative size -1 (%m)")));
}

TEST(Specialize, DivisionByZeroInShapeArithmetic) {
  const char *text = R"(
func.func @f(%n: index) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %m = arith.divsi %n, %c0 : index
  %e = tensor.empty(%m) : tensor<?xf32>
  return %e : tensor<?xf32>
}
)";
  auto m = parse(text);
  EXPECT_THAT(
      [&] {
        specialize(*m->functions[0], {{Type::scalar(ElemKind::Index), 4}});
      },
      ThrowsMessage<Error>(HasSubstr("s.mlir:4:3: error: division by zero in 'arith.divsi'")));
}

// The smallest value by -1 overflows, in any width: reported as the kernel reports it when the
// values come at run time (generic mode), where folding had wrapped to the dividend.
TEST(Specialize, SignedDivisionOverflowIsAnError) {
  const char *text = R"(
func.func @f(%a: i32, %b: i32, %n: index, %m: index) -> (i32, index) {
  %q = arith.remsi %a, %b : i32
  %r = arith.divsi %n, %m : index
  return %q, %r : i32, index
}
)";
  auto m = parse(text);
  auto fold = [&](int64_t a, int64_t b, int64_t n, int64_t k) {
    specialize(*m->functions[0], {{Type::scalar(ElemKind::I32), a},
                                  {Type::scalar(ElemKind::I32), b},
                                  {Type::scalar(ElemKind::Index), n},
                                  {Type::scalar(ElemKind::Index), k}});
  };
  EXPECT_THAT([&] { fold(INT32_MIN, -1, 6, 2); },
              ThrowsMessage<Error>(HasSubstr(
                  "s.mlir:3:3: error: 'arith.remsi' of -2147483648 by -1 overflows i32")));
  EXPECT_THAT([&] { fold(7, 2, INT64_MIN, -1); },
              ThrowsMessage<Error>(HasSubstr(
                  "s.mlir:4:3: error: 'arith.divsi' of -9223372036854775808 by -1 overflows "
                  "index")));
  EXPECT_NO_THROW(fold(INT32_MIN, 1, INT64_MIN, 2));
  EXPECT_NO_THROW(fold(INT32_MIN + 1, -1, INT64_MIN + 1, -1));
}

// Found by fuzz_specialize: attention_block's head split with n_head = -1 and
// n_embd = INT64_MIN multiplied -1 by INT64_MIN (signed overflow), and two negative output dims
// whose product is the source size passed as a valid split.
TEST(Specialize, ExpandShapeRejectsNegativeDims) {
  const char *text = R"(
func.func @f(%x: tensor<?xf32>, %n: index) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %len = tensor.dim %x, %c0 : tensor<?xf32>
  %m = arith.divsi %len, %n : index
  %y = tensor.expand_shape %x [[0, 1]] output_shape [%n, %m] : tensor<?xf32> into tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}
)";
  auto m = parse(text);
  auto expand = [&](int64_t len, int64_t n) {
    specialize(*m->functions[0], {tensorSpec({len}), {Type::scalar(ElemKind::Index), n}});
  };
  EXPECT_THAT([&] { expand(16, -4); },
              ThrowsMessage<Error>(HasSubstr(
                  "s.mlir:6:3: error: 'tensor.expand_shape' output dim 0 is negative (-4)")));
  EXPECT_THAT([&] { expand(16, INT64_MIN); },
              ThrowsMessage<Error>(HasSubstr("output dim 0 is negative")));
  EXPECT_NO_THROW(expand(16, 4));
}

// Sizes and offsets from arguments may be of any value: their products and sums are checked.
TEST(Specialize, ViewAndSliceArithmeticDoesNotOverflow) {
  const char *collapse = R"(
func.func @f(%x: tensor<?x?xf32>) -> tensor<?xf32> {
  %y = tensor.collapse_shape %x [[0, 1]] : tensor<?x?xf32> into tensor<?xf32>
  return %y : tensor<?xf32>
}
)";
  auto m = parse(collapse);
  EXPECT_THAT(
      [&] {
        specialize(*m->functions[0], {tensorSpec({int64_t{1} << 32, int64_t{1} << 32})});
      },
      ThrowsMessage<Error>(HasSubstr(
          "s.mlir:3:3: error: 'tensor.collapse_shape' group 0 has more than 2^63 elements")));

  // An offset near INT64_MAX wrapped the window's last index to a negative number, which
  // passed the bounds check.
  const char *slice = R"(
func.func @f(%x: tensor<?xf32>, %o: index) -> tensor<2xf32> {
  %y = tensor.extract_slice %x[%o] [2] [1] : tensor<?xf32> to tensor<2xf32>
  return %y : tensor<2xf32>
}
)";
  m = parse(slice);
  EXPECT_THAT(
      [&] {
        specialize(*m->functions[0], {tensorSpec({8}), {Type::scalar(ElemKind::Index), INT64_MAX}});
      },
      ThrowsMessage<Error>(HasSubstr("s.mlir:3:3: error: slice dim 0 (offset 9223372036854775807, "
                                     "size 2, stride 1) is out of bounds for 'tensor<8xf32>'")));
}

TEST(Specialize, StaticSignatureDimsAreChecked) {
  const char *text = R"(
func.func @f(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  return %x : tensor<?x4xf32>
}
)";
  auto m = parse(text);
  EXPECT_THAT(
      [&] {
        specialize(*m->functions[0], {tensorSpec({2, 5})});
      },
      ThrowsMessage<Error>(HasSubstr(
          "argument #0 (%x) dim 1 is 4 in the signature ('tensor<?x4xf32>') but was given 5")));
  auto fn = specialize(*m->functions[0], {tensorSpec({2, 4})});
  EXPECT_THAT(printFunction(*fn), HasSubstr("return %x : tensor<2x4xf32>"));
}

TEST(Specialize, ExtentMismatchNamesBothOperandsAndSizes) {
  Context ctx;
  Module m = ctx.load(componentPath("normalization/rms_norm.mlir"));
  EXPECT_THAT(
      [&] {
        m.function("rms_norm_linalg")
            .specialize(std::vector<std::string>{"32x4096xf32", "4095xf32", "f32"});
      },
      ThrowsMessage<Error>(HasSubstr("loop dim d1 of 'linalg.generic' has extent 4096 from "
                                     "operand #0 (%input) dim 1 but 4095 from operand #2 "
                                     "(%weight) dim 0")));
}

} // namespace
} // namespace frank::test

namespace frank::test {
namespace {

// One definition of integer semantics serves folding and the host's shape evaluation.
TEST(IntegerSemantics, WrapsDividesAndComparesLikeTheHardware) {
  using E = ElemKind;
  EXPECT_EQ(foldInteger(OpKind::IndexCast, E::Index, E::I32, {(int64_t{1} << 32) + 5}), 5);
  EXPECT_EQ(foldInteger(OpKind::IndexCast, E::Index, E::I32, {0x80000000LL}), INT32_MIN);
  EXPECT_EQ(foldInteger(OpKind::AddI, E::I32, E::I32, {INT32_MAX, 1}), INT32_MIN);
  EXPECT_EQ(foldInteger(OpKind::DivSI, E::I32, E::I32, {INT32_MIN, -1}), INT32_MIN);
  EXPECT_EQ(foldInteger(OpKind::DivSI, E::Index, E::Index, {-7, 2}), -3);
  EXPECT_EQ(foldInteger(OpKind::RemSI, E::Index, E::Index, {-7, 2}), -1);
  EXPECT_EQ(foldInteger(OpKind::DivUI, E::I32, E::I32, {-2, 2}), 0x7fffffff);
  EXPECT_EQ(foldInteger(OpKind::ExtUI, E::I8, E::I32, {-1}), 255);
  EXPECT_EQ(foldInteger(OpKind::CmpI, E::I32, E::I1, {-1, 1}, "ult"), 0);
  EXPECT_EQ(foldInteger(OpKind::CmpI, E::I32, E::I1, {-1, 1}, "slt"), 1);
  EXPECT_EQ(foldInteger(OpKind::Select, E::Index, E::Index, {0, 4, 9}), 9);
  // i1 holds true as 1, which signed ops read as -1.
  EXPECT_EQ(foldInteger(OpKind::ExtSI, E::I1, E::I32, {1}), -1);
  EXPECT_EQ(foldInteger(OpKind::IndexCast, E::I1, E::Index, {1}), -1);
  EXPECT_EQ(foldInteger(OpKind::ExtUI, E::I1, E::I32, {1}), 1);
  EXPECT_EQ(foldInteger(OpKind::CmpI, E::I1, E::I1, {1, 0}, "slt"), 1);
  EXPECT_EQ(foldInteger(OpKind::CmpI, E::I1, E::I1, {1, 0}, "ult"), 0);
  EXPECT_EQ(foldInteger(OpKind::MaxSI, E::I1, E::I1, {1, 0}), 0);
  EXPECT_EQ(foldInteger(OpKind::MinSI, E::I1, E::I1, {1, 0}), 1);
  EXPECT_EQ(foldInteger(OpKind::AddF, E::F32, E::F32, {1, 2}), std::nullopt);
}

} // namespace
} // namespace frank::test
