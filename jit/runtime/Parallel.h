// The parallel runtime that JIT-compiled kernels call: `frank_parallel_for` splits an iteration
// range over a small pool of worker threads.
#pragma once

#include <cstdint>

extern "C" {
/// Runs body(begin, end, context) over [0, count) in contiguous chunks of at least `minChunk`
/// iterations, on the calling thread and the pool's workers, and returns when all are done. Each
/// thread runs its own part of the range first; a long range's parts are taken in steps, which a
/// thread done with its own part takes over from the others.
/// Falls back to one serial call when the range is small or the pool is busy with another
/// caller's loop (so concurrent kernels never wait for each other).
void frank_parallel_for(void (*body)(int64_t begin, int64_t end, void *context), void *context,
                        int64_t count, int64_t minChunk);
}

namespace frank::runtime {

/// Threads used by parallel loops, the caller included: FRANK_NUM_THREADS, else the hardware's.
/// A FRANK_NUM_THREADS that is not a count from 1 to 256 is warned about and not used.
int numThreads();
/// Sets it (1 runs every loop serially, at most 256); takes effect for the next loop.
void setNumThreads(int threads);

} // namespace frank::runtime
