// Host tensors: element-type helpers and owned, aligned tensor storage.
#include "frank/Tensor.h"
#include "runtime/Memory.h"

#include <cstdlib>
#include <cstring>
#include <limits>

namespace frank {

size_t dtypeSize(DType type) {
  switch (type) {
  case DType::F32: return 4;
  case DType::F16: return 2;
  case DType::BF16: return 2;
  case DType::F64: return 8;
  case DType::I1: return 1;
  case DType::I8: return 1;
  case DType::I16: return 2;
  case DType::I32: return 4;
  case DType::I64: return 8;
  }
  return 0;
}

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F64: return "f64";
  case DType::I1: return "i1";
  case DType::I8: return "i8";
  case DType::I16: return "i16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view mlirName) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I1, DType::I8,
                     DType::I16, DType::I32, DType::I64})
    if (mlirName == dtypeName(type))
      return type;
  return std::nullopt;
}

bool isFloat(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16 || type == DType::F64;
}

Tensor Tensor::zeros(DType type, std::vector<int64_t> shape) {
  // Checked here so that numel() and byteSize() cannot overflow or go negative later.
  constexpr auto kMaxBytes = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  size_t elementCount = 1;
  for (int64_t dim : shape) {
    if (dim < 0)
      throw Error("error: negative dimension " + std::to_string(dim) + " in tensor shape");
    if (dim != 0 && elementCount > kMaxBytes / dtypeSize(type) / static_cast<size_t>(dim))
      throw Error("error: tensor shape is too large to allocate");
    elementCount *= static_cast<size_t>(dim);
  }
  size_t byteCount = elementCount * dtypeSize(type);
  void *memory = runtime::allocate(byteCount);
  std::memset(memory, 0, byteCount);

  Tensor tensor;
  tensor.storage_ = std::shared_ptr<void>(memory, [](void *p) { std::free(p); });
  tensor.data_ = memory;
  tensor.dtype_ = type;
  tensor.shape_ = std::move(shape);
  return tensor;
}

Tensor Tensor::borrow(void *data, DType type, std::vector<int64_t> shape) {
  Tensor tensor;
  tensor.data_ = data;
  tensor.dtype_ = type;
  tensor.shape_ = std::move(shape);
  return tensor;
}

int64_t Tensor::numel() const {
  // Saturating: a borrowed shape of more than 2^63 elements (2^32 x 2^32) had wrapped to 0,
  // which made a tensor without data valid.
  int64_t count = 1;
  for (int64_t dim : shape_)
    if (__builtin_mul_overflow(count, dim, &count))
      return std::numeric_limits<int64_t>::max();
  return count;
}

size_t Tensor::byteSize() const {
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel()), dtypeSize(dtype_), &bytes))
    return std::numeric_limits<size_t>::max();
  return bytes;
}

std::string Tensor::typeString() const {
  std::string text;
  for (int64_t dim : shape_) {
    text += std::to_string(dim);
    text += 'x';
  }
  text += dtypeName(dtype_);
  return text;
}

} // namespace frank
