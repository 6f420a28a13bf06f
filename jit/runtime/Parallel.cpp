// A fork-join pool for kernels' parallel loops. Waking a sleeping thread costs more than a whole
// small kernel here (microseconds), so workers spin for a while after each loop before they
// sleep, and loops below a minimum size never leave the calling thread.
//
// Protocol: the caller publishes a job and bumps `generation_`; every worker sees every
// generation exactly once (those among the loop's threads taking steps until none are left) and
// then acknowledges it. The caller returns only when all steps are done and every worker has
// acknowledged, so no worker can still be reading the job when the next one is written.
//
// The range is split in one part per thread, and each thread runs its own part first (the caller
// the first, worker i part i + 1), so a loop run again gives every thread the part it had last
// time, whose data its caches may still hold (S1 10-11 us with chunks claimed in turn by
// whichever thread came first, 7.1-7.4 keeping them; attention prefill 1.10-1.17 ms against
// 0.99-1.00, on a Xeon). Then it helps with the parts left, so a thread slow to wake, or slowed
// by the machine, delays little: a long loop's part is taken in steps (kStepsPerPart), and a
// thread that finished its own part takes the next steps of the others'. A step is long enough
// (kMinChunksPerStep) that the caches it leaves behind cost little; shorter loops keep whole
// parts, where taking another thread's rows would only read them from its cache.
#include "runtime/Parallel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define FRANK_PAUSE() _mm_pause()
#else
#define FRANK_PAUSE() ((void)0)
#endif

namespace frank::runtime {

// A pool of thousands of threads is a mistake (FRANK_NUM_THREADS=100000 took minutes creating
// them), not a configuration.
constexpr int kMaxThreads = 256;
namespace {

constexpr int kSpinIterations = 200000; // roughly 100 us of spinning before sleeping

// Steps a long loop's part is taken in, and the fewest minimum chunks (frank_parallel_for's
// minChunk) a step takes. On the Zen 3 guest, whose two cores the machine slows by turns,
// alternating runs in one process: the MoE block at 32 tokens 20.0-23.2 ms in steps against
// 21.7-23.8 in whole parts, and at one token 11.5-12.2 against 12.6-12.7; S9 at 32 tokens level
// (7.68-7.73 against 7.64-7.79). Steps of 2 rows of S1 slowed it 10% (the rows another thread
// took were in that thread's cache): with at least 16 minimum chunks a step, only the MoE nests'
// m blocks, of thousands of rows, are taken in steps.
constexpr int64_t kStepsPerPart = 8;
constexpr int64_t kMinChunksPerStep = 16;

// A thread's part of the range: its steps, taken in order by the thread and by any other that
// finished its own part.
struct alignas(64) Part {
  std::atomic<int64_t> next{0}; // the next step not taken yet
};

struct Job {
  void (*body)(int64_t, int64_t, void *) = nullptr;
  void *context = nullptr;
  int64_t count = 0, parts = 0, stepsPerPart = 0;
  int threads = 0; // the threads that take part: a pool once larger keeps idle workers
  std::array<Part, kMaxThreads> part{};
  std::atomic<int64_t> pending{0}; // steps not finished yet

  // Where step `step` of all parts' steps begins: the range in equal steps, the first
  // count % steps one iteration longer.
  int64_t stepBegin(int64_t step) const {
    const int64_t steps = parts * stepsPerPart;
    return step * (count / steps) + std::min(step, count % steps);
  }
};

class Pool {
public:
  static Pool &instance() {
    static Pool pool;
    return pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }
  void setThreads(int n) {
    n = std::clamp(n, 1, kMaxThreads);
    std::lock_guard<std::mutex> run(runMutex_); // not while a loop is running
    ensureWorkers(n - 1);
    threads_.store(n, std::memory_order_relaxed);
  }

  void run(void (*body)(int64_t, int64_t, void *), void *context, int64_t count, int64_t minChunk) {
    int threads = this->threads();
    minChunk = std::max<int64_t>(minChunk, 1);
    const int64_t parts = std::min<int64_t>(threads, count / minChunk);
    std::unique_lock<std::mutex> run(runMutex_, std::try_to_lock);
    if (parts < 2 || !run.owns_lock()) {
      body(0, count, context);
      return;
    }
    ensureWorkers(threads - 1);
    Job &job = job_;
    job.body = body;
    job.context = context;
    job.count = count;
    job.threads = threads;
    job.parts = parts;
    job.stepsPerPart =
        std::clamp<int64_t>(count / parts / minChunk / kMinChunksPerStep, 1, kStepsPerPart);
    for (int64_t p = 0; p < parts; ++p)
      job.part[size_t(p)].next.store(0, std::memory_order_relaxed);
    job.pending.store(parts * job.stepsPerPart, std::memory_order_relaxed);
    acknowledged_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(sleepMutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(job, 0);
    const int workers = static_cast<int>(workers_.size());
    while (job.pending.load(std::memory_order_acquire) != 0 ||
           acknowledged_.load(std::memory_order_acquire) != workers)
      FRANK_PAUSE();
  }

private:
  Pool() {
    int n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
    if (const char *env = std::getenv("FRANK_NUM_THREADS"); env && *env) {
      char *end = nullptr;
      errno = 0;
      long wanted = std::strtol(env, &end, 10);
      while (end != env && std::isspace(static_cast<unsigned char>(*end)))
        ++end; // spaces around the number, as strtol takes them before it
      if (end != env && *end == '\0' && errno == 0 && wanted >= 1 && wanted <= kMaxThreads)
        n = static_cast<int>(wanted);
      else
        std::fprintf(stderr,
                     "frank-jit: warning: FRANK_NUM_THREADS=%s is not a thread count from 1 to "
                     "%d; using %d\n",
                     env, kMaxThreads, n);
    }
    threads_.store(n, std::memory_order_relaxed);
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(sleepMutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread &t : workers_)
      t.join();
  }

  // Called with runMutex_ held and no job running, so the new worker's first generation to
  // take part in is the next one.
  void ensureWorkers(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      uint64_t current = generation_.load(std::memory_order_acquire);
      const int self = static_cast<int>(workers_.size()) + 1; // the caller is thread 0
      workers_.emplace_back([this, current, self] { workerLoop(current, self); });
    }
  }

  // Runs the steps of thread `self`'s own part that no other thread took, then those left of
  // the others' parts.
  static void work(Job &job, int self) {
    auto takeSteps = [&](int64_t p) {
      std::atomic<int64_t> &next = job.part[size_t(p)].next;
      for (int64_t s; (s = next.fetch_add(1, std::memory_order_relaxed)) < job.stepsPerPart;) {
        const int64_t step = p * job.stepsPerPart + s;
        job.body(job.stepBegin(step), job.stepBegin(step + 1), job.context);
        job.pending.fetch_sub(1, std::memory_order_acq_rel);
      }
    };
    if (self < job.parts)
      takeSteps(self);
    for (int64_t p = 0; p < job.parts; ++p)
      if (job.part[size_t(p)].next.load(std::memory_order_relaxed) < job.stepsPerPart)
        takeSteps(p);
  }

  void workerLoop(uint64_t seen, int self) {
    for (;;) {
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
        FRANK_PAUSE();
        ++spins;
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lock(sleepMutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_)
        return;
      if (self < job_.threads)
        work(job_, self);
      acknowledged_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  std::atomic<int> threads_{1};
  std::mutex runMutex_; // one loop on the pool at a time
  Job job_;
  std::mutex sleepMutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> acknowledged_{0};
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

} // namespace

int numThreads() { return Pool::instance().threads(); }
void setNumThreads(int threads) { Pool::instance().setThreads(threads); }

} // namespace frank::runtime

extern "C" void frank_parallel_for(void (*body)(int64_t, int64_t, void *), void *context,
                                   int64_t count, int64_t minChunk) {
  frank::runtime::Pool::instance().run(body, context, count, minChunk);
}
