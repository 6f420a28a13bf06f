// The parallel runtime and parallel loops: every iteration runs exactly once, results do not
// depend on the thread count, and concurrent callers are safe.
#include "runtime/Parallel.h"
#include "Engine.h"
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

namespace frank::test {
namespace {

// Restores the thread count a test changes.
class ThreadCount {
public:
  explicit ThreadCount(int n) : saved_(numThreads()) { setNumThreads(n); }
  ~ThreadCount() { setNumThreads(saved_); }

private:
  int saved_;
};

TEST(ParallelFor, EveryIterationRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadCount count(threads);
    for (int64_t n : {0, 1, 2, 7, 1000, 100003})
      for (int64_t minChunk : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        frank_parallel_for(
            [](int64_t begin, int64_t end, void *context) {
              auto &h = *static_cast<std::vector<std::atomic<int>> *>(context);
              for (int64_t i = begin; i < end; ++i)
                h[i].fetch_add(1);
            },
            &hits, n, minChunk);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << ", n " << n << ", index " << i;
      }
  }
}

TEST(ParallelFor, ManyCallersAtOnce) {
  ThreadCount count(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 6; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep)
        frank_parallel_for(
            [](int64_t begin, int64_t end, void *context) {
              static_cast<std::atomic<int64_t> *>(context)->fetch_add(end - begin);
            },
            &total, 4096, 64);
    });
  for (auto &c : callers)
    c.join();
  EXPECT_EQ(total.load(), 6 * 200 * 4096);
}

// A loop run again gives each thread the chunk it had: the caller the first, the worker the
// second, so each finds the data it touched last time in its own caches (S1 took 10-11 us with
// the chunks claimed in turn by whichever thread came first, 7.1-7.4 us with each thread's own).
// Each chunk waits until the other has started, so neither thread can finish its chunk and take
// the other's: which thread runs which chunk is decided by what each claims first.
TEST(ParallelFor, ThreadsKeepTheirChunksFromLoopToLoop) {
  ThreadCount count(2);
  struct Loop {
    std::atomic<bool> started[2];
    std::thread::id owner[2];
    std::atomic<bool> timedOut;
  };
  const std::thread::id caller = std::this_thread::get_id();
  for (int loop = 0; loop < 50; ++loop) {
    Loop state{};
    frank_parallel_for(
        [](int64_t begin, int64_t, void *context) {
          auto &s = *static_cast<Loop *>(context);
          const int self = begin == 0 ? 0 : 1;
          s.owner[self] = std::this_thread::get_id();
          s.started[self].store(true);
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!s.started[1 - self].load() && !s.timedOut.load())
            if (std::chrono::steady_clock::now() > deadline)
              s.timedOut.store(true);
            else
              std::this_thread::yield();
        },
        &state, 2, 1);
    ASSERT_FALSE(state.timedOut) << "loop " << loop;
    ASSERT_EQ(state.owner[0], caller) << "loop " << loop;
    ASSERT_NE(state.owner[1], caller) << "loop " << loop;
  }
}

// frank_parallel_for over `body`, a callable the generated code's function pointer reaches
// through the context.
void parallelFor(int64_t count, int64_t minChunk,
                 const std::function<void(int64_t begin, int64_t end)> &body) {
  frank_parallel_for(
      [](int64_t begin, int64_t end, void *context) {
        (*static_cast<const std::function<void(int64_t, int64_t)> *>(context))(begin, end);
      },
      const_cast<void *>(static_cast<const void *>(&body)), count, minChunk);
}

// A long loop's parts are taken in steps, and a thread done with its own part takes the steps
// left of the others': here the first step of the second part waits until every other step has
// run, which the other thread can only do by taking the rest of that part. Whole parts (one
// chunk per thread) would run the second part as that one step.
TEST(ParallelFor, AThreadDoneWithItsPartTakesTheStepsLeftOfAnother) {
  ThreadCount count(2);
  constexpr int64_t kCount = 4096;
  std::atomic<int64_t> done{0};
  std::atomic<bool> timedOut{false};
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::thread::id>> steps; // (begin, the thread that ran it)
  parallelFor(kCount, 1, [&](int64_t begin, int64_t end) {
    if (begin == kCount / 2) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() != kCount - (end - begin) && !timedOut.load())
        if (std::chrono::steady_clock::now() > deadline)
          timedOut.store(true);
        else
          std::this_thread::yield();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      steps.emplace_back(begin, std::this_thread::get_id());
    }
    done.fetch_add(end - begin);
  });
  ASSERT_FALSE(timedOut);
  EXPECT_EQ(done.load(), kCount);
  std::thread::id blocked;
  for (auto [begin, thread] : steps)
    if (begin == kCount / 2)
      blocked = thread;
  int secondPartSteps = 0;
  for (auto [begin, thread] : steps)
    if (begin > kCount / 2) {
      ++secondPartSteps;
      EXPECT_NE(thread, blocked) << "the step at " << begin;
    }
  EXPECT_GT(secondPartSteps, 0);
}

// A pool that once had more threads keeps their workers, idle: a loop runs on the threads set
// now. Each step sleeps, so that workers taking part would take steps.
TEST(ParallelFor, FewerThreadsThanThePoolHasWorkers) {
  { ThreadCount four(4); }
  ThreadCount two(2);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  parallelFor(4096, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_LE(threads.size(), 2u);
}

// A shorter loop keeps one chunk per thread: another thread's rows would be read from that
// thread's cache (S1's 32 rows of 4096 in steps of 2 rows took 10% longer).
TEST(ParallelFor, ShortLoopsKeepOneChunkPerThread) {
  ThreadCount count(2);
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  parallelFor(32, 1, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    chunks.emplace_back(begin, end);
  });
  std::sort(chunks.begin(), chunks.end());
  EXPECT_THAT(chunks, testing::ElementsAre(std::pair<int64_t, int64_t>{0, 16},
                                           std::pair<int64_t, int64_t>{16, 32}));
}

std::vector<Arg> rmsArgs(std::vector<float> &x, std::vector<float> &w, int64_t rows, int64_t cols) {
  x = oracle::randomFloats(rows * cols, 3);
  w = oracle::randomFloats(cols, 4);
  return {Tensor::borrow(x.data(), DType::F32, {rows, cols}),
          Tensor::borrow(w.data(), DType::F32, {cols}), Scalar::f32(1e-6f)};
}

// Each output element is computed by one thread with the same arithmetic, so the thread count
// cannot change a single bit.
TEST(ParallelLoops, ResultsDoNotDependOnTheThreadCount) {
  Function rms =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  Function swiglu = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  std::vector<float> x, w;
  auto args = rmsArgs(x, w, 32, 4096);
  auto g = oracle::randomFloats(32 * 14336, 5), u = oracle::randomFloats(32 * 14336, 6);
  std::vector<Arg> sargs{Tensor::borrow(g.data(), DType::F32, {1, 32, 14336}),
                         Tensor::borrow(u.data(), DType::F32, {1, 32, 14336})};
  std::vector<Tensor> serial, parallel;
  {
    ThreadCount one(1);
    serial = {rms(args)[0], swiglu(sargs)[0]};
  }
  {
    ThreadCount two(2);
    parallel = {rms(args)[0], swiglu(sargs)[0]};
  }
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(std::memcmp(serial[i].data(), parallel[i].data(), serial[i].byteSize()), 0);
  auto cmp = oracle::compare(parallel[0].as<float>(),
                             oracle::rmsNorm(x.data(), w.data(), 1e-6f, 32, 4096), 1e-5, 1e-6);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// One row of swiglu splits its columns among the threads in whole grains of 128: a chunk edge
// inside a vector step ran the columns around it in the scalar remainder, whose exp and
// division round differently (1-2 ulp at 3 threads and more). Odd widths end in the same
// remainder whatever the thread count.
TEST(ParallelLoops, ChunksOfOneRowEndWhereVectorStepsEnd) {
  Function swiglu = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  for (int64_t n : {int64_t{14336}, int64_t{10000}, int64_t{50001}}) {
    auto g = oracle::randomFloats(n, 7, -4, 4), u = oracle::randomFloats(n, 8, -4, 4);
    std::vector<Arg> args{Tensor::borrow(g.data(), DType::F32, {1, 1, n}),
                          Tensor::borrow(u.data(), DType::F32, {1, 1, n})};
    Tensor one;
    {
      ThreadCount threads(1);
      one = swiglu(args)[0];
    }
    for (int count : {2, 3, 7, 16}) {
      ThreadCount threads(count);
      Tensor many = swiglu(args)[0];
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.byteSize()), 0)
          << n << " columns, " << count << " threads";
    }
  }
}

// A matmul packs B's panels into the region of the chunk of its parallel loop (its chunk's
// first iteration, `chunk from` in the loop IR): at every thread count, chunks of 1 to 8 n
// blocks (without groups) or of 1 or 2 groups of them, no two chunks share a region, and the
// results are the same bits and the oracle's. The same with M a runtime value, whose m blocks
// pack part of the next pair's panel and leave the rest to after them.
TEST(ParallelLoops, PackedPanelsBelongToTheirChunk) {
  // k blocks, packed; n blocks of as many vectors as the host's tile takes (4 of 16 lanes, 2
  // of 8), in groups of them
  const int64_t m = 64, k = 2048, n = 512;
  // Sums of 2048 products in float against the double oracle: 1e-4 relative.
  std::vector<float> x = oracle::randomFloats(m * k, 3), w = oracle::randomFloats(k * n, 4);
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {m, k}),
                        Tensor::borrow(w.data(), DType::F32, {k, n})};
  const std::vector<double> expected = oracle::matmul(x.data(), w.data(), m, k, n, false);
  for (bool runtimeM : {false, true})
    for (const char *config : {"", "n-group=0"}) {
      SCOPED_TRACE(fmt::format("'{}'{}", config, runtimeM ? ", runtime m" : ""));
      Context ctx(withConfig(config));
      Function matmul = ctx.load(componentPath("linear/matmul.mlir")).function("matmul");
      if (runtimeM)
        matmul = matmul.withRuntimeDims({{"x", 0}});
      std::string loops =
          matmul.emit(Stage::Loops, {runtimeM ? "?x2048xf32" : "64x2048xf32", "2048x512xf32"});
      // The n blocks (of the tile's vectors) and their groups, as the strategy printed them.
      std::smatch tile, group;
      ASSERT_TRUE(std::regex_search(
          loops, tile, std::regex("contraction\\.outer .* tile=[0-9]+x([0-9]+) lanes=([0-9]+)")))
          << loops;
      const int64_t nBlocks = n / (std::stoi(tile[1]) * std::stoi(tile[2]));
      if (*config) {
        EXPECT_THAT(loops,
                    testing::ContainsRegex(fmt::format(
                        "for n_block in 0..{} parallel\\(.*\\) chunk from pack_region", nBlocks)))
            << loops;
      } else {
        ASSERT_TRUE(std::regex_search(loops, group, std::regex(" n-group=([0-9]+)"))) << loops;
        EXPECT_THAT(loops, testing::ContainsRegex(fmt::format(
                               "for n_group in 0..{} parallel\\(.*\\) chunk from pack_region",
                               nBlocks / std::stoi(group[1]))))
            << loops;
      }
      EXPECT_THAT(loops, testing::ContainsRegex("packed_w\\[\\(+pack_region \\*")) << loops;
      std::vector<Tensor> results;
      for (int threads : {1, 2, 3, 5, 8}) {
        ThreadCount count(threads);
        results.push_back(matmul(args)[0]);
        EXPECT_EQ(std::memcmp(results[0].data(), results.back().data(), results[0].byteSize()), 0)
            << threads << " threads";
      }
      auto cmp = oracle::compare(results.back().as<float>(), expected, 1e-4, 1e-4);
      EXPECT_TRUE(cmp.ok) << cmp.describe();
    }
}

// B transposed over n its blocks do not divide: the last n block ends at n and computes again
// the columns the block before computed. Without k blocks it runs as the n blocks' loop's last
// iteration, on any thread; with k blocks after that loop, since its tiles add each k block to
// the output, which the block before reads and writes too (on another thread, the columns both
// compute had counted some k blocks twice). Every thread count gives the same bits and the
// oracle's.
TEST(ParallelLoops, ShiftedLastNBlockRunsWhereNoOtherThreadWritesItsColumns) {
  struct Case {
    int64_t m, k, n;
    const char *placement; // a regex the loop IR matches
  };
  for (const Case &c :
       {Case{128, 256, 127, "for n_block in 0..2 parallel.*\n *if cmp.slt\\(n_block, 1\\)"},
        Case{128, 1024, 1000, "\n  for k_block in 0..[0-9]+ [{]"}}) {
    SCOPED_TRACE(fmt::format("{}x{} by {}x{}", c.m, c.k, c.n, c.k));
    std::vector<float> x = oracle::randomFloats(c.m * c.k, 3),
                       w = oracle::randomFloats(c.n * c.k, 4);
    std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {c.m, c.k}),
                          Tensor::borrow(w.data(), DType::F32, {c.n, c.k})};
    Function matmul =
        context().load(componentPath("linear/matmul.mlir")).function("matmul_transpose_b");
    std::string loops = matmul.emit(
        Stage::Loops, {fmt::format("{}x{}xf32", c.m, c.k), fmt::format("{}x{}xf32", c.n, c.k)});
    if (targetOfContexts().vectorBits == 512) {
      EXPECT_THAT(loops, testing::HasSubstr("pack=#1^T")) << loops;
      EXPECT_THAT(loops, testing::ContainsRegex(c.placement)) << loops;
    }
    std::vector<Tensor> results;
    for (int threads : {1, 2, 3, 4}) {
      ThreadCount count(threads);
      results.push_back(matmul(args)[0]);
      EXPECT_EQ(std::memcmp(results[0].data(), results.back().data(), results[0].byteSize()), 0)
          << threads << " threads";
    }
    auto cmp = oracle::compare(results.back().as<float>(),
                               oracle::matmul(x.data(), w.data(), c.m, c.k, c.n, true), 1e-4, 1e-4);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
}

TEST(ParallelLoops, OnlyLargeSpecializedNestsGoParallel) {
  Function rms =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  EXPECT_THAT(rms.emit(Stage::Loops, {"32x4096xf32", "4096xf32", "f32"}),
              testing::HasSubstr("for d0 in 0..32 parallel(chunks of at least "));
  EXPECT_THAT(rms.emit(Stage::Loops, {"1x4096xf32", "4096xf32", "f32"}),
              testing::Not(testing::HasSubstr("parallel")))
      << "a decode row is too small to share";
  EXPECT_THAT(rms.emit(Stage::Loops, {"32x4096xf32", "4096xf32", "f32"}, Mode::Generic),
              testing::Not(testing::HasSubstr("parallel")))
      << "generic mode is the single-threaded baseline";
  Function swiglu = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  EXPECT_THAT(swiglu.emit(Stage::Loops, {"1x32x14336xf32", "1x32x14336xf32"}),
              testing::HasSubstr("for d1 in 0..32 parallel"))
      << "past the unit batch dim";
}

// The threshold counts a point by its body's cost: 8192 points of exp and a divide (swiglu) are
// worth two threads, 8192 points of a sum of squares or a divide (rms_norm) are not.
TEST(ParallelLoops, CostlyBodiesGoParallelSooner) {
  Function swiglu = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  EXPECT_THAT(swiglu.emit(Stage::Loops, {"1x4x2048xf32", "1x4x2048xf32"}),
              testing::HasSubstr("for d1 in 0..4 parallel(chunks of at least 1)"));
  Function rms =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  EXPECT_THAT(rms.emit(Stage::Loops, {"4x2048xf32", "2048xf32", "f32"}),
              testing::Not(testing::HasSubstr("parallel")));
}

TEST(ParallelLoops, KernelsCalledFromManyThreads) {
  ThreadCount two(2);
  Function rms =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x, w;
  auto args = rmsArgs(x, w, 64, 2048);
  auto expected = oracle::rmsNorm(x.data(), w.data(), 1e-6f, 64, 2048);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 25; ++rep)
        if (!oracle::compare(rms(args)[0].as<float>(), expected, 1e-5, 1e-6).ok)
          ++failures;
    });
  for (auto &c : callers)
    c.join();
  EXPECT_EQ(failures.load(), 0);
}

// One partly specialized kernel, called at once from threads that each pass their own row count:
// every call gets the shapes of its own rows, whatever the call before it on another thread.
TEST(ParallelLoops, OneKernelCalledFromManyThreadsWithTheirOwnRuntimeDims) {
  ThreadCount two(2);
  Function rms = context()
                     .load(componentPath("normalization/rms_norm.mlir"))
                     .function("rms_norm_linalg")
                     .withRuntimeDims({{"input", 0}});
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> x(kThreads), w(kThreads);
  std::vector<std::vector<Arg>> args;
  std::vector<std::vector<double>> expected;
  for (int t = 0; t < kThreads; ++t) {
    args.push_back(rmsArgs(x[t], w[t], t + 1, 512));
    expected.push_back(oracle::rmsNorm(x[t].data(), w[t].data(), 1e-6f, t + 1, 512));
  }
  Kernel kernel = rms.specialize(args[0]);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t)
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<Tensor> out = kernel(args[t]);
        if (out[0].shape() != std::vector<int64_t>{t + 1, 512} ||
            !oracle::compare(out[0].as<float>(), expected[t], 1e-5, 1e-6).ok)
          ++failures;
      }
    });
  for (auto &c : callers)
    c.join();
  EXPECT_EQ(failures.load(), 0);
}

} // namespace
} // namespace frank::test
