// ggml, llama.cpp's CPU library, on the benchmark shapes; see Peers.h.
//
// Each shape is the graph llama.cpp builds for it, computed by ggml's CPU backend on a thread
// pool of numThreads() threads that lives as long as the call. Weights are converted once, before
// timing, into the layouts ggml takes (the row of a matrix contiguous along the reduction, the
// experts outermost), as a model loader stores them; the tensors that rotate between copies
// (cold weights) are re-pointed before each call. On the first copy the result is checked
// against the oracle (tests/oracles: plain loops in double), so that a layout mistake is an error,
// not a fast wrong number.
#include "Peers.h"

#include <fmt/format.h>

#include <stdexcept>

#ifdef FRANK_HAVE_GGML
#include "oracles/AttentionMoe.h"
#include "oracles/EmbeddingRopeMoe.h"
#include "oracles/Oracles.h"

#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <memory>
#endif

namespace frank::bench {

PeerStatus ggmlStatus() {
#ifdef FRANK_HAVE_GGML
  return {true, {}};
#else
  return {false, "ggml (llama.cpp's CPU library) is not built (make bench-peers builds it)"};
#endif
}

#ifdef FRANK_HAVE_GGML

namespace {

/// One ggml graph over host memory: leaf tensors point at buffers the caller keeps alive, the
/// ops' results live in the graph's own context.
class GgmlGraph {
public:
  /// `resultBytes`: room for every op's result.
  explicit GgmlGraph(size_t resultBytes) {
    ggml_cpu_init();
    leaves_ = ggml_init({64 * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true});
    ops_ =
        ggml_init({resultBytes + 256 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20),
                   nullptr, false});
    ggml_threadpool_params params = ggml_threadpool_params_default(numThreads());
    pool_ = ggml_threadpool_new(&params);
    if (!leaves_ || !ops_ || !pool_)
      throw std::runtime_error("ggml could not allocate its context or thread pool");
  }
  ~GgmlGraph() {
    ggml_threadpool_free(pool_);
    ggml_free(ops_);
    ggml_free(leaves_);
  }
  GgmlGraph(const GgmlGraph &) = delete;
  GgmlGraph &operator=(const GgmlGraph &) = delete;

  ggml_context *ctx() { return ops_; }

  /// A leaf of `type` and extents `ne` (ggml's order: ne[0] contiguous) over `data`.
  ggml_tensor *leaf(ggml_type type, std::vector<int64_t> ne, const void *data) {
    ne.resize(4, 1);
    ggml_tensor *t = ggml_new_tensor_4d(leaves_, type, ne[0], ne[1], ne[2], ne[3]);
    t->data = const_cast<void *>(data);
    return t;
  }
  ggml_tensor *leaf(const std::vector<int64_t> &ne, const float *data) {
    return leaf(GGML_TYPE_F32, ne, data);
  }

  /// Plans the graph that computes `out`.
  void build(ggml_tensor *out) {
    out_ = out;
    graph_ = ggml_new_graph(ops_);
    ggml_build_forward_expand(graph_, out);
    plan_ = ggml_graph_plan(graph_, numThreads(), pool_);
    work_.resize(plan_.work_size);
    plan_.work_data = work_.data();
  }

  void compute() {
    if (ggml_graph_compute(graph_, &plan_) != GGML_STATUS_SUCCESS)
      throw std::runtime_error("ggml_graph_compute failed");
  }

  const float *result() const { return static_cast<const float *>(out_->data); }

private:
  ggml_context *leaves_ = nullptr, *ops_ = nullptr;
  ggml_threadpool *pool_ = nullptr;
  ggml_cgraph *graph_ = nullptr;
  ggml_tensor *out_ = nullptr;
  ggml_cplan plan_{};
  std::vector<uint8_t> work_;
};

/// Throws unless `actual` (in the component's layout) matches the oracle: |a - e| <= rtol * |e|
/// + atol * max|e|. The peers sum in f32 in their own order (and ggml's exp is its own), so the
/// check is that they compute the same function, not how they round: 1e-3 of the output's scale.
void checkResult(const char *what, const float *actual, const std::vector<double> &expected,
                 double rtol = 1e-3, double atol = 1e-3) {
  double scale = 0;
  for (double e : expected)
    scale = std::max(scale, std::abs(e));
  oracle::Comparison cmp = oracle::compare(actual, expected, rtol, atol * std::max(scale, 1e-30));
  if (!cmp.ok)
    throw std::runtime_error(
        fmt::format("ggml's {} differs from the oracle: {}", what, cmp.describe()));
}

/// [rows, cols] -> [cols, rows], row-major both.
Tensor transposed(const float *src, int64_t rows, int64_t cols) {
  Tensor dst = Tensor::zeros(DType::F32, {cols, rows});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst.as<float>()[c * rows + r] = src[r * cols + c];
  return dst;
}

/// Each rotating leaf's buffers, copy by copy.
using Copies = std::vector<std::vector<Tensor>>;

/// A call that computes `graph` with the `copy`-th buffer of each rotating leaf.
PeerCall rotatingCall(std::shared_ptr<GgmlGraph> graph, std::vector<ggml_tensor *> rotating,
                      Copies copies) {
  return [graph, rotating, copies](size_t copy) {
    for (size_t i = 0; i < rotating.size(); ++i)
      rotating[i]->data = const_cast<float *>(copies[i][copy % copies[i].size()].as<float>());
    graph->compute();
  };
}

/// A call of a graph whose leaves all stay; `leafData` keeps what they point into alive.
PeerCall fixedCall(std::shared_ptr<GgmlGraph> graph, std::shared_ptr<const void> leafData = {}) {
  return [graph, leafData](size_t) { graph->compute(); };
}

std::vector<int32_t> toInt32(const Tensor &ids) {
  std::vector<int32_t> out(static_cast<size_t>(ids.numel()));
  for (int64_t i = 0; i < ids.numel(); ++i)
    out[static_cast<size_t>(i)] = ids.dtype() == DType::I64
                                      ? static_cast<int32_t>(ids.as<int64_t>()[i])
                                      : ids.as<int32_t>()[i];
  return out;
}

} // namespace

PeerCall ggmlRmsNorm(const Tensor &x, const Tensor &w, float eps) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  auto graph = std::make_shared<GgmlGraph>(2 * static_cast<size_t>(x.byteSize()));
  ggml_tensor *normed = ggml_rms_norm(graph->ctx(), graph->leaf({cols, rows}, x.as<float>()), eps);
  graph->build(ggml_mul(graph->ctx(), normed, graph->leaf({cols}, w.as<float>())));
  graph->compute();
  checkResult("rms_norm", graph->result(),
              oracle::rmsNorm(x.as<float>(), w.as<float>(), eps, rows, cols));
  return fixedCall(graph);
}

PeerCall ggmlSwiglu(const Tensor &gate, const Tensor &up) {
  // The component's gate * silu(up) is ggml's swiglu with up as the first operand.
  const int64_t n = gate.numel();
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(gate.byteSize()));
  graph->build(ggml_swiglu_split(graph->ctx(), graph->leaf({n}, up.as<float>()),
                                 graph->leaf({n}, gate.as<float>())));
  graph->compute();
  checkResult("swiglu", graph->result(), oracle::swiglu(gate.as<float>(), up.as<float>(), n));
  return fixedCall(graph);
}

PeerCall ggmlGetRows(const Tensor &weight, const Tensor &indices) {
  const int64_t vocab = weight.shape()[0], embd = weight.shape()[1], count = indices.numel();
  auto ids = std::make_shared<std::vector<int32_t>>(toInt32(indices)); // ggml takes i32 rows
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(count * embd * 4));
  graph->build(ggml_get_rows(graph->ctx(), graph->leaf({embd, vocab}, weight.as<float>()),
                             graph->leaf(GGML_TYPE_I32, {count}, ids->data())));
  graph->compute();
  std::vector<float> rows =
      oracle::embeddingLookup(weight.as<float>(), vocab, embd, indices.as<int64_t>(), count);
  checkResult("get_rows", graph->result(), std::vector<double>(rows.begin(), rows.end()), 0, 0);
  return fixedCall(graph, ids);
}

PeerCall ggmlRope(const Tensor &x, const Tensor &positions, float base, float scale) {
  const int64_t batch = x.shape()[0], seq = x.shape()[1], heads = x.shape()[2], dim = x.shape()[3];
  auto pos = std::make_shared<std::vector<int32_t>>(toInt32(positions));
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(x.byteSize()));
  // x [B, S, H, D] is ggml's [D, H, S, B]; rope takes one position per S.
  ggml_tensor *in = graph->leaf({dim, heads, seq * batch}, x.as<float>());
  graph->build(ggml_rope_ext(graph->ctx(), in,
                             graph->leaf(GGML_TYPE_I32, {seq * batch}, pos->data()), nullptr,
                             static_cast<int>(dim), GGML_ROPE_TYPE_NORMAL, 0, base, scale,
                             /*ext_factor=*/0, /*attn_factor=*/1, /*beta_fast=*/0,
                             /*beta_slow=*/0));
  graph->compute();
  checkResult(
      "rope", graph->result(),
      oracle::rope(x.as<float>(), positions.as<int64_t>(), batch, seq, heads, dim, base, scale));
  return fixedCall(graph, pos);
}

PeerCall ggmlAttention(const Tensor &q, const Tensor &k, const Tensor &v, float scale,
                       bool causal) {
  const int64_t seq = q.shape()[1], heads = q.shape()[2], dim = q.shape()[3];
  const int64_t kvSeq = k.shape()[1], kvHeads = k.shape()[2];
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(q.byteSize()));
  ggml_context *ctx = graph->ctx();
  // [B=1, S, H, D] is ggml's [D, H, S]; flash attention takes [D, S, H] views, as llama.cpp
  // passes them.
  auto heads_major = [&](const Tensor &t, int64_t positions, int64_t n) {
    return ggml_permute(ctx, graph->leaf({dim, n, positions}, t.as<float>()), 0, 2, 1, 3);
  };
  auto mask = std::make_shared<std::vector<ggml_fp16_t>>();
  ggml_tensor *maskLeaf = nullptr;
  if (causal) { // query i sees keys j <= i + (Skv - S); ggml's masks are f16
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < kvSeq; ++j)
        mask->push_back(ggml_fp32_to_fp16(j <= i + kvSeq - seq ? 0.0f : -INFINITY));
    maskLeaf = graph->leaf(GGML_TYPE_F16, {kvSeq, seq}, mask->data());
  }
  graph->build(ggml_flash_attn_ext(ctx, heads_major(q, seq, heads), heads_major(k, kvSeq, kvHeads),
                                   heads_major(v, kvSeq, kvHeads), maskLeaf, scale, 0, 0));
  graph->compute(); // [D, H, S]: the component's layout
  checkResult("flash_attn_ext", graph->result(),
              oracle::attentionGqa(q.as<float>(), k.as<float>(), v.as<float>(), scale,
                                   {1, seq, kvSeq, heads, kvHeads, dim}, causal));
  return fixedCall(graph, mask);
}

PeerCall ggmlMatmul(const Tensor &x, const std::vector<Tensor> &weights) {
  const int64_t m = x.shape()[0], k = x.shape()[1], n = weights[0].shape()[1];
  // ggml's matrices are [N, K] row-major (each output's weights contiguous along k).
  Copies copies(1);
  for (const Tensor &w : weights)
    copies[0].push_back(transposed(w.as<float>(), k, n));
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(m * n * 4));
  ggml_tensor *w = graph->leaf({k, n}, copies[0][0].as<float>());
  graph->build(ggml_mul_mat(graph->ctx(), w, graph->leaf({k, m}, x.as<float>())));
  graph->compute();
  // The first two rows: the product is the same function on every row.
  const int64_t rows = std::min<int64_t>(m, 2);
  checkResult("mul_mat", graph->result(),
              oracle::matmul(x.as<float>(), weights[0].as<float>(), rows, k, n, false));
  return rotatingCall(graph, {w}, copies);
}

PeerCall ggmlMulMatId(const std::vector<Tensor> &weights, const Tensor &input, const Tensor &ids,
                      size_t copies) {
  const int64_t nOut = weights[0].shape()[0], nIn = weights[0].shape()[1],
                experts = weights[0].shape()[2];
  const int64_t used = ids.shape()[0], tokens = ids.shape()[1];
  Copies packed(1);
  for (size_t c = 0; c < copies; ++c)
    packed[0].push_back(expertsOutermost(weights[c % weights.size()]));
  // The component's input [n_in, k, T] and ids [k, T] in ggml's order: [T, k, n_in] and [T, k]
  // row-major.
  auto x = std::make_shared<std::vector<float>>(static_cast<size_t>(nIn * used * tokens));
  auto id32 = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(used * tokens));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < used; ++j) {
      (*id32)[static_cast<size_t>(t * used + j)] = ids.as<int32_t>()[j * tokens + t];
      for (int64_t i = 0; i < nIn; ++i)
        (*x)[static_cast<size_t>((t * used + j) * nIn + i)] =
            input.as<float>()[(i * used + j) * tokens + t];
    }
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(nOut * used * tokens * 4));
  ggml_tensor *w = graph->leaf({nIn, nOut, experts}, packed[0][0].as<float>());
  graph->build(ggml_mul_mat_id(graph->ctx(), w, graph->leaf({nIn, used, tokens}, x->data()),
                               graph->leaf(GGML_TYPE_I32, {used, tokens}, id32->data())));
  graph->compute();
  // ggml's result [T, k, n_out] row-major back to the component's [n_out, k, T].
  std::vector<float> result(static_cast<size_t>(nOut * used * tokens));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < used; ++j)
      for (int64_t o = 0; o < nOut; ++o)
        result[static_cast<size_t>((o * used + j) * tokens + t)] =
            graph->result()[(t * used + j) * nOut + o];
  checkResult("mul_mat_id", result.data(),
              oracle::mulMatId(weights[0].as<float>(), input.as<float>(), ids.as<int32_t>(), nOut,
                               nIn, experts, used, tokens));
  PeerCall call = rotatingCall(graph, {w}, packed);
  return [call, x, id32](size_t copy) { call(copy); };
}

PeerCall ggmlMoeBlock(const Tensor &input, const Tensor &router, const MoeWeights &weights,
                      int64_t used, bool normalize, size_t copies) {
  const int64_t tokens = input.shape()[0], embd = input.shape()[1], experts = router.shape()[0];
  const int64_t ff = weights.up[0].shape()[0];
  Copies packed(3);
  for (size_t c = 0; c < copies; ++c) {
    const size_t from = c % weights.up.size();
    packed[0].push_back(expertsOutermost(weights.up[from]));
    packed[1].push_back(expertsOutermost(weights.gate[from]));
    packed[2].push_back(expertsOutermost(weights.down[from]));
  }
  auto graph = std::make_shared<GgmlGraph>(static_cast<size_t>(
      4 * (4 * experts * tokens + 3 * ff * used * tokens + 3 * embd * used * tokens)));
  ggml_context *ctx = graph->ctx();
  // llama.cpp's build_moe_ffn: softmax router, top-k, the chosen experts' weights (renormalized
  // when asked), SwiGLU experts, each expert's output weighted, the k outputs added.
  ggml_tensor *x = graph->leaf({embd, tokens}, input.as<float>());
  ggml_tensor *logits = ggml_mul_mat(ctx, graph->leaf({embd, experts}, router.as<float>()), x);
  ggml_tensor *probs = ggml_soft_max(ctx, logits);                        // [X, T]
  ggml_tensor *selected = ggml_top_k(ctx, probs, static_cast<int>(used)); // [k, T]
  ggml_tensor *mix = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, experts, tokens),
                                   selected); // [1, k, T]
  if (normalize) {
    ggml_tensor *flat = ggml_reshape_2d(ctx, mix, used, tokens);
    mix = ggml_reshape_3d(ctx, ggml_div(ctx, flat, ggml_sum_rows(ctx, flat)), 1, used, tokens);
  }
  ggml_tensor *up = graph->leaf({embd, ff, experts}, packed[0][0].as<float>());
  ggml_tensor *gate = graph->leaf({embd, ff, experts}, packed[1][0].as<float>());
  ggml_tensor *down = graph->leaf({ff, embd, experts}, packed[2][0].as<float>());
  ggml_tensor *x3 = ggml_reshape_3d(ctx, x, embd, 1, tokens);
  ggml_tensor *act = ggml_swiglu_split(ctx, ggml_mul_mat_id(ctx, up, x3, selected),
                                       ggml_mul_mat_id(ctx, gate, x3, selected));    // [F, k, T]
  ggml_tensor *outs = ggml_mul(ctx, ggml_mul_mat_id(ctx, down, act, selected), mix); // [E, k, T]
  ggml_tensor *sum = ggml_view_2d(ctx, outs, embd, tokens, outs->nb[2], 0);
  for (int64_t j = 1; j < used; ++j)
    sum = ggml_add(
        ctx, sum,
        ggml_view_2d(ctx, outs, embd, tokens, outs->nb[2], static_cast<size_t>(j) * outs->nb[1]));
  graph->build(sum); // [E, T]: the component's [T, E]
  graph->compute();
  checkResult("MoE block", graph->result(),
              oracle::moeFfnBlock(input.as<float>(), router.as<float>(), weights.up[0].as<float>(),
                                  weights.gate[0].as<float>(), weights.down[0].as<float>(),
                                  {tokens, embd, ff, experts, used}, normalize)
                  .out);
  return rotatingCall(graph, {up, gate, down}, packed);
}

#else

PeerCall ggmlRmsNorm(const Tensor &, const Tensor &, float) { return {}; }
PeerCall ggmlSwiglu(const Tensor &, const Tensor &) { return {}; }
PeerCall ggmlGetRows(const Tensor &, const Tensor &) { return {}; }
PeerCall ggmlRope(const Tensor &, const Tensor &, float, float) { return {}; }
PeerCall ggmlAttention(const Tensor &, const Tensor &, const Tensor &, float, bool) { return {}; }
PeerCall ggmlMatmul(const Tensor &, const std::vector<Tensor> &) { return {}; }
PeerCall ggmlMulMatId(const std::vector<Tensor> &, const Tensor &, const Tensor &, size_t) {
  return {};
}
PeerCall ggmlMoeBlock(const Tensor &, const Tensor &, const MoeWeights &, int64_t, bool, size_t) {
  return {};
}

#endif

} // namespace frank::bench
