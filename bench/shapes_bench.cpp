// Every benchmark shape of bench-shapes.md (S1-S10) in one run: frank-jit specialized, frank-jit
// generic, and each peer library that covers the shape, with FLOP/s, bytes/s and the fraction of
// this machine's roofline (measured at the start of the run, see Machine.h; for a cold shape, the
// DRAM bandwidth of a plain read of its weights right after each repetition), the cold compile
// time of each specialized kernel, and the time to load it from the disk cache instead.
//
// Weights of the memory-bound shapes (GEMV, mul_mat_id, the MoE block) are cold: each call reads
// the next of several copies whose total is at least twice the L3, so they come from DRAM, as in
// a model whose layers do not fit in cache. Everything else is warm (called on the same data).
//
// Names are "<id> <description>/<implementation>"; bench/report.py turns the JSON output into
// the report and the roofline plot (`make bench`).
#include "Machine.h"
#include "Peers.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/Program.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <set>

using namespace frank;
using namespace frank::bench;

namespace {

struct PeerSpec {
  std::string name;
  PeerStatus status;
  std::function<PeerCall()> prepare; // allocates and packs only if the peer runs
  double bytes = -1;                 // its own compulsory bytes, where its layout differs
};

struct Shape {
  Shape(std::string id, std::string description, std::string component, std::string function,
        double flops = 0, double bytes = 0)
      : id(std::move(id)), description(std::move(description)), component(std::move(component)),
        function(std::move(function)), flops(flops), bytes(bytes) {}
  std::string id, description;
  std::string component, function;
  double flops = 0, bytes = 0; // per call: nominal FLOPs, compulsory bytes
  bool cold = false;
  // The dims a model keeps as runtime values (the token count, the KV length): frank-partial
  // is the kernel that bakes in every other.
  std::string runtimeDims;
  std::vector<std::vector<Arg>> argSets; // one per rotated copy of the weights
  std::vector<size_t> coldArgs;          // the arguments that rotate (cold shapes)
  std::vector<PeerSpec> peers;
};

/// Uniform floats in [lo, hi) from a fast generator: the weights of S10 are 88M floats a copy.
Tensor randomTensor(std::vector<int64_t> shape, uint64_t seed, float lo = -1, float hi = 1) {
  Tensor t = Tensor::zeros(DType::F32, std::move(shape));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  float *p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    p[i] = lo + (hi - lo) * static_cast<float>(state >> 40) * 0x1p-24f;
  }
  return t;
}

Tensor intTensor(DType type, std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  Tensor t = Tensor::zeros(type, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = values[static_cast<size_t>(i) % values.size()];
    if (type == DType::I32)
      t.as<int32_t>()[i] = static_cast<int32_t>(v);
    else
      t.as<int64_t>()[i] = v;
  }
  return t;
}

/// How many copies of `bytes` of weights make at least twice the L3 (two at least).
size_t coldCopies(double bytes, const Machine &m) {
  return std::max<size_t>(2, static_cast<size_t>(std::ceil(2.0 * m.l3Size / bytes)));
}

/// Builds the argument sets of a shape whose tensors at `weightIndices` are cold: copies of those
/// rotate, the rest are shared.
void rotate(Shape &s, const std::vector<Arg> &args, const std::vector<size_t> &weightIndices,
            const Machine &m, std::vector<std::vector<Tensor>> *weightCopies = nullptr) {
  double weightBytes = 0;
  for (size_t i : weightIndices)
    weightBytes += static_cast<double>(std::get<Tensor>(args[i]).numel()) * 4;
  size_t copies = s.cold ? coldCopies(weightBytes, m) : 1;
  if (s.cold)
    s.coldArgs = weightIndices;
  if (weightCopies)
    weightCopies->assign(weightIndices.size(), {});
  for (size_t c = 0; c < copies; ++c) {
    std::vector<Arg> set = args;
    for (size_t w = 0; w < weightIndices.size(); ++w) {
      size_t i = weightIndices[w];
      Tensor t = c == 0 ? std::get<Tensor>(args[i])
                        : randomTensor(std::get<Tensor>(args[i]).shape(), 1000 * c + i);
      set[i] = t;
      if (weightCopies)
        (*weightCopies)[w].push_back(t);
    }
    s.argSets.push_back(std::move(set));
  }
}

/// How many copies of its weights a peer that reads only `peerBytes` of them a call (the chosen
/// experts of its expert-major layout) rotates through: enough that what it reads spans as much
/// memory as the kernels' copies, so that it meets the same caches. With only twice the L3, the
/// 29 MB a call of S9 at one token reads came partly from L3.
size_t peerCopyCount(const std::vector<Tensor> &copies, double bytesPerCopy, double peerBytes) {
  return std::max(copies.size(), static_cast<size_t>(std::ceil(static_cast<double>(copies.size()) *
                                                               bytesPerCopy / peerBytes)));
}

PeerSpec matmulPeer(const std::string &name, PeerStatus status,
                    PeerCall (*make)(const Tensor &, const std::vector<Tensor> &, Tensor &),
                    Tensor x, std::vector<Tensor> weights, int64_t n) {
  return {name, status, [=] {
            Tensor y = Tensor::zeros(DType::F32, {x.shape()[0], n});
            return make(x, weights, y);
          }};
}

Shape matmulShape(const std::string &id, int64_t m, int64_t k, int64_t n, bool cold,
                  const Machine &machine) {
  Shape s{id, fmt::format("matmul {}x{}x{}", m, k, n), "linear/matmul.mlir", "matmul"};
  s.flops = 2.0 * m * k * n;
  s.bytes = 4.0 * (m * k + k * n + m * n);
  s.cold = cold;
  Tensor x = randomTensor({m, k}, 1), w = randomTensor({k, n}, 2, -0.05f, 0.05f);
  std::vector<std::vector<Tensor>> weights;
  rotate(s, {x, w}, {1}, machine, &weights);
  s.runtimeDims = "x:0";
  s.peers.push_back(matmulPeer("openblas", openblasStatus(), openblasMatmul, x, weights[0], n));
  s.peers.push_back(matmulPeer("onednn", onednnStatus(), onednnMatmul, x, weights[0], n));
  s.peers.push_back(matmulPeer("libxsmm", libxsmmStatus(), libxsmmMatmul, x, weights[0], n));
  s.peers.push_back({"ggml", ggmlStatus(), [x, w = weights[0]] { return ggmlMatmul(x, w); }});
  return s;
}

/// S9's expert ids: every expert used, each token's two experts different.
std::vector<int64_t> expertIds(int64_t tokens) {
  if (tokens == 1)
    return {3, 5};
  return {1, 6, 3, 0, 5, 2, 7, 4};
}

Shape mulMatIdShape(int64_t tokens, const Machine &machine) {
  const int64_t nOut = 3584, nIn = 1024, experts = 8, used = 2;
  Shape s{fmt::format("S9t{}", tokens), fmt::format("mul_mat_id T={}", tokens),
          "moe/mul_mat_id.mlir", "mul_mat_id"};
  s.flops = 2.0 * nOut * nIn * used * tokens;
  // The component's layout keeps the expert innermost, so every cache line of the weights holds
  // every expert: even one token's two experts read all of them.
  s.bytes = 4.0 * (nOut * nIn * experts + nIn * used * tokens + nOut * used * tokens);
  s.cold = true;
  s.runtimeDims = "input:2,ids:1";
  Tensor w = randomTensor({nOut, nIn, experts}, 3, -0.03f, 0.03f);
  Tensor x = randomTensor({nIn, used, tokens}, 4);
  Tensor ids = intTensor(DType::I32, {used, tokens}, expertIds(tokens));
  std::vector<std::vector<Tensor>> weights;
  rotate(s, {w, x, ids}, {0}, machine, &weights);
  // Repacked expert-major, a BLAS caller reads only the selected experts' rows.
  std::set<int64_t> distinct;
  for (int64_t p = 0; p < used * tokens; ++p)
    distinct.insert(ids.as<int32_t>()[p]);
  double peerBytes = s.bytes - 4.0 * nOut * nIn * (experts - static_cast<double>(distinct.size()));
  const size_t copies = peerCopyCount(weights[0], 4.0 * w.numel(), peerBytes);
  s.peers.push_back({"openblas", openblasStatus(),
                     [w = weights[0], x, ids, nOut, used, tokens, copies] {
                       Tensor out = Tensor::zeros(DType::F32, {nOut, used, tokens});
                       return openblasMulMatId(w, x, ids, out, copies);
                     },
                     peerBytes});
  s.peers.push_back({"ggml", ggmlStatus(),
                     [w = weights[0], x, ids, copies] { return ggmlMulMatId(w, x, ids, copies); },
                     peerBytes});
  return s;
}

/// How many experts the router [X, E] chooses for any token of input [T, E] (its `used` largest
/// logits; the softmax keeps their order).
int64_t chosenExperts(const Tensor &input, const Tensor &router, int64_t used) {
  const int64_t tokens = input.shape()[0], embd = input.shape()[1], experts = router.shape()[0];
  std::set<int64_t> chosen;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<std::pair<double, int64_t>> logits;
    for (int64_t x = 0; x < experts; ++x) {
      double sum = 0;
      for (int64_t i = 0; i < embd; ++i)
        sum += double(router.as<float>()[x * embd + i]) * input.as<float>()[t * embd + i];
      logits.push_back({-sum, x});
    }
    std::sort(logits.begin(), logits.end());
    for (int64_t j = 0; j < used; ++j)
      chosen.insert(logits[static_cast<size_t>(j)].second);
  }
  return static_cast<int64_t>(chosen.size());
}

Shape moeBlockShape(int64_t tokens, const Machine &machine) {
  const int64_t e = 1024, f = 3584, experts = 8, used = 2;
  Shape s{fmt::format("S10t{}", tokens), fmt::format("moe_ffn_block T={}", tokens),
          "moe/moe_ffn_block.mlir", "moe_ffn_block"};
  // Router, the three expert matmuls of each chosen expert, the weighted sum.
  s.flops = 2.0 * tokens * experts * e + 3 * 2.0 * f * e * used * tokens + 2.0 * tokens * used * e;
  s.bytes = 4.0 * (3 * f * e * experts + experts * e + 2 * tokens * e);
  s.cold = true;
  s.runtimeDims = "input:0";
  std::vector<Arg> args = {randomTensor({tokens, e}, 5),
                           randomTensor({experts, e}, 6),
                           randomTensor({f, e, experts}, 7, -0.03f, 0.03f),
                           randomTensor({f, e, experts}, 8, -0.03f, 0.03f),
                           randomTensor({e, f, experts}, 9, -0.02f, 0.02f),
                           Scalar::index(experts),
                           Scalar::index(used),
                           Scalar::index(e),
                           Scalar::index(f),
                           Scalar::i1(true)};
  std::vector<std::vector<Tensor>> weights;
  rotate(s, args, {2, 3, 4}, machine, &weights);
  // Its experts stored one after another, ggml reads only the chosen experts' weights.
  const double chosen = static_cast<double>(
      chosenExperts(std::get<Tensor>(args[0]), std::get<Tensor>(args[1]), used));
  const double peerBytes = s.bytes - 4.0 * 3 * f * e * (experts - chosen);
  s.peers.push_back({"ggml", ggmlStatus(),
                     [input = std::get<Tensor>(args[0]), router = std::get<Tensor>(args[1]),
                      w = MoeWeights{weights[0], weights[1], weights[2]}, used,
                      copies = peerCopyCount(weights[0], 4.0 * 3 * f * e * experts, peerBytes)] {
                       return ggmlMoeBlock(input, router, w, used, /*normalize=*/true, copies);
                     },
                     peerBytes});
  return s;
}

std::vector<Shape> makeShapes(const Machine &m) {
  std::vector<Shape> shapes;
  auto warm = [&](Shape s, std::vector<Arg> args, const char *runtimeDims) {
    s.runtimeDims = runtimeDims;
    rotate(s, args, {}, m);
    shapes.push_back(std::move(s));
  };
  auto addGgml = [&](std::function<PeerCall(const std::vector<Arg> &)> make) {
    shapes.back().peers.push_back(
        {"ggml", ggmlStatus(), [make, args = shapes.back().argSets[0]] { return make(args); }});
  };
  auto tensor = [](const std::vector<Arg> &args, size_t i) { return std::get<Tensor>(args[i]); };
  auto scalar = [](const std::vector<Arg> &args, size_t i) {
    return static_cast<float>(std::get<Scalar>(args[i]).f);
  };
  // S1: 4 FLOPs per element (square, add, scale, weight).
  for (auto [id, rows] : {std::pair<const char *, int64_t>{"S1", 32}, {"S1d", 1}}) {
    warm({id, fmt::format("rms_norm {}x4096", rows), "normalization/rms_norm.mlir",
          "rms_norm_linalg", 4.0 * rows * 4096, 4.0 * (2 * rows * 4096 + 4096)},
         {randomTensor({rows, 4096}, 10), randomTensor({4096}, 11, 0.5f, 1.5f), Scalar::f32(1e-6f)},
         "input:0");
    addGgml([=](const auto &a) { return ggmlRmsNorm(tensor(a, 0), tensor(a, 1), scalar(a, 2)); });
  }
  // S2: 6 FLOPs per element, exp counted as one.
  const int64_t n2 = 32 * 14336;
  warm({"S2", "swiglu 1x32x14336", "activation/swiglu.mlir", "swiglu", 6.0 * n2, 12.0 * n2},
       {randomTensor({1, 32, 14336}, 12, -4, 4), randomTensor({1, 32, 14336}, 13, -8, 8)},
       "gate:1,up:1");
  addGgml([=](const auto &a) { return ggmlSwiglu(tensor(a, 0), tensor(a, 1)); });
  // S3: a copy of the 128 rows the ids name.
  warm({"S3", "embedding_lookup 32000x2048 ids 1x128", "embedding/embedding_lookup.mlir",
        "embedding_lookup", 0, 4.0 * (2 * 128 * 2048) + 8 * 128},
       {randomTensor({32000, 2048}, 14),
        intTensor(DType::I64, {1, 128}, {17, 31990, 5, 2048, 999, 12345, 0, 31999})},
       "indices:1");
  addGgml([=](const auto &a) { return ggmlGetRows(tensor(a, 0), tensor(a, 1)); });
  // S4: 3 FLOPs per element for the rotation (sin and cos per pair not counted).
  const int64_t n4 = 128 * 32 * 128;
  std::vector<int64_t> positions(128);
  std::iota(positions.begin(), positions.end(), 0);
  warm({"S4", "rope 1x128x32x128", "position/rope.mlir", "rope", 3.0 * n4, 8.0 * n4 + 8 * 128},
       {randomTensor({1, 128, 32, 128}, 15), intTensor(DType::I64, {1, 128}, positions),
        Scalar::f32(10000), Scalar::f32(1)},
       "input:1,positions:1");
  addGgml([=](const auto &a) {
    return ggmlRope(tensor(a, 0), tensor(a, 1), scalar(a, 2), scalar(a, 3));
  });
  // S5, S6: 4 FLOPs per (query, key, d) per head: the scores and the weighted sum.
  const float scale = 1.0f / std::sqrt(128.0f);
  for (auto [id, fn, pairs] :
       {std::tuple<const char *, const char *, double>{"S5", "attention_gqa", 128.0 * 128},
        {"S5c", "attention_gqa_causal", 128.0 * 129 / 2}}) {
    warm({id, fmt::format("{} 1x128x32x128 kv 8 heads", fn), "attention/attention_gqa.mlir", fn,
          4.0 * 32 * 128 * pairs, 4.0 * (2 * 128 * 32 * 128 + 2 * 128 * 8 * 128)},
         {randomTensor({1, 128, 32, 128}, 16), randomTensor({1, 128, 8, 128}, 17),
          randomTensor({1, 128, 8, 128}, 18), Scalar::f32(scale)},
         "query:1,key:1,value:1");
    const bool causal = std::strcmp(fn, "attention_gqa_causal") == 0;
    addGgml([=](const auto &a) {
      return ggmlAttention(tensor(a, 0), tensor(a, 1), tensor(a, 2), scalar(a, 3), causal);
    });
  }
  warm({"S6", "attention_gqa_decode q 1x1x32x128 kv 1x512x8x128", "attention/attention_gqa.mlir",
        "attention_gqa_decode", 4.0 * 32 * 512 * 128, 4.0 * (2 * 32 * 128 + 2 * 512 * 8 * 128)},
       {randomTensor({1, 1, 32, 128}, 19), randomTensor({1, 512, 8, 128}, 20),
        randomTensor({1, 512, 8, 128}, 21), Scalar::f32(scale)},
       "key:1,value:1");
  addGgml([=](const auto &a) {
    return ggmlAttention(tensor(a, 0), tensor(a, 1), tensor(a, 2), scalar(a, 3), false);
  });
  shapes.push_back(matmulShape("S7", 128, 4096, 4096, /*cold=*/false, m));
  shapes.push_back(matmulShape("S8", 1, 4096, 4096, /*cold=*/true, m));
  for (int64_t tokens : {1, 32})
    shapes.push_back(mulMatIdShape(tokens, m));
  for (int64_t tokens : {1, 32})
    shapes.push_back(moeBlockShape(tokens, m));
  return shapes;
}

/// A cold shape's rotated tensors, copy by copy.
std::vector<std::vector<Tensor>> coldTensors(const Shape &s) {
  std::vector<std::vector<Tensor>> copies;
  for (const std::vector<Arg> &set : s.argSets) {
    copies.emplace_back();
    for (size_t i : s.coldArgs)
      copies.back().push_back(std::get<Tensor>(set[i]));
  }
  return copies;
}

double byteSize(const std::vector<Tensor> &tensors) {
  double bytes = 0;
  for (const Tensor &t : tensors)
    bytes += static_cast<double>(t.byteSize());
  return bytes;
}

/// The tensors among `args`.
std::vector<Tensor> tensorsOf(const std::vector<Arg> &args) {
  std::vector<Tensor> tensors;
  for (const Arg &arg : args)
    if (const Tensor *t = std::get_if<Tensor>(&arg))
      tensors.push_back(*t);
  return tensors;
}

/// Whether a warm shape's compulsory bytes are its whole inputs and outputs, which a plain copy
/// then moves too; not an embedding lookup's, which reads a few rows of its table.
bool copiesItsBytes(const Shape &s) { return byteSize(tensorsOf(s.argSets[0])) <= s.bytes; }

/// Bytes per second of a plain read of every copy of a cold shape's weights on every thread, now:
/// the DRAM roof of the calls just timed. This machine's DRAM bandwidth depends on where the
/// pages are and when (the same probe reads 35 GB/s or 64), so each repetition's fraction of the
/// roofline is of the bandwidth of its own pages at its own moment. The best of rounds over at
/// least 150 ms: a peer's threads spin for tens of milliseconds after its last call (OpenBLAS),
/// and until they sleep the reader shares their cores and reads at a quarter of the rate.
double coldReadRate(const Shape &s) {
  const std::vector<std::vector<Tensor>> copies = coldTensors(s);
  TeamReader team(numThreads());
  team.read({}); // every thread started and waiting
  double bytes = 0;
  for (const std::vector<Tensor> &copy : copies)
    bytes += byteSize(copy);
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::milliseconds(150);
  double best = 1e30;
  for (int round = 0; round < 3 || Clock::now() < until; ++round) {
    auto start = Clock::now();
    for (const std::vector<Tensor> &copy : copies)
      team.read(copy);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return bytes / best;
}

void setCounters(benchmark::State &state, const Shape &s, double bytes, Machine m) {
  if (s.cold && !s.coldArgs.empty())
    m.dramBytes = coldReadRate(s);
  const double calls = static_cast<double>(state.iterations());
  state.counters["flops"] = s.flops;
  state.counters["bytes"] = bytes;
  state.counters["cold"] = s.cold;
  state.counters["FLOP/s"] = benchmark::Counter(s.flops * calls, benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * calls));
  // bound time * calls / elapsed: the fraction of the roofline reached.
  state.counters["roofline"] = benchmark::Counter(m.boundSeconds(s.flops, bytes, s.cold) * calls,
                                                  benchmark::Counter::kIsRate);
}

std::string name(const Shape &s, const std::string &implementation) {
  return fmt::format("{} {}/{}", s.id, s.description, implementation);
}

/// A copy of the component's text with its module symbol changed, so that no cache knows it.
std::string freshModule(const std::string &component, const std::string &suffix) {
  std::ifstream in(std::string(FRANK_COMPONENTS_DIR) + "/" + component);
  std::string text(std::istreambuf_iterator<char>(in), {});
  size_t at = text.find("module @");
  if (at != std::string::npos)
    text.insert(text.find_first_of(" {", at + 8), suffix);
  return text;
}

// The flag that makes frank-shapes a helper process which compiles one kernel into a disk cache:
//   frank-shapes --fill-disk-cache DIR COMPONENT FUNCTION SUFFIX TYPE...
// A kernel this process compiled or loaded once stays in its JIT, so only a kernel compiled by
// another process can show what loading one from the disk costs.
constexpr const char *kFillDiskCache = "--fill-disk-cache";

ContextOptions diskCacheIn(const std::string &directory) {
  ContextOptions options;
  options.diskCache = true;
  options.cacheDir = directory;
  return options;
}

int fillDiskCache(int argc, char **argv) {
  if (argc < 6) {
    fmt::print(stderr, "usage: frank-shapes {} DIR COMPONENT FUNCTION SUFFIX TYPE...\n",
               kFillDiskCache);
    return 2;
  }
  try {
    Context ctx(diskCacheIn(argv[2]));
    Kernel kernel = ctx.loadString(freshModule(argv[3], argv[5]), argv[3])
                        .function(argv[4])
                        .specialize(std::vector<std::string>(argv + 6, argv + argc));
    if (ctx.cacheStats().diskWrites != 1) {
      fmt::print(stderr, "error: the kernel was not written to the disk cache in {}\n", argv[2]);
      return 1;
    }
  } catch (const std::exception &e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}

/// The argument types of a kernel as `Function::specialize` takes them: its signature's items.
std::vector<std::string> argumentTypes(const Kernel &kernel) {
  std::vector<std::string> types;
  const std::string signature = kernel.signature();
  for (size_t begin = 0; begin <= signature.size();) {
    size_t end = std::min(signature.find(", ", begin), signature.size());
    types.push_back(signature.substr(begin, end - begin));
    begin = end + 2;
  }
  return types;
}

// The counters of a plain loop over `bytes` (dram-read, cache-copy): a reference the report
// shows beside the kernels, without FLOPs or a roofline of its own.
void setPlainLoopCounters(benchmark::State &state, double bytes, bool cold) {
  state.counters["bytes"] = bytes;
  state.counters["cold"] = cold ? 1 : 0;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
}

void registerShape(Context &ctx, const Shape &shape, const Machine &m) {
  auto s = std::make_shared<Shape>(shape);
  Function fn =
      ctx.load(std::string(FRANK_COMPONENTS_DIR) + "/" + s->component).function(s->function);
  struct Variant {
    std::string impl;
    Function fn;
    Mode mode;
  };
  std::vector<Variant> kernels;
  kernels.push_back({"frank-specialized", fn, Mode::Specialized});
  if (!s->runtimeDims.empty())
    kernels.push_back(
        {"frank-partial", fn.withRuntimeDims(parseRuntimeDims(s->runtimeDims)), Mode::Specialized});
  kernels.push_back({"frank-generic", fn, Mode::Generic});
  for (const auto &[impl, fn, mode] : kernels) {
    benchmark::RegisterBenchmark(name(*s, impl).c_str(),
                                 [=, &m](benchmark::State &state) {
                                   Kernel kernel = fn.specialize(s->argSets[0], mode);
                                   std::vector<Tensor> outputs = kernel(s->argSets[0]);
                                   // From copy 1, as the peers: copy 0 was just read.
                                   size_t copy = 1;
                                   for (auto _ : state) {
                                     kernel.run(s->argSets[copy++ % s->argSets.size()], outputs);
                                     benchmark::ClobberMemory();
                                   }
                                   setCounters(state, *s, s->bytes, m);
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // A cold shape's weights read in turn by a plain loop on every thread, the pages the kernels
  // read: the time its DRAM roof allows for them, beside the kernels'.
  if (s->cold)
    benchmark::RegisterBenchmark(name(*s, "dram-read").c_str(),
                                 [s](benchmark::State &state) {
                                   std::vector<std::vector<Tensor>> copies = coldTensors(*s);
                                   const double bytes = byteSize(copies[0]);
                                   TeamReader team(numThreads());
                                   team.read(copies[0]);
                                   size_t copy = 1;
                                   for (auto _ : state)
                                     team.read(copies[copy++ % copies.size()]);
                                   setPlainLoopCounters(state, bytes, /*cold=*/true);
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  else if (copiesItsBytes(*s))
    // A warm shape's tensors read and its outputs written by the same loops, again and again:
    // the time the caches they stay in allow for them, beside the kernels'.
    benchmark::RegisterBenchmark(name(*s, "cache-copy").c_str(),
                                 [s, fn](benchmark::State &state) {
                                   std::vector<Tensor> inputs = tensorsOf(s->argSets[0]);
                                   std::vector<Tensor> outputs =
                                       fn.specialize(s->argSets[0])(s->argSets[0]);
                                   TeamReader team(numThreads());
                                   team.read(inputs, &outputs);
                                   for (auto _ : state)
                                     team.read(inputs, &outputs);
                                   setPlainLoopCounters(state, byteSize(inputs) + byteSize(outputs),
                                                        /*cold=*/false);
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  for (const PeerSpec &peer : s->peers) {
    benchmark::RegisterBenchmark(
        name(*s, peer.name).c_str(),
        [=, &m](benchmark::State &state) {
          if (!peer.status.available) {
            state.SkipWithError(peer.status.reason.c_str());
            return;
          }
          PeerCall call;
          try {
            call = peer.prepare();
          } catch (const std::exception &e) {
            state.SkipWithError(e.what());
            return;
          }
          call(0); // first-call setup (thread pools, scratch) outside the timing
          size_t copy = 1;
          for (auto _ : state) {
            call(copy++);
            benchmark::ClobberMemory();
          }
          call = nullptr; // its threads (ggml's pool) stop before the DRAM roof is read
          setCounters(state, *s, peer.bytes >= 0 ? peer.bytes : s->bytes, m);
        })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // Cold compile: a module no cache (memory or disk) has seen, specialized to the shape.
  benchmark::RegisterBenchmark(
      name(*s, "compile-cold").c_str(),
      [s](benchmark::State &state) {
        static int64_t serial = 0; // process-wide: no repetition meets an earlier kernel
        ContextOptions options;
        options.diskCache = false;
        Context fresh(options);
        for (auto _ : state) {
          state.PauseTiming();
          Function f = fresh
                           .loadString(freshModule(s->component, fmt::format("_cold{}", serial++)),
                                       s->component)
                           .function(s->function);
          state.ResumeTiming();
          benchmark::DoNotOptimize(f.specialize(s->argSets[0]));
        }
      })
      ->Iterations(3)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  // Reload: the specialized kernel from a disk cache that another process filled, in a context
  // (and a process) that has not met it. The front end runs again (it yields the kernel's
  // metadata); LLVM does not.
  benchmark::RegisterBenchmark(
      name(*s, "disk-reload").c_str(),
      [s, fn](benchmark::State &state) {
        static int64_t serial = 0;
        const std::vector<std::string> types = argumentTypes(fn.specialize(s->argSets[0]));
        llvm::SmallString<128> directory;
        if (llvm::sys::fs::createUniqueDirectory("frank-disk-reload", directory)) {
          state.SkipWithError("cannot create a temporary directory for the disk cache");
          return;
        }
        const std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
        for (auto _ : state) {
          state.PauseTiming();
          const std::string suffix = fmt::format("_reload{}", serial++);
          std::vector<llvm::StringRef> helper = {self,         kFillDiskCache, directory,
                                                 s->component, s->function,    suffix};
          helper.insert(helper.end(), types.begin(), types.end());
          std::string error;
          if (llvm::sys::ExecuteAndWait(self, helper, std::nullopt, {}, 0, 0, &error) != 0) {
            const std::string message = "the helper process did not fill the disk cache " + error;
            state.SkipWithError(message.c_str());
            break;
          }
          Context fresh(diskCacheIn(std::string(directory)));
          Function f = fresh.loadString(freshModule(s->component, suffix), s->component)
                           .function(s->function);
          state.ResumeTiming();
          Kernel kernel = f.specialize(s->argSets[0]);
          state.PauseTiming();
          if (!kernel.loadedFromDisk()) {
            state.SkipWithError("the kernel was compiled, not loaded from the disk cache");
            break;
          }
          state.ResumeTiming();
        }
        llvm::sys::fs::remove_directories(directory);
      })
      ->Iterations(3)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], kFillDiskCache) == 0)
    return fillDiskCache(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  const Machine machine = measureMachine();
  fmt::print(stderr,
             "machine: {} threads, FMA peak {:.1f} GFLOP/s, DRAM read {:.1f} GB/s, L3 read "
             "{:.1f} GB/s, L2 copy {:.1f} GB/s, L3 {} MiB, L2 {} KiB a core\n",
             machine.threads, machine.peakFlops / 1e9, machine.dramBytes / 1e9,
             machine.l3Bytes / 1e9, machine.l2Bytes / 1e9, machine.l3Size >> 20,
             machine.l2Size >> 10);
  benchmark::AddCustomContext("threads", std::to_string(machine.threads));
  benchmark::AddCustomContext("peak_gflops", fmt::format("{:.2f}", machine.peakFlops / 1e9));
  benchmark::AddCustomContext("dram_gbps", fmt::format("{:.2f}", machine.dramBytes / 1e9));
  benchmark::AddCustomContext("l3_gbps", fmt::format("{:.2f}", machine.l3Bytes / 1e9));
  benchmark::AddCustomContext("l3_bytes", std::to_string(machine.l3Size));
  benchmark::AddCustomContext("l2_gbps", fmt::format("{:.2f}", machine.l2Bytes / 1e9));
  benchmark::AddCustomContext("l2_bytes", std::to_string(machine.l2Size));
  if (std::string core = openblasCore(); !core.empty()) {
    fmt::print(stderr, "OpenBLAS kernels: {}\n", core);
    benchmark::AddCustomContext("openblas_core", core);
  }
  Context ctx;
  for (const Shape &shape : makeShapes(machine))
    registerShape(ctx, shape, machine);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
