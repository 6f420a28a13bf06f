// Fuzzes the .npy reader: any bytes either parse into a tensor that matches the header or fail
// with a frank::Error naming the input.
#include "frank/Npy.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  try {
    frank::Tensor tensor = frank::parseNpy(bytes, "fuzz.npy");
    // A parsed tensor holds exactly the bytes after the header, so it serializes to as many.
    if (tensor.byteSize() > size || !tensor.valid())
      std::abort();
    std::string again = frank::serializeNpy(tensor);
    frank::Tensor reread = frank::parseNpy(again, "reserialized.npy");
    if (reread.shape() != tensor.shape() || reread.dtype() != tensor.dtype() ||
        std::memcmp(reread.data(), tensor.data(), tensor.byteSize()) != 0)
      std::abort();
  } catch (const frank::Error &error) {
    if (std::string_view(error.what()).substr(0, 10) != "fuzz.npy: ")
      std::abort();
  }
  return 0;
}
