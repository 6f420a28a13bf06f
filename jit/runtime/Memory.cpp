// Aligned allocation with huge pages for large buffers.
#include "runtime/Memory.h"
#include "frank/Tensor.h"

#include <cstdlib>
#include <string>
#include <sys/mman.h>

namespace frank::runtime {

void *allocate(size_t bytes) {
  constexpr size_t kLine = 64, kHugePage = size_t{2} << 20;
  size_t alignment = bytes >= kHugePage ? kHugePage : kLine;
  size_t size = bytes == 0 ? kLine : (bytes + alignment - 1) / alignment * alignment;
  void *memory = std::aligned_alloc(alignment, size);
  if (!memory)
    throw Error("error: cannot allocate " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePage)
    madvise(memory, size, MADV_HUGEPAGE); // advice only: failure leaves 4 KiB pages
#endif
  return memory;
}

} // namespace frank::runtime
