// Shapes at the edges: zero-size dims (no tokens, no keys, an empty reduction) through every
// component, in both modes, and tensors of more than 2^31 elements, which need 64-bit offsets
// everywhere an address is computed. The large tensors are reserved address space (mmap with
// MAP_NORESERVE) of which only the rows a test writes or reads become memory.
#include "TestSupport.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <optional>

namespace frank::test {
namespace {

using ::testing::HasSubstr;

// ---- Zero-size dims -----------------------------------------------------------------------

struct ZeroSizeCase {
  const char *name;
  const char *component; // path under components/
  const char *function;
  std::vector<Arg> args;
  /// The result shapes, when the call is meaningful with an empty dim.
  std::vector<std::vector<int64_t>> shapes;
  /// Otherwise, the error it must give (a substring of its first line).
  const char *error = nullptr;
};

Tensor f32(std::vector<int64_t> shape) { return Tensor::zeros(DType::F32, std::move(shape)); }
Tensor i64(std::vector<int64_t> shape) { return Tensor::zeros(DType::I64, std::move(shape)); }
Tensor i32(std::vector<int64_t> shape) { return Tensor::zeros(DType::I32, std::move(shape)); }

std::vector<ZeroSizeCase> zeroSizeCases() {
  const Scalar eps = Scalar::f32(1e-6f), one = Scalar::f32(1.0f), base = Scalar::f32(1e4f);
  return {
      {"rms_norm_no_rows",
       "normalization/rms_norm.mlir",
       "rms_norm_linalg",
       {f32({0, 64}), f32({64}), eps},
       {{0, 64}}},
      {"rms_norm_no_columns",
       "normalization/rms_norm.mlir",
       "rms_norm_linalg",
       {f32({3, 0}), f32({0}), eps},
       {{3, 0}}},
      {"rms_norm_fused_no_rows",
       "normalization/rms_norm.mlir",
       "rms_norm_fused",
       {f32({0, 64}), f32({64}), eps},
       {{0, 64}}},
      {"swiglu_no_tokens",
       "activation/swiglu.mlir",
       "swiglu",
       {f32({1, 0, 64}), f32({1, 0, 64})},
       {{1, 0, 64}}},
      {"embedding_no_tokens",
       "embedding/embedding_lookup.mlir",
       "embedding_lookup",
       {f32({10, 8}), i64({1, 0})},
       {{1, 0, 8}}},
      {"embedding_1d_no_tokens",
       "embedding/embedding_lookup.mlir",
       "embedding_lookup_1d",
       {f32({10, 8}), i64({0})},
       {{0, 8}}},
      // An empty table has no row an id could name: every id is out of bounds.
      {"embedding_empty_table",
       "embedding/embedding_lookup.mlir",
       "embedding_lookup_1d",
       {f32({0, 8}), i64({2})},
       {},
       "index 0 is out of bounds for dim 0"},
      {"rope_no_tokens",
       "position/rope.mlir",
       "rope",
       {f32({1, 0, 4, 16}), i64({1, 0}), base, one},
       {{1, 0, 4, 16}}},
      {"matmul_no_rows", "linear/matmul.mlir", "matmul", {f32({0, 16}), f32({16, 8})}, {{0, 8}}},
      {"matmul_no_columns", "linear/matmul.mlir", "matmul", {f32({4, 16}), f32({16, 0})}, {{4, 0}}},
      // An empty sum is 0: the result is all zeros (checked below).
      {"matmul_empty_reduction",
       "linear/matmul.mlir",
       "matmul",
       {f32({4, 0}), f32({0, 8})},
       {{4, 8}}},
      {"attention_no_queries",
       "attention/attention_gqa.mlir",
       "attention_gqa",
       {f32({1, 0, 4, 16}), f32({1, 9, 2, 16}), f32({1, 9, 2, 16}), one},
       {{1, 0, 4, 16}}},
      // No keys: the weighted sum over keys is empty, so 0, as PyTorch's attention gives.
      {"attention_no_keys",
       "attention/attention_gqa.mlir",
       "attention_gqa",
       {f32({1, 5, 4, 16}), f32({1, 0, 2, 16}), f32({1, 0, 2, 16}), one},
       {{1, 5, 4, 16}}},
      {"attention_causal_no_queries",
       "attention/attention_gqa.mlir",
       "attention_gqa_causal",
       {f32({1, 0, 4, 16}), f32({1, 9, 2, 16}), f32({1, 9, 2, 16}), one},
       {{1, 0, 4, 16}}},
      {"attention_decode_no_keys",
       "attention/attention_gqa.mlir",
       "attention_gqa_decode",
       {f32({1, 1, 4, 16}), f32({1, 0, 2, 16}), f32({1, 0, 2, 16}), one},
       {{1, 1, 4, 16}}},
      {"mul_mat_id_no_tokens",
       "moe/mul_mat_id.mlir",
       "mul_mat_id",
       {f32({16, 32, 4}), f32({32, 2, 0}), i32({2, 0})},
       {{16, 2, 0}}},
      {"mul_mat_id_no_experts",
       "moe/mul_mat_id.mlir",
       "mul_mat_id",
       {f32({16, 32, 0}), f32({32, 2, 3}), i32({2, 3})},
       {},
       "index 0 is out of bounds"},
      {"moe_block_no_tokens",
       "moe/moe_ffn_block.mlir",
       "moe_ffn_block",
       {f32({0, 32}), f32({4, 32}), f32({16, 32, 4}), f32({16, 32, 4}), f32({32, 16, 4}),
        Scalar::index(4), Scalar::index(2), Scalar::index(32), Scalar::index(16), Scalar::i1(true)},
       {{0, 32}}},
  };
}

class ZeroSizeTest : public testing::TestWithParam<ZeroSizeCase> {};

TEST_P(ZeroSizeTest, WorksOrGivesAClearError) {
  const ZeroSizeCase &c = GetParam();
  Function fn = context().load(componentPath(c.component)).function(c.function);
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    if (c.error) {
      EXPECT_THAT([&] { fn(c.args, mode); }, testing::ThrowsMessage<Error>(HasSubstr(c.error)));
      continue;
    }
    std::vector<Tensor> results = fn(c.args, mode);
    ASSERT_EQ(results.size(), c.shapes.size());
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(results[i].shape(), c.shapes[i]) << "result " << i;
      for (int64_t e = 0; e < results[i].numel(); ++e)
        ASSERT_EQ(results[i].as<float>()[e], 0.0f) << "result " << i << " element " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Components, ZeroSizeTest, testing::ValuesIn(zeroSizeCases()),
                         [](const auto &info) { return std::string(info.param.name); });

// ---- 64-bit offsets -----------------------------------------------------------------------

/// Address space for `bytes` bytes that costs memory only where it is touched: untouched pages
/// read as zero. The reservation fails only where the process may not map that much address
/// space (a `ulimit -v` limit, or `vm.overcommit_memory=2`): the tests that need it then skip,
/// saying so, since no smaller tensor reaches past 2^31 elements.
constexpr const char *kCannotReserve =
    "cannot reserve 8.6 GB of address space here (a `ulimit -v` limit or "
    "vm.overcommit_memory=2), and no smaller tensor reaches past 2^31 elements";

class ReservedBuffer {
public:
  explicit ReservedBuffer(size_t bytes) : bytes_(bytes) {
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~ReservedBuffer() {
    if (data_)
      munmap(data_, bytes_);
  }
  ReservedBuffer(const ReservedBuffer &) = delete;
  ReservedBuffer &operator=(const ReservedBuffer &) = delete;
  float *floats() const { return static_cast<float *>(data_); }
  bool ok() const { return data_ != nullptr; }

private:
  size_t bytes_;
  void *data_;
};

// A table of V x E = 524,300 x 4096 floats (2^31 + 48K elements, 8.6 GB of address space): rows
// past 2^31 / E are reachable only with 64-bit offsets; a 32-bit offset would wrap to row 0,
// which is all zeros.
TEST(LargeOffsets, GatherReadsRowsPastTwoToThe31Elements) {
  const int64_t rows = 524300, cols = 4096;
  ASSERT_GT(rows * cols, int64_t{1} << 31);
  ReservedBuffer table(static_cast<size_t>(rows * cols) * sizeof(float));
  if (!table.ok())
    GTEST_SKIP() << kCannotReserve;
  std::vector<int64_t> ids = {rows - 1, 524288, 3, rows - 12, 524289};
  for (int64_t id : ids)
    for (int64_t e = 0; e < cols; ++e)
      table.floats()[id * cols + e] = static_cast<float>(id % 1000) + static_cast<float>(e) / cols;
  Function fn = context()
                    .load(componentPath("embedding/embedding_lookup.mlir"))
                    .function("embedding_lookup_1d");
  const int64_t n = static_cast<int64_t>(ids.size());
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    Tensor y = fn({Tensor::borrow(table.floats(), DType::F32, {rows, cols}),
                   Tensor::borrow(ids.data(), DType::I64, {n})},
                  mode)[0];
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{n, cols}));
    for (int64_t t = 0; t < n; ++t)
      ASSERT_EQ(std::memcmp(y.as<float>() + t * cols, table.floats() + ids[t] * cols,
                            cols * sizeof(float)),
                0)
          << "row " << ids[t];
  }
}

// A window whose offset (an index argument, baked in when specialized) lies past 2^31 elements,
// summed along its rows: the slice's address and the reduction's loads both need 64-bit math.
TEST(LargeOffsets, SliceAtAnOffsetPastTwoToThe31Elements) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %row: index) -> tensor<4xf32> {
      %c1 = arith.constant 1 : index
      %cols = tensor.dim %x, %c1 : tensor<?x?xf32>
      %s = tensor.extract_slice %x[%row, 0] [4, %cols] [1, 1] : tensor<?x?xf32> to tensor<4x?xf32>
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4xf32>
      %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
      %r = linalg.reduce ins(%s : tensor<4x?xf32>) outs(%acc : tensor<4xf32>) dimensions = [1] (%in: f32, %a: f32) {
        %v = arith.addf %in, %a : f32
        linalg.yield %v : f32
      }
      return %r : tensor<4xf32>
    })";
  const int64_t rows = 1 << 20, cols = 2052; // 2.15e9 elements
  ASSERT_GT(rows * cols, int64_t{1} << 31);
  ReservedBuffer x(static_cast<size_t>(rows * cols) * sizeof(float));
  if (!x.ok())
    GTEST_SKIP() << kCannotReserve;
  const int64_t first = rows - 4;
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x.floats()[(first + r) * cols + c] = static_cast<float>(r + 1);
  Function fn = context().loadString(text, "large.mlir").function("f");
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    SCOPED_TRACE(modeName(mode));
    Tensor y =
        fn({Tensor::borrow(x.floats(), DType::F32, {rows, cols}), Scalar::index(first)}, mode)[0];
    for (int64_t r = 0; r < 4; ++r)
      EXPECT_EQ(y.as<float>()[r], static_cast<float>((r + 1) * cols)) << "row " << first + r;
  }
}

} // namespace
} // namespace frank::test
