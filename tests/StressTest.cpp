// Many threads calling the same and different kernels while new shapes are being specialized,
// bounded in time: every result is checked against its oracle, every signature is compiled once
// per context, and two contexts sharing one disk cache directory write and read the same entries
// at once, as two processes would. Run under ThreadSanitizer by `make test-tsan`.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

namespace frank::test {
namespace {

/// One call with its inputs and the oracle's answer.
struct Job {
  std::string name;
  std::string function; // "rms" or "swiglu"
  Mode mode;
  std::vector<int64_t> shape;
  std::vector<float> a, b;
  std::vector<double> expected;
};

/// Shapes widened by `widen` make kernels no other test of this process has compiled (kernels are
/// shared by every context of a process).
std::vector<Job> makeJobs(int64_t widen = 0) {
  std::vector<Job> jobs;
  uint64_t seed = 1;
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    for (auto [rows, base] : {std::pair<int64_t, int64_t>{1, 64}, {3, 200}, {64, 512}, {7, 4099}}) {
      int64_t cols = base + widen;
      Job job{fmt::format("rms {}x{} {}", rows, cols, modeName(mode)),
              "rms",
              mode,
              {rows, cols},
              {},
              {},
              {}};
      job.a = oracle::randomFloats(rows * cols, seed++);
      job.b = oracle::randomFloats(cols, seed++, 0.5f, 1.5f);
      job.expected = oracle::rmsNorm(job.a.data(), job.b.data(), 1e-6f, rows, cols);
      jobs.push_back(std::move(job));
    }
    for (int64_t base : {8, 1000, 70001}) {
      int64_t n = base + widen;
      Job job{
          fmt::format("swiglu {} {}", n, modeName(mode)), "swiglu", mode, {1, 1, n}, {}, {}, {}};
      job.a = oracle::randomFloats(n, seed++);
      job.b = oracle::randomFloats(n, seed++);
      job.expected = oracle::swiglu(job.a.data(), job.b.data(), n);
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

/// The generic kernels serve every shape of a rank: the distinct signatures the jobs compile.
size_t distinctKernels(const std::vector<Job> &jobs) {
  std::set<std::string> keys;
  for (const Job &job : jobs)
    keys.insert(job.function + (job.mode == Mode::Generic ? "" : fmt::format("{}", job.shape)));
  return keys.size();
}

struct Functions {
  Function rms, swiglu;
  explicit Functions(Context &ctx)
      : rms(ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg")),
        swiglu(ctx.load(componentPath("activation/swiglu.mlir")).function("swiglu")) {}

  /// Runs `job` and returns an empty string when its result matches the oracle.
  std::string run(const Job &job) const {
    Tensor y;
    if (job.function == "rms") {
      int64_t cols = job.shape[1];
      y = rms({Tensor::borrow(const_cast<float *>(job.a.data()), DType::F32, job.shape),
               Tensor::borrow(const_cast<float *>(job.b.data()), DType::F32, {cols}),
               Scalar::f32(1e-6f)},
              job.mode)[0];
    } else {
      y = swiglu({Tensor::borrow(const_cast<float *>(job.a.data()), DType::F32, job.shape),
                  Tensor::borrow(const_cast<float *>(job.b.data()), DType::F32, job.shape)},
                 job.mode)[0];
    }
    auto cmp = oracle::compare(y.as<float>(), job.expected, 1e-5, 1e-6);
    return cmp.ok ? std::string() : job.name + ": " + cmp.describe();
  }
};

/// Runs `threads` callers over `jobs`: each starts at its own place in a shuffled order, so the
/// first calls of every shape race with each other and with calls of shapes already compiled;
/// each makes at least one full pass and then keeps calling until `duration` has passed.
/// Returns the first failure, or an empty string.
std::string hammer(const std::vector<const Functions *> &callers, const std::vector<Job> &jobs,
                   int threads, std::chrono::milliseconds duration, std::atomic<int> &calls) {
  std::mutex mutex;
  std::string firstFailure;
  auto deadline = std::chrono::steady_clock::now() + duration;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<size_t> order(jobs.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      const Functions &fns = *callers[t % callers.size()];
      for (size_t i = 0;; ++i) {
        if (i >= jobs.size() && std::chrono::steady_clock::now() > deadline)
          break;
        const Job &job = jobs[order[(i + t) % jobs.size()]];
        std::string failure;
        try {
          failure = fns.run(job);
        } catch (const std::exception &e) {
          failure = job.name + " threw: " + e.what();
        }
        ++calls;
        if (!failure.empty()) {
          std::lock_guard<std::mutex> lock(mutex);
          if (firstFailure.empty())
            firstFailure = failure;
          return;
        }
      }
    });
  for (auto &thread : pool)
    thread.join();
  return firstFailure;
}

TEST(Stress, ManyThreadsSameAndDifferentKernelsWhileSpecializing) {
  const std::vector<Job> jobs = makeJobs();
  Context ctx;
  Functions fns(ctx);
  std::atomic<int> calls{0};
  std::string failure = hammer({&fns}, jobs, 8, std::chrono::milliseconds(1000), calls);
  EXPECT_EQ(failure, "");
  EXPECT_GE(calls.load(), 8 * static_cast<int>(jobs.size()));
  CacheStats stats = ctx.cacheStats();
  EXPECT_EQ(stats.misses, distinctKernels(jobs)) << "each signature compiles once";
  EXPECT_EQ(stats.kernels, distinctKernels(jobs));
  EXPECT_EQ(stats.hits + stats.misses, static_cast<uint64_t>(calls.load()));
}

// Two contexts sharing one disk cache directory stand for two processes: they compile the same
// kernels at the same time and write the same entries (one process's kernels are shared by its
// contexts, so the race is between the two writers of each entry). Every call stays correct and
// the directory ends with one valid entry per kernel.
TEST(Stress, ContextsSharingADiskCacheCompileTheSameKernelsAtOnce) {
  std::string dir = ::testing::TempDir() + "frank_stress_disk_cache";
  std::filesystem::remove_all(dir);
  ContextOptions options;
  options.diskCache = true;
  options.cacheDir = dir;
  // Specialized kernels only: the generic ones (one per rank) may exist in this process already.
  std::vector<Job> jobs = makeJobs(/*widen=*/3);
  std::erase_if(jobs, [](const Job &job) { return job.mode == Mode::Generic; });
  Context first(options), second(options);
  Functions a(first), b(second);
  std::atomic<int> calls{0};
  EXPECT_EQ(hammer({&a, &b}, jobs, 6, std::chrono::milliseconds(500), calls), "");

  DiskCacheInfo info = diskCacheInfo(options);
  EXPECT_EQ(info.entries.size(), distinctKernels(jobs));
  for (const DiskCacheEntry &entry : info.entries)
    EXPECT_EQ(entry.problem, "") << entry.description;
  std::filesystem::remove_all(dir);
}

// Clearing the cache while kernels run drops the cache's references only: calls in flight keep
// their kernels, and later calls compile again.
TEST(Stress, ClearingTheCacheWhileKernelsRun) {
  const std::vector<Job> jobs = makeJobs();
  Context ctx;
  Functions fns(ctx);
  std::atomic<bool> done{false};
  std::thread clearer([&] {
    while (!done) {
      ctx.clearCache();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::atomic<int> calls{0};
  std::string failure = hammer({&fns}, jobs, 4, std::chrono::milliseconds(500), calls);
  done = true;
  clearer.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(ctx.cacheStats().hits + ctx.cacheStats().misses, static_cast<uint64_t>(calls.load()));
}

} // namespace
} // namespace frank::test
