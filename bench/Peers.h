// The libraries people use instead of frank-jit, on the benchmark shapes they cover: OpenBLAS
// (sgemm, sgemv, and per-expert sgemm for mul_mat_id), oneDNN (matmul with weights reordered
// once into its preferred layout) and libxsmm (batch-reduce GEMM kernels over weights packed once
// into blocks) and ggml, llama.cpp's CPU library (every shape, as llama.cpp builds its graph; see
// PeersGgml.cpp). Each is compiled in only when it is installed (`make bench-peers`); otherwise
// `available` says why not and the benchmark is skipped.
#pragma once

#include "frank/Frank.h"

#include <functional>
#include <string>
#include <vector>

namespace frank::bench {

/// A prepared call of a peer: runs on the `copy`-th rotated copy of the weights.
using PeerCall = std::function<void(size_t copy)>;

struct PeerStatus {
  bool available = false;
  std::string reason; // why not, when unavailable
};

PeerStatus openblasStatus();
/// The kernels OpenBLAS chose for this CPU (its core name), or "" without OpenBLAS. A CPU newer
/// than the library falls back to "Prescott", SSE3 code (make bench sets OPENBLAS_CORETYPE).
std::string openblasCore();
PeerStatus onednnStatus();
PeerStatus libxsmmStatus();
PeerStatus ggmlStatus();

/// y[M, N] = x[M, K] * w[K, N], row-major; `weights` holds one [K, N] tensor per copy.
PeerCall openblasMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);
PeerCall onednnMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);
/// libxsmm as its deep-learning users call it: the weights packed once into 64x64 blocks, each
/// output block one JIT-generated batch-reduce GEMM over the blocks of its column, the blocks
/// split between numThreads() threads. Throws if the result differs from a double-precision
/// product (checked once, on a sample of outputs).
PeerCall libxsmmMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);

/// Experts-innermost weights [rows, cols, X] as X expert matrices [X, rows, cols], the layout
/// ggml and PyTorch keep.
Tensor expertsOutermost(const Tensor &w);

/// mul_mat_id as a BLAS user writes it: the weights [n_out, n_in, X] repacked once per expert
/// into row-major [n_out, n_in] matrices (the layout ggml and PyTorch keep), then for each
/// expert its tokens gathered, one sgemm, and the results scattered back to [n_out, k, T].
/// Packs `copies` copies, cycling through `weights`.
PeerCall openblasMulMatId(const std::vector<Tensor> &weights, const Tensor &input,
                          const Tensor &ids, Tensor &out, size_t copies);

/// ggml (llama.cpp's CPU library), each shape in the component's layout, the weights converted
/// once into ggml's. Each throws if its result on the first copy differs from the oracle.
PeerCall ggmlRmsNorm(const Tensor &x, const Tensor &w, float eps);
/// The component's gate * silu(up).
PeerCall ggmlSwiglu(const Tensor &gate, const Tensor &up);
PeerCall ggmlGetRows(const Tensor &weight, const Tensor &indices);
PeerCall ggmlRope(const Tensor &x, const Tensor &positions, float base, float scale);
/// Flash attention over q [1, S, H, D], k and v [1, Skv, Hkv, D].
PeerCall ggmlAttention(const Tensor &q, const Tensor &k, const Tensor &v, float scale, bool causal);
/// x [M, K] times each copy of w [K, N].
PeerCall ggmlMatmul(const Tensor &x, const std::vector<Tensor> &weights);
/// mul_mat_id over `copies` copies of weights [n_out, n_in, X] (cycling through `weights`),
/// input [n_in, k, T], ids [k, T].
PeerCall ggmlMulMatId(const std::vector<Tensor> &weights, const Tensor &input, const Tensor &ids,
                      size_t copies);
/// The copies of the MoE block's expert weights: up and gate [F, E, X], down [E, F, X].
struct MoeWeights {
  std::vector<Tensor> up, gate, down;
};
/// The block over `copies` copies of its expert weights, cycling through `weights`.
PeerCall ggmlMoeBlock(const Tensor &input, const Tensor &router, const MoeWeights &weights,
                      int64_t used, bool normalize, size_t copies);

} // namespace frank::bench
