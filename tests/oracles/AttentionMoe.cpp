// Reference implementations of attention, the attention block and the MoE FFN block.
#include "oracles/AttentionMoe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace frank::oracle {

namespace {

template <class T>
std::vector<double> attentionImpl(const T *q, const T *k, const T *v, double scale,
                                  const AttentionDims &d, bool causal, double softCap = 0) {
  const int64_t group = d.heads / d.kvHeads;
  std::vector<double> out(static_cast<size_t>(d.batch * d.seq * d.heads * d.headDim), 0.0);
  std::vector<double> p(static_cast<size_t>(d.kvSeq));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t s = 0; s < d.seq; ++s)
      for (int64_t h = 0; h < d.heads; ++h) {
        const int64_t g = h / group;
        const T *qrow = q + ((b * d.seq + s) * d.heads + h) * d.headDim;
        // Keys visible to this query: all, or j <= s + (Skv - S) when causal.
        int64_t visible = d.kvSeq;
        if (causal)
          visible = std::clamp<int64_t>(s + (d.kvSeq - d.seq) + 1, 0, d.kvSeq);
        double maxLogit = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const T *krow = k + ((b * d.kvSeq + j) * d.kvHeads + g) * d.headDim;
          double dot = 0;
          for (int64_t i = 0; i < d.headDim; ++i)
            dot += static_cast<double>(qrow[i]) * static_cast<double>(krow[i]);
          p[j] = scale * dot;
          if (softCap > 0) // in log2 units, then back: exp of the result is exp2 of the cap's
            p[j] = softCap * std::tanh(p[j] / std::log(2.0) / softCap) * std::log(2.0);
          maxLogit = std::max(maxLogit, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) {
          p[j] = std::exp(p[j] - maxLogit);
          sum += p[j];
        }
        double *orow = out.data() + ((b * d.seq + s) * d.heads + h) * d.headDim;
        if (visible == 0) { // fully masked row: undefined in the interface, NaN here
          std::fill(orow, orow + d.headDim, std::numeric_limits<double>::quiet_NaN());
          continue;
        }
        for (int64_t j = 0; j < visible; ++j) {
          const T *vrow = v + ((b * d.kvSeq + j) * d.kvHeads + g) * d.headDim;
          const double weight = p[j] / sum;
          for (int64_t i = 0; i < d.headDim; ++i)
            orow[i] += weight * static_cast<double>(vrow[i]);
        }
      }
  return out;
}

/// y [T, N] = x [T, K] @ w [K, N] (+ b [N]).
std::vector<double> project(const std::vector<double> &x, const float *w, const float *b,
                            int64_t tokens, int64_t kIn, int64_t nOut) {
  std::vector<double> y(static_cast<size_t>(tokens * nOut), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    double *row = y.data() + t * nOut;
    for (int64_t i = 0; i < kIn; ++i) {
      const double xi = x[t * kIn + i];
      const float *wrow = w + i * nOut;
      for (int64_t n = 0; n < nOut; ++n)
        row[n] += xi * static_cast<double>(wrow[n]);
    }
    if (b)
      for (int64_t n = 0; n < nOut; ++n)
        row[n] += b[n];
  }
  return y;
}

} // namespace

std::vector<double> attentionGqa(const float *q, const float *k, const float *v, double scale,
                                 const AttentionDims &dims, bool causal) {
  return attentionImpl(q, k, v, scale, dims, causal);
}

std::vector<double> attentionGqa(const double *q, const double *k, const double *v, double scale,
                                 const AttentionDims &dims, bool causal) {
  return attentionImpl(q, k, v, scale, dims, causal);
}

std::vector<double> attentionGqaSoftCapped(const float *q, const float *k, const float *v,
                                           double scale, const AttentionDims &dims, bool causal,
                                           double cap) {
  return attentionImpl(q, k, v, scale, dims, causal, cap);
}

void ropeInPlace(std::vector<double> &x, const int64_t *positions, int64_t batch, int64_t seq,
                 int64_t heads, int64_t headDim, float freqBase, float freqScale) {
  for (int64_t i = 0; i < headDim / 2; ++i) {
    // theta_i in f32, as the interface computes it: the exponent and the product are f32.
    const float exponent = -(2.0f * static_cast<float>(i) / static_cast<float>(headDim));
    const float theta =
        static_cast<float>(std::pow(static_cast<double>(freqBase), static_cast<double>(exponent))) *
        freqScale;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) {
        const float pos = static_cast<float>(static_cast<int32_t>(positions[b * seq + s]));
        const double angle = static_cast<double>(pos * theta);
        const double c = std::cos(angle), sn = std::sin(angle);
        for (int64_t h = 0; h < heads; ++h) {
          double *pair = x.data() + ((b * seq + s) * heads + h) * headDim + 2 * i;
          const double x0 = pair[0], x1 = pair[1];
          pair[0] = x0 * c - x1 * sn;
          pair[1] = x0 * sn + x1 * c;
        }
      }
  }
}

std::vector<double> attentionBlock(const float *input, const int64_t *positions, const float *wq,
                                   const float *wk, const float *wv, const float *wo,
                                   const float *bq, const float *bk, const float *bv,
                                   const float *bo, bool useBias, const AttentionBlockDims &d,
                                   float freqBase, float freqScale) {
  const int64_t tokens = d.batch * d.seq;
  const int64_t headDim = d.embd / d.heads, kvHeadDim = d.embdKv / d.kvHeads;
  std::vector<double> x(input, input + tokens * d.embd);
  std::vector<double> q = project(x, wq, useBias ? bq : nullptr, tokens, d.embd, d.embd);
  std::vector<double> k = project(x, wk, useBias ? bk : nullptr, tokens, d.embd, d.embdKv);
  std::vector<double> v = project(x, wv, useBias ? bv : nullptr, tokens, d.embd, d.embdKv);
  ropeInPlace(q, positions, d.batch, d.seq, d.heads, headDim, freqBase, freqScale);
  ropeInPlace(k, positions, d.batch, d.seq, d.kvHeads, kvHeadDim, freqBase, freqScale);
  // attention_gqa takes one head dim for q, k and v; the block is only defined for D == Dkv.
  AttentionDims ad{d.batch, d.seq, d.seq, d.heads, d.kvHeads, headDim};
  std::vector<double> a =
      attentionGqa(q.data(), k.data(), v.data(), 1.0 / std::sqrt(static_cast<double>(headDim)), ad,
                   /*causal=*/false);
  return project(a, wo, useBias ? bo : nullptr, tokens, d.embd, d.embd);
}

MoeResult moeFfnBlock(const float *input, const float *router, const float *upExps,
                      const float *gateExps, const float *downExps, const MoeDims &d,
                      bool normalize) {
  const int64_t T = d.tokens, E = d.embd, F = d.ff, X = d.experts, K = d.used;
  MoeResult result;
  result.out.assign(static_cast<size_t>(T * E), 0.0);
  result.ids.assign(static_cast<size_t>(K * T), 0);
  result.minSelectionGap = std::numeric_limits<double>::infinity();
  std::vector<double> probs(static_cast<size_t>(X)), act(static_cast<size_t>(F));
  std::vector<int64_t> order(static_cast<size_t>(X));
  for (int64_t t = 0; t < T; ++t) {
    const float *in = input + t * E;
    // Router logits and softmax over the experts.
    double maxLogit = -std::numeric_limits<double>::infinity();
    for (int64_t x = 0; x < X; ++x) {
      double logit = 0;
      for (int64_t e = 0; e < E; ++e)
        logit += static_cast<double>(router[x * E + e]) * in[e];
      probs[x] = logit;
      maxLogit = std::max(maxLogit, logit);
    }
    double sum = 0;
    for (int64_t x = 0; x < X; ++x)
      sum += (probs[x] = std::exp(probs[x] - maxLogit));
    for (int64_t x = 0; x < X; ++x)
      probs[x] /= sum;
    // Top-k: largest first, ties to the lower index (a stable sort on descending probability).
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
    if (K < X)
      result.minSelectionGap =
          std::min(result.minSelectionGap, probs[order[K - 1]] - probs[order[K]]);
    double weightSum = 0;
    for (int64_t j = 0; j < K; ++j)
      weightSum += probs[order[j]];
    for (int64_t j = 0; j < K; ++j) {
      const int64_t id = order[j];
      result.ids[j * T + t] = static_cast<int32_t>(id);
      const double weight = normalize ? probs[id] / weightSum : probs[id];
      // Expert id: up and gate projections [F], SwiGLU with SiLU on up, down projection [E].
      for (int64_t f = 0; f < F; ++f) {
        double u = 0, g = 0;
        for (int64_t e = 0; e < E; ++e) {
          u += static_cast<double>(upExps[(f * E + e) * X + id]) * in[e];
          g += static_cast<double>(gateExps[(f * E + e) * X + id]) * in[e];
        }
        act[f] = g * (u / (1.0 + std::exp(-u)));
      }
      for (int64_t e = 0; e < E; ++e) {
        double dn = 0;
        for (int64_t f = 0; f < F; ++f)
          dn += static_cast<double>(downExps[(e * F + f) * X + id]) * act[f];
        result.out[t * E + e] += weight * dn;
      }
    }
  }
  return result;
}

} // namespace frank::oracle
