// Reference implementations of the attention and mixture-of-experts components
// (MLIR-SUBSET.md §8.5, §8.6, §8.8): plain loops accumulating in double, independent of the
// compiler and of the component text.
#pragma once

#include <cstdint>
#include <vector>

namespace frank::oracle {

/// Grouped-query attention shapes: query [B, S, H, D], key and value [B, Skv, Hkv, D].
struct AttentionDims {
  int64_t batch, seq, kvSeq, heads, kvHeads, headDim;
};

/// out[b,s,h,:] = sum_j softmax_j(scale * <Q[b,s,h,:], K[b,j,h/G,:]>) * V[b,j,h/G,:], with
/// G = H / Hkv (KV heads repeated contiguously). With `causal`, query s sees only keys
/// j <= s + (Skv - S). Returns [B, S, H, D].
std::vector<double> attentionGqa(const float *q, const float *k, const float *v, double scale,
                                 const AttentionDims &dims, bool causal);

/// The same on double inputs (the attention block feeds it its own projections).
std::vector<double> attentionGqa(const double *q, const double *k, const double *v, double scale,
                                 const AttentionDims &dims, bool causal);

/// attentionGqa with a tanh soft-cap as attention's score region, which sees logits in log2
/// units (MLIR-SUBSET.md §4.6): each logit t = scale·<q, k>·log2 e becomes cap·tanh(t / cap),
/// and the softmax is of 2 to the power of that.
std::vector<double> attentionGqaSoftCapped(const float *q, const float *k, const float *v,
                                           double scale, const AttentionDims &dims, bool causal,
                                           double cap);

/// Rotary embedding of §8.4 applied in place to x [B, S, H, D] (D even), adjacent pairs rotated.
/// The angle is computed in f32 exactly as the interface fixes it (theta_i = powf(base,
/// -(2i/D)) * freq_scale, a = float(int32(pos)) * theta_i, both rounded to f32); sin, cos and the
/// rotation are in double.
void ropeInPlace(std::vector<double> &x, const int64_t *positions, int64_t batch, int64_t seq,
                 int64_t heads, int64_t headDim, float freqBase, float freqScale);

/// Attention block shapes: input [B, S, E], wq/wo [E, E], wk/wv [E, Ekv].
struct AttentionBlockDims {
  int64_t batch, seq, embd, embdKv, heads, kvHeads;
};

/// The attention block of §8.6: projections x @ W (+ bias if `useBias`), heads split with
/// D = E / H and Dkv = Ekv / Hkv, rope on q and k, attention_gqa with scale 1/sqrt(D), heads
/// merged, @ wo (+ bo). Returns [B, S, E]. The biases are not read when `useBias` is false.
std::vector<double> attentionBlock(const float *input, const int64_t *positions, const float *wq,
                                   const float *wk, const float *wv, const float *wo,
                                   const float *bq, const float *bk, const float *bv,
                                   const float *bo, bool useBias, const AttentionBlockDims &dims,
                                   float freqBase, float freqScale);

/// Mixture-of-experts shapes: input [T, E], router [X, E], up/gate [F, E, X], down [E, F, X].
struct MoeDims {
  int64_t tokens, embd, ff, experts, used;
};

struct MoeResult {
  std::vector<double> out;  // [T, E]
  std::vector<int32_t> ids; // [k, T], best first, ties to the lower expert index
  /// The smallest gap, over tokens, between the k-th and (k+1)-th router probability (0 for an
  /// exact tie, +inf when k == X). Below the f32 error of the router (~1e-6) the selected set
  /// is ill-conditioned, except for exact ties, which both sides break by index.
  double minSelectionGap = 0;
};

/// The MoE FFN block of §8.8: softmax router over experts, top-k weights (the probabilities over
/// all X experts), renormalized only if `normalize`, SwiGLU experts gate * silu(up), weighted sum.
MoeResult moeFfnBlock(const float *input, const float *router, const float *upExps,
                      const float *gateExps, const float *downExps, const MoeDims &dims,
                      bool normalize);

} // namespace frank::oracle
