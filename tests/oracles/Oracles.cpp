// Reference implementations.
#include "oracles/Oracles.h"

#include <cmath>
#include <cstdio>
#include <random>

namespace frank::oracle {

std::vector<double> rmsNorm(const float *x, const float *w, float eps, int64_t rows, int64_t cols) {
  std::vector<double> y(static_cast<size_t>(rows * cols));
  for (int64_t b = 0; b < rows; ++b) {
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j)
      sum += static_cast<double>(x[b * cols + j]) * x[b * cols + j];
    double rms = std::sqrt(sum / static_cast<double>(cols) + static_cast<double>(eps));
    for (int64_t i = 0; i < cols; ++i)
      y[b * cols + i] = static_cast<double>(x[b * cols + i]) / rms * w[i];
  }
  return y;
}

std::vector<double> swiglu(const float *gate, const float *up, int64_t n) {
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double u = up[i];
    y[i] = static_cast<double>(gate[i]) * (u / (1.0 + std::exp(-u)));
  }
  return y;
}

std::vector<double> matmul(const float *x, const float *w, int64_t m, int64_t k, int64_t n,
                           bool transposeB) {
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double(x[i * k + p]) * (transposeB ? w[j * k + p] : w[p * n + j]);
      y[i * n + j] = sum;
    }
  return y;
}

std::string Comparison::describe() const {
  char text[256];
  std::snprintf(text, sizeof text,
                "first mismatch at element %lld: got %.9g, expected %.9g (max abs error %.3g, "
                "NMSE %.3g)",
                static_cast<long long>(firstBad), actual, expected, maxAbsError, nmse);
  return text;
}

Comparison compare(const float *actual, const std::vector<double> &expected, double rtol,
                   double atol) {
  Comparison c;
  double errorSq = 0, refSq = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    double a = actual[i], e = expected[i];
    double error = std::fabs(a - e);
    bool bad = std::isnan(a) || std::isnan(error) || error > atol + rtol * std::fabs(e);
    if (std::isinf(e) && a == e)
      bad = false, error = 0;
    if (!std::isnan(error))
      c.maxAbsError = std::max(c.maxAbsError, error);
    errorSq += error * error;
    refSq += e * e;
    if (bad && c.ok) {
      c.ok = false;
      c.firstBad = static_cast<int64_t>(i);
      c.actual = a;
      c.expected = e;
    }
  }
  c.nmse = refSq > 0 ? errorSq / refSq : errorSq;
  return c;
}

std::vector<float> randomFloats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = dist(rng);
  return v;
}

} // namespace frank::oracle
