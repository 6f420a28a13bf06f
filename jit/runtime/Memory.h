// Host memory for tensors and kernel workspaces.
#pragma once

#include <cstddef>

namespace frank::runtime {

/// 64-byte aligned memory of at least `bytes` (never null, even for 0), released with std::free.
/// Buffers of 2 MiB and more are 2 MiB aligned and advised onto transparent huge pages before
/// they are first touched: with 4 KiB pages, streaming reads reach only about two thirds of the
/// DRAM bandwidth on this class of machine. Throws frank::Error when memory runs out.
void *allocate(size_t bytes);

} // namespace frank::runtime
