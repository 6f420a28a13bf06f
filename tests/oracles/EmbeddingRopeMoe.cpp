// Reference implementations of embedding_lookup, rope and mul_mat_id.
#include "oracles/EmbeddingRopeMoe.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace frank::oracle {

std::vector<float> embeddingLookup(const float *weight, int64_t vocab, int64_t embd,
                                   const int64_t *indices, int64_t count) {
  std::vector<float> y(static_cast<size_t>(count * embd));
  for (int64_t n = 0; n < count; ++n) {
    const int64_t row = indices[n];
    if (row < 0 || row >= vocab)
      throw std::out_of_range("embedding index " + std::to_string(row) + " outside [0, " +
                              std::to_string(vocab) + ")");
    // memcpy, not a float assignment, so that NaN payloads and signed zeros are kept as bits.
    std::memcpy(y.data() + n * embd, weight + row * embd, static_cast<size_t>(embd) * 4);
  }
  return y;
}

namespace {

/// The exact power base^-(2i/D) in double (the f32 exponent formed as the interface forms it).
double ropePower(int64_t i, int64_t headDim, float freqBase) {
  // Every step rounded to f32 in the interface's order: float(i) and float(D) (both exact for
  // the sizes used), 2 * float(i) (exact), the quotient, its negation.
  const float fi = static_cast<float>(static_cast<int32_t>(i));
  const float fd = static_cast<float>(static_cast<int32_t>(headDim));
  const float exponent = -((2.0f * fi) / fd);
  return std::pow(static_cast<double>(freqBase), static_cast<double>(exponent));
}

} // namespace

float ropeTheta(int64_t i, int64_t headDim, float freqBase, float freqScale) {
  return static_cast<float>(ropePower(i, headDim, freqBase)) * freqScale;
}

std::pair<float, float> ropeThetaFaithful(int64_t i, int64_t headDim, float freqBase,
                                          float freqScale) {
  const double exact = ropePower(i, headDim, freqBase);
  const float nearest = static_cast<float>(exact);
  float down = nearest, up = nearest;
  if (static_cast<double>(nearest) < exact)
    up = std::nextafter(nearest, std::numeric_limits<float>::infinity());
  else if (static_cast<double>(nearest) > exact)
    down = std::nextafter(nearest, -std::numeric_limits<float>::infinity());
  return {down * freqScale, up * freqScale};
}

std::vector<double> rope(const float *x, const int64_t *positions, int64_t batch, int64_t seq,
                         int64_t heads, int64_t headDim, float freqBase, float freqScale,
                         const float *theta) {
  const int64_t half = headDim / 2;
  std::vector<float> thetas(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    thetas[i] = theta ? theta[i] : ropeTheta(i, headDim, freqBase, freqScale);
  std::vector<double> y(static_cast<size_t>(batch * seq * heads * headDim));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      // The i64 position truncated to i32 (two's complement), then converted to f32.
      const int32_t pos32 = static_cast<int32_t>(
          static_cast<uint32_t>(static_cast<uint64_t>(positions[b * seq + s]) & 0xffffffffu));
      const float pos = static_cast<float>(pos32);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * thetas[i]; // one f32 multiply, as the interface has it
        const double c = std::cos(static_cast<double>(angle));
        const double sn = std::sin(static_cast<double>(angle));
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t at = ((b * seq + s) * heads + h) * headDim + 2 * i;
          const double x0 = x[at], x1 = x[at + 1];
          y[at] = x0 * c - x1 * sn;
          y[at + 1] = x0 * sn + x1 * c;
        }
      }
    }
  return y;
}

std::vector<double> mulMatId(const float *weights, const float *input, const int32_t *ids,
                             int64_t nOut, int64_t nIn, int64_t experts, int64_t used,
                             int64_t tokens) {
  const int64_t columns = used * tokens; // (e, t) pairs, row-major like ids and the output
  for (int64_t c = 0; c < columns; ++c)
    if (ids[c] < 0 || ids[c] >= experts)
      throw std::out_of_range("expert id " + std::to_string(ids[c]) + " outside [0, " +
                              std::to_string(experts) + ")");
  // Loop order o, i, (e, t): each weight row W[o, i, :] and input row in[i, :, :] is read once
  // and in order, and out[o, :, :] accumulates in place. Each output is still the plain sum
  // over i in increasing order, in double.
  std::vector<double> out(static_cast<size_t>(nOut * columns), 0.0);
  for (int64_t o = 0; o < nOut; ++o) {
    double *row = out.data() + o * columns;
    for (int64_t i = 0; i < nIn; ++i) {
      const float *w = weights + (o * nIn + i) * experts; // W[o, i, :]
      const float *x = input + i * columns;               // in[i, :, :]
      for (int64_t c = 0; c < columns; ++c)
        row[c] += static_cast<double>(w[ids[c]]) * static_cast<double>(x[c]);
    }
  }
  return out;
}

} // namespace frank::oracle
