// Host tensors: dense, row-major buffers with a shape and an element type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace frank {

/// Every frank-jit failure a user can cause (bad text, shapes, files, flags) is reported by
/// throwing this, with the full message (`file:line:col: error: ...` for source text).
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A bug in frank-jit itself, never caused by the input: its message starts with "internal
/// compiler error". Derived from Error so that callers which report any failure still catch it;
/// catch it first to tell the two apart (the command line exits with status 2 for it, 1 for
/// user errors).
class InternalError : public Error {
public:
  using Error::Error;
};

/// Element types. `I1` is stored as one byte per element, like NumPy's bool: kernels write 0
/// or 1, and read any byte but 0 as true.
enum class DType : uint8_t { F32, F16, BF16, F64, I1, I8, I16, I32, I64 };

size_t dtypeSize(DType type);
/// MLIR spelling: "f32", "i1", ...
const char *dtypeName(DType type);
std::optional<DType> parseDType(std::string_view mlirName);
bool isFloat(DType type);

/// A dense row-major tensor. Copies share storage (like a shared_ptr); `borrow` wraps memory the
/// caller owns and must keep alive.
class Tensor {
public:
  Tensor() = default;
  /// Owned, zero-filled, 64-byte aligned storage.
  static Tensor zeros(DType type, std::vector<int64_t> shape);
  /// Wraps caller-owned memory without copying. The shape is checked where the tensor is used
  /// (a call, writeNpy), whose errors name it.
  static Tensor borrow(void *data, DType type, std::vector<int64_t> shape);

  bool valid() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const; // saturates at INT64_MAX
  size_t byteSize() const; // saturates at SIZE_MAX
  void *data() { return data_; }
  const void *data() const { return data_; }
  template <class T> T *as() { return static_cast<T *>(data_); }
  template <class T> const T *as() const { return static_cast<const T *>(data_); }
  /// "32x4096xf32", the spelling of the command line's --input.
  std::string typeString() const;

private:
  std::shared_ptr<void> storage_;
  void *data_ = nullptr;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
};

/// A scalar function argument (f32 eps, an index, an i1 flag), typed by the signature.
struct Scalar {
  DType type = DType::F32;
  bool isIndex = false;
  double f = 0;  // float types
  int64_t i = 0; // integer types, i1 and index

  static Scalar f32(float v) { return {DType::F32, false, v, 0}; }
  static Scalar i64(int64_t v) { return {DType::I64, false, 0, v}; }
  static Scalar index(int64_t v) { return {DType::I64, true, 0, v}; }
  static Scalar i1(bool v) { return {DType::I1, false, 0, v ? 1 : 0}; }
};

} // namespace frank
