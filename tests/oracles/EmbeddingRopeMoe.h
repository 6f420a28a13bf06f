// Reference implementations of the embedding, rotary-embedding and expert-selected matmul
// components (MLIR-SUBSET.md §8.3, §8.4, §8.7): plain loops, independent of the compiler and of
// the component text. Sums accumulate in double.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace frank::oracle {

/// y[n, :] = weight[indices[n], :] for n < count: [count, embd], copied bit for bit. The batch
/// dims of the index tensor are flattened into `count` (row-major), as the output's are.
std::vector<float> embeddingLookup(const float *weight, int64_t vocab, int64_t embd,
                                   const int64_t *indices, int64_t count);

/// theta_i of §8.4 in f32: powf(base, -(2 * float(i) / float(D))) * scale, with the power
/// correctly rounded to f32 (computed in double, then rounded once).
float ropeTheta(int64_t i, int64_t headDim, float freqBase, float freqScale);

/// The theta_i a faithfully rounded powf can give: the power rounded down and rounded up to f32
/// (the same value when it is exact), each times scale in f32. Returns {down, up}.
std::pair<float, float> ropeThetaFaithful(int64_t i, int64_t headDim, float freqBase,
                                          float freqScale);

/// Rotary embedding of §8.4 on x [B, S, H, D] (D even), adjacent pairs (2i, 2i+1). The angle is
/// formed in f32 exactly as the interface fixes it, a = float(int32(pos)) * theta_i, then the
/// sine, cosine and rotation are evaluated in double. `theta` gives theta_i for i < D/2, or is
/// null for ropeTheta's correctly rounded values. Returns [B, S, H, D].
std::vector<double> rope(const float *x, const int64_t *positions, int64_t batch, int64_t seq,
                         int64_t heads, int64_t headDim, float freqBase, float freqScale,
                         const float *theta = nullptr);

/// out[o, e, t] = sum_i weights[o, i, ids[e, t]] * input[i, e, t], in double.
/// weights [nOut, nIn, X], input [nIn, k, T], ids [k, T] (each in [0, X)); returns [nOut, k, T].
std::vector<double> mulMatId(const float *weights, const float *input, const int32_t *ids,
                             int64_t nOut, int64_t nIn, int64_t experts, int64_t used,
                             int64_t tokens);

} // namespace frank::oracle
