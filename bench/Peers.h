// The libraries people use instead of frank-jit, on the benchmark shapes they cover: OpenBLAS
// (sgemm, sgemv, and per-expert sgemm for mul_mat_id), oneDNN (matmul with weights reordered
// once into its preferred layout) and libxsmm (batch-reduce GEMM kernels over weights packed once
// into blocks). Each is compiled in only when its package is installed
// (`make bench-peers`); otherwise `available` says why not and the benchmark is skipped.
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
PeerStatus onednnStatus();
PeerStatus libxsmmStatus();

/// y[M, N] = x[M, K] * w[K, N], row-major; `weights` holds one [K, N] tensor per copy.
PeerCall openblasMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);
PeerCall onednnMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);
/// libxsmm as its deep-learning users call it: the weights packed once into 64x64 blocks, each
/// output block one JIT-generated batch-reduce GEMM over the blocks of its column, the blocks
/// split between numThreads() threads. Throws if the result differs from a double-precision
/// product (checked once, on a sample of outputs).
PeerCall libxsmmMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y);

/// mul_mat_id as a BLAS user writes it: the weights [n_out, n_in, X] repacked once per expert
/// into row-major [n_out, n_in] matrices (the layout ggml and PyTorch keep), then for each
/// expert its tokens gathered, one sgemm, and the results scattered back to [n_out, k, T].
PeerCall openblasMulMatId(const std::vector<Tensor> &weights, const Tensor &input,
                          const Tensor &ids, Tensor &out);

} // namespace frank::bench
