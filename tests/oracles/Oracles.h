// Reference implementations: plain loops in double, independent of the compiler. Tests and
// benchmarks compare kernels against these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frank::oracle {

/// y[b,i] = x[b,i] / sqrt(sum_j x[b,j]^2 / E + eps) * w[i], accumulated in double.
std::vector<double> rmsNorm(const float *x, const float *w, float eps, int64_t rows, int64_t cols);

/// y = gate * up / (1 + exp(-up)), in double.
std::vector<double> swiglu(const float *gate, const float *up, int64_t n);

/// y [M, N] = x [M, K] w, with w [K, N], or x wᵀ with w [N, K] (`transposeB`), in double.
std::vector<double> matmul(const float *x, const float *w, int64_t m, int64_t k, int64_t n,
                           bool transposeB);

/// The per-element check of MLIR-SUBSET.md §10: |a - e| <= atol + rtol * |e|; NaN never passes.
struct Comparison {
  bool ok = true;
  int64_t firstBad = -1;
  double actual = 0, expected = 0;
  double maxAbsError = 0;
  double nmse = 0; // sum (a-e)^2 / sum e^2
  std::string describe() const;
};
Comparison compare(const float *actual, const std::vector<double> &expected, double rtol,
                   double atol);

/// Deterministic inputs uniform in [lo, hi).
std::vector<float> randomFloats(int64_t n, uint64_t seed, float lo = -1, float hi = 1);

} // namespace frank::oracle
