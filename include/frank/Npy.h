// NumPy .npy files: reading tensors from and writing tensors to the format np.save uses.
#pragma once

#include "frank/Tensor.h"

#include <string>
#include <string_view>

namespace frank {

/// Reads a C-order, little-endian .npy file (format 1.0, 2.0 or 3.0). Throws frank::Error with a
/// message starting `<path>: error: `.
Tensor readNpy(const std::string &path);

/// Parses the bytes of a .npy file; `name` (usually the path) prefixes the error messages.
Tensor parseNpy(std::string_view bytes, const std::string &name);

/// Writes `tensor` as a format 1.0 .npy file, byte-identical to np.save. bf16 has no NumPy dtype
/// and is rejected. Throws frank::Error with a message starting `<path>: error: `.
void writeNpy(const std::string &path, const Tensor &tensor);

/// The bytes writeNpy would write.
std::string serializeNpy(const Tensor &tensor);

} // namespace frank
