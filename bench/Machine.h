// This machine's roofline, measured at the start of a benchmark run so that every fraction in
// the run is of limits measured on the same machine at the same time: the FP32 FMA peak and the
// read bandwidth from DRAM, from L3 and from L2, with the thread count the kernels use. A cold
// shape's DRAM bandwidth is measured again on its own pages (TeamReader, in shapes_bench.cpp).
#pragma once

#include "frank/Frank.h"

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace frank::bench {

struct Machine {
  int threads = 1;
  double peakFlops = 0; // FLOP/s, all threads
  double dramBytes = 0; // bytes/s read from DRAM, all threads
  double l3Bytes = 0;   // bytes/s read from L3-resident data, all threads
  double l2Bytes = 0;   // bytes/s read and written (a copy) in L2-resident data, all threads
  int64_t l3Size = 0;   // bytes
  int64_t l2Size = 0;   // bytes, one core's

  /// Whether a warm call's `bytes` fit the threads' L2s together, where they stay between calls.
  bool fitsL2(double bytes) const { return bytes <= static_cast<double>(l2Size) * threads; }
  /// The bandwidth of the memory a call's bytes live in: DRAM (`cold`), else L2 or L3.
  double bandwidthFor(double bytes, bool cold) const {
    return cold ? dramBytes : fitsL2(bytes) ? l2Bytes : l3Bytes;
  }
  /// The roofline bound for a call: the time its FLOPs or its bytes need at best, with bytes
  /// from the memory they live in.
  double boundSeconds(double flops, double bytes, bool cold) const {
    return std::max(flops / peakFlops, bytes / bandwidthFor(bytes, cold));
  }
};

namespace detail {

template <class Body> double bestOfThreads(int threads, int repeats, Body body) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back(body, t);
    for (auto &thread : pool)
      thread.join();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// The widest vectors the CPU has: where one core issues two 512-bit FMAs a cycle (Intel's
// server cores), 256-bit FMAs reach half its peak, and 512-bit loads read a cache faster too.
inline bool hasAvx512() { return __builtin_cpu_supports("avx512f"); }

// fmaChains<Suffix>: ten independent FMA chains, enough to cover the FMA latency on two pipes.
// readAll<Suffix>: reads n floats (whole blocks of 4 vectors, from an aligned start) with four
// sums in flight. copyAll<Suffix>: copies n floats so, from and to aligned starts. One definition
// for each vector width, with its intrinsics' prefix.
#define FRANK_PROBES(Suffix, Target, Vector, Lanes, Prefix)                                        \
  __attribute__((target(Target))) inline float fmaChains##Suffix(int64_t iterations, float seed) { \
    Vector acc[10];                                                                                \
    for (int i = 0; i < 10; ++i)                                                                   \
      acc[i] = Prefix##_set1_ps(seed + static_cast<float>(i));                                     \
    const Vector a = Prefix##_set1_ps(0.999999f), b = Prefix##_set1_ps(1e-7f);                     \
    for (int64_t n = 0; n < iterations; ++n)                                                       \
      for (int i = 0; i < 10; ++i)                                                                 \
        acc[i] = Prefix##_fmadd_ps(acc[i], a, b);                                                  \
    Vector sum = acc[0];                                                                           \
    for (int i = 1; i < 10; ++i)                                                                   \
      sum = Prefix##_add_ps(sum, acc[i]);                                                          \
    alignas(64) float out[Lanes];                                                                  \
    Prefix##_store_ps(out, sum);                                                                   \
    return out[0];                                                                                 \
  }                                                                                                \
  __attribute__((target(Target))) inline float readAll##Suffix(const float *data, int64_t n) {     \
    Vector acc[4] = {Prefix##_setzero_ps(), Prefix##_setzero_ps(), Prefix##_setzero_ps(),          \
                     Prefix##_setzero_ps()};                                                       \
    for (int64_t i = 0; i + 4 * (Lanes) <= n; i += 4 * (Lanes))                                    \
      for (int j = 0; j < 4; ++j)                                                                  \
        acc[j] = Prefix##_add_ps(acc[j], Prefix##_load_ps(data + i + (Lanes)*j));                  \
    alignas(64) float out[Lanes];                                                                  \
    Prefix##_store_ps(                                                                             \
        out, Prefix##_add_ps(Prefix##_add_ps(acc[0], acc[1]), Prefix##_add_ps(acc[2], acc[3])));   \
    return out[0];                                                                                 \
  }                                                                                                \
  __attribute__((target(Target))) inline void copyAll##Suffix(const float *from, float *to,        \
                                                              int64_t n) {                         \
    for (int64_t i = 0; i + 4 * (Lanes) <= n; i += 4 * (Lanes))                                    \
      for (int j = 0; j < 4; ++j)                                                                  \
        Prefix##_store_ps(to + i + (Lanes)*j, Prefix##_load_ps(from + i + (Lanes)*j));             \
  }
FRANK_PROBES(8, "avx2,fma", __m256, 8, _mm256)
FRANK_PROBES(16, "avx512f", __m512, 16, _mm512)
#undef FRANK_PROBES

inline float fmaChains(int64_t iterations, float seed) {
  return hasAvx512() ? fmaChains16(iterations, seed) : fmaChains8(iterations, seed);
}
inline float readAll(const float *data, int64_t n) {
  return hasAvx512() ? readAll16(data, n) : readAll8(data, n);
}
inline void copyAll(const float *from, float *to, int64_t n) {
  hasAvx512() ? copyAll16(from, to, n) : copyAll8(from, to, n);
}

// The size of cpu0's cache of sysfs index `index` (2: L2, 3: L3), else `fallback`.
inline int64_t cacheSize(int index, int64_t fallback) {
  std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", index));
  std::string text;
  if (!(in >> text) || text.empty())
    return fallback;
  int64_t value = std::stoll(text);
  char unit = text.back();
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
}
inline int64_t l3CacheSize() { return cacheSize(3, 32 << 20); }
inline int64_t l2CacheSize() { return cacheSize(2, 1 << 20); }

} // namespace detail

/// Threads that read memory together, started once: the calling thread and `threads - 1`
/// workers that spin between rounds (as the kernels' own pool does), so that a round of a
/// millisecond is not timed with the starting of threads.
class TeamReader {
public:
  explicit TeamReader(int threads) : threads_(threads) {
    for (int t = 1; t < threads; ++t)
      workers_.emplace_back([this, t] {
        for (uint64_t seen = 0;;) {
          uint64_t round;
          while ((round = round_.load(std::memory_order_acquire)) == seen)
            _mm_pause();
          if (stop_.load(std::memory_order_acquire))
            return;
          seen = round;
          readPart(t);
          done_.fetch_add(1, std::memory_order_acq_rel);
        }
      });
  }
  ~TeamReader() {
    stop_.store(true, std::memory_order_release);
    round_.fetch_add(1, std::memory_order_acq_rel);
    for (std::thread &w : workers_)
      w.join();
  }
  TeamReader(const TeamReader &) = delete;
  TeamReader &operator=(const TeamReader &) = delete;

  /// Reads every tensor once, each split evenly over the threads; then, the same way, writes
  /// zeros over every tensor of `written`.
  void read(const std::vector<Tensor> &tensors, std::vector<Tensor> *written = nullptr) {
    tensors_ = &tensors;
    written_ = written;
    done_.store(0, std::memory_order_release);
    round_.fetch_add(1, std::memory_order_acq_rel);
    readPart(0);
    while (done_.load(std::memory_order_acquire) < threads_ - 1)
      _mm_pause();
  }

private:
  void readPart(int t) {
    for (const Tensor &tensor : *tensors_) {
      // Whole 64-float blocks, as readAll takes them, from aligned starts.
      const int64_t blocks = tensor.numel() / 64;
      const int64_t begin = blocks * t / threads_ * 64, end = blocks * (t + 1) / threads_ * 64;
      sink_ = detail::readAll(tensor.as<float>() + begin, end - begin);
    }
    if (written_)
      for (Tensor &tensor : *written_) {
        const int64_t bytes = tensor.byteSize();
        const int64_t begin = bytes * t / threads_ / 64 * 64,
                      end = bytes * (t + 1) / threads_ / 64 * 64;
        std::memset(static_cast<char *>(tensor.data()) + begin, 0, size_t(end - begin));
      }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> round_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  const std::vector<Tensor> *tensors_ = nullptr;
  std::vector<Tensor> *written_ = nullptr;
  volatile float sink_ = 0;
};

/// Measures the machine (about a second). The figures are best-of-several: limits, not averages.
inline Machine measureMachine() {
  Machine m;
  m.threads = numThreads();
  m.l3Size = detail::l3CacheSize();
  m.l2Size = detail::l2CacheSize();
  volatile float sink = 0;

  // Many short rounds rather than a few long ones: on a shared VM the other vCPU's host thread
  // may be busy for a while, and the peak is what a quiet round reaches (three rounds of 20M
  // iterations once read 102 GFLOP/s where every later run read 190-194, below the 125 GFLOP/s
  // S7 reached in the same run). Twelve rounds of 4M iterations take about 80 ms.
  const int64_t fmaIterations = 4'000'000;
  double fmaSeconds = detail::bestOfThreads(m.threads, 12, [&](int t) {
    sink = detail::fmaChains(fmaIterations, static_cast<float>(t));
  });
  m.peakFlops = 2.0 * 10 * (detail::hasAvx512() ? 16 : 8) * static_cast<double>(fmaIterations) *
                m.threads / fmaSeconds;

  // DRAM: 1 GiB per thread, far beyond the L3, on huge pages where the system allows.
  const int64_t dramFloats = int64_t{256} << 20;
  std::vector<Tensor> big;
  for (int t = 0; t < m.threads; ++t) {
    big.push_back(Tensor::zeros(DType::F32, {dramFloats}));
    std::fill_n(big.back().as<float>(), dramFloats, 1.0f);
  }
  double dramSeconds = detail::bestOfThreads(
      m.threads, 3, [&](int t) { sink = detail::readAll(big[t].as<float>(), dramFloats); });
  m.dramBytes = 4.0 * static_cast<double>(dramFloats) * m.threads / dramSeconds;
  big.clear();

  // L3: a quarter of the L3 per thread, read 40 times after a first pass brings it in, and at
  // most 8 MiB: a VM may report its host's whole L3 (480 MiB on a Xeon VM here) while its cores
  // reach a share of it, and a quarter of that read from DRAM. 8 MiB a thread is beyond every L2
  // and within the L3 on the machines this runs on (it is a quarter of a Zen 4's).
  const int64_t l3Floats = std::min<int64_t>(m.l3Size / 4, int64_t{8} << 20) / 4;
  std::vector<Tensor> warm;
  for (int t = 0; t < m.threads; ++t) {
    warm.push_back(Tensor::zeros(DType::F32, {l3Floats}));
    std::fill_n(warm.back().as<float>(), l3Floats, 1.0f);
  }
  double l3Seconds = detail::bestOfThreads(m.threads, 3, [&](int t) {
    for (int r = 0; r < 40; ++r) {
      sink = detail::readAll(warm[t].as<float>(), l3Floats);
      asm volatile("" ::: "memory"); // each pass really reads: no hoisting the pure call
    }
  });
  m.l3Bytes = 40 * 4.0 * static_cast<double>(l3Floats) * m.threads / l3Seconds;
  warm.clear();

  // L2: a copy within half of a core's L2 per thread (the rest holds what else runs), 200 times,
  // its bytes read and written both counted. A warm call whose bytes fit the L2s reads and
  // writes them there (S1 and S3 write as many bytes as they read), faster than the L3 probe:
  // S1 at 1.8-2.5x its rate. On one core of the Xeon, S1's kernel took 20.5 us, as long as a
  // plain loop writing y = x * w over the same rows (19.5-21 us), where reading them alone took
  // 10.5 us.
  const int64_t l2Floats = m.l2Size / 4 / 4;
  std::vector<Tensor> targets;
  for (int t = 0; t < m.threads; ++t) {
    warm.push_back(Tensor::zeros(DType::F32, {l2Floats}));
    targets.push_back(Tensor::zeros(DType::F32, {l2Floats}));
    std::fill_n(warm.back().as<float>(), l2Floats, 1.0f);
  }
  double l2Seconds = detail::bestOfThreads(m.threads, 5, [&](int t) {
    for (int r = 0; r < 200; ++r) {
      detail::copyAll(warm[t].as<float>(), targets[t].as<float>(), l2Floats);
      asm volatile("" ::: "memory");
    }
  });
  m.l2Bytes = 200 * 2 * 4.0 * static_cast<double>(l2Floats) * m.threads / l2Seconds;
  (void)sink;
  return m;
}

} // namespace frank::bench
