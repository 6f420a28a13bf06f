// Peer implementations; see Peers.h.
#include "Peers.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#ifdef FRANK_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef FRANK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef FRANK_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace frank::bench {

Tensor expertsOutermost(const Tensor &w) {
  const int64_t rows = w.shape()[0], cols = w.shape()[1], experts = w.shape()[2];
  Tensor packed = Tensor::zeros(DType::F32, {experts, rows, cols});
  const float *src = w.as<float>();
  float *dst = packed.as<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t x = 0; x < experts; ++x)
        dst[(x * rows + r) * cols + c] = src[(r * cols + c) * experts + x];
  return packed;
}

PeerStatus openblasStatus() {
#ifdef FRANK_HAVE_OPENBLAS
  return {true, {}};
#else
  return {false, "OpenBLAS is not installed (make bench-peers installs libopenblas-dev)"};
#endif
}

std::string openblasCore() {
#ifdef FRANK_HAVE_OPENBLAS
  return openblas_get_corename();
#else
  return {};
#endif
}

PeerStatus onednnStatus() {
#ifdef FRANK_HAVE_DNNL
  return {true, {}};
#else
  return {false, "oneDNN is not installed (make bench-peers installs libdnnl-dev)"};
#endif
}

PeerStatus libxsmmStatus() {
#ifdef FRANK_HAVE_LIBXSMM
  return {true, {}};
#else
  return {false, "libxsmm is not installed (make bench-peers installs libxsmm-dev)"};
#endif
}

#ifdef FRANK_HAVE_OPENBLAS

PeerCall openblasMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y) {
  const int m = static_cast<int>(x.shape()[0]), k = static_cast<int>(x.shape()[1]);
  const int n = static_cast<int>(weights[0].shape()[1]);
  return [=, out = y](size_t copy) mutable {
    const float *w = weights[copy % weights.size()].as<float>();
    if (m == 1) // the GEMV path, as a caller with one row would take it
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, w, n, x.as<float>(), 1, 0.0f,
                  out.as<float>(), 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x.as<float>(), k, w, n,
                  0.0f, out.as<float>(), n);
  };
}

PeerCall openblasMulMatId(const std::vector<Tensor> &weights, const Tensor &input,
                          const Tensor &ids, Tensor &out, size_t copies) {
  const int64_t nOut = weights[0].shape()[0], nIn = weights[0].shape()[1];
  const int64_t experts = weights[0].shape()[2];
  const int64_t used = ids.shape()[0], tokens = ids.shape()[1];
  // Expert-major copies: packed[copy][e] is [n_out, n_in].
  auto packed = std::make_shared<std::vector<Tensor>>();
  for (size_t c = 0; c < copies; ++c)
    packed->push_back(expertsOutermost(weights[c % weights.size()]));
  auto gathered = std::make_shared<std::vector<float>>(used * tokens * nIn);
  auto results = std::make_shared<std::vector<float>>(used * tokens * nOut);
  return [=, result = out](size_t copy) mutable {
    const float *x = input.as<float>();
    const int32_t *id = ids.as<int32_t>();
    const float *w = (*packed)[copy % packed->size()].as<float>();
    float *y = result.as<float>();
    for (int64_t e = 0; e < experts; ++e) {
      // The (slot, token) pairs routed to e, their input columns gathered into rows.
      std::vector<int64_t> pairs;
      for (int64_t p = 0; p < used * tokens; ++p)
        if (id[p] == e)
          pairs.push_back(p);
      if (pairs.empty())
        continue;
      const int64_t count = static_cast<int64_t>(pairs.size());
      for (int64_t r = 0; r < count; ++r)
        for (int64_t i = 0; i < nIn; ++i)
          (*gathered)[r * nIn + i] = x[i * used * tokens + pairs[r]];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(count),
                  static_cast<int>(nOut), static_cast<int>(nIn), 1.0f, gathered->data(),
                  static_cast<int>(nIn), w + e * nOut * nIn, static_cast<int>(nIn), 0.0f,
                  results->data(), static_cast<int>(nOut));
      for (int64_t r = 0; r < count; ++r)
        for (int64_t o = 0; o < nOut; ++o)
          y[o * used * tokens + pairs[r]] = (*results)[r * nOut + o];
    }
  };
}

#else

PeerCall openblasMatmul(const Tensor &, const std::vector<Tensor> &, Tensor &) { return {}; }
PeerCall openblasMulMatId(const std::vector<Tensor> &, const Tensor &, const Tensor &, Tensor &,
                          size_t) {
  return {};
}

#endif

#ifdef FRANK_HAVE_DNNL

PeerCall onednnMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const memory::dim m = x.shape()[0], k = x.shape()[1], n = weights[0].shape()[1];
  auto eng = std::make_shared<engine>(engine::kind::cpu, 0);
  auto strm = std::make_shared<stream>(*eng);
  memory::desc srcDesc({m, k}, dt::f32, tag::ab), dstDesc({m, n}, dt::f32, tag::ab);
  // `any` lets oneDNN choose its blocked weight layout; the reorder into it happens once here,
  // as an inference runtime does when it loads the model.
  memory::desc anyWeights({k, n}, dt::f32, tag::any);
#if DNNL_VERSION_MAJOR >= 3
  matmul::primitive_desc pd(*eng, srcDesc, anyWeights, dstDesc);
#else
  matmul::primitive_desc pd(matmul::desc(srcDesc, anyWeights, dstDesc), *eng);
#endif
  auto packed = std::make_shared<std::vector<memory>>();
  for (const Tensor &w : weights) {
    memory user({{k, n}, dt::f32, tag::ab}, *eng, const_cast<float *>(w.as<float>()));
    memory mine(pd.weights_desc(), *eng);
    reorder(user, mine).execute(*strm, user, mine);
    packed->push_back(mine);
  }
  strm->wait();
  auto src = std::make_shared<memory>(srcDesc, *eng, const_cast<float *>(x.as<float>()));
  auto dst = std::make_shared<memory>(dstDesc, *eng, y.as<float>());
  auto prim = std::make_shared<matmul>(pd);
  return [=, keep = y](size_t copy) {
    (void)keep;
    prim->execute(*strm, {{DNNL_ARG_SRC, *src},
                          {DNNL_ARG_WEIGHTS, (*packed)[copy % packed->size()]},
                          {DNNL_ARG_DST, *dst}});
    strm->wait();
  };
}

#else

PeerCall onednnMatmul(const Tensor &, const std::vector<Tensor> &, Tensor &) { return {}; }

#endif

#ifdef FRANK_HAVE_LIBXSMM

namespace {

/// Throws unless y = x * w on a sample of outputs, each within 1e-4 of the sum of |x| |w| over
/// its dot product (float accumulation over k = 4096 stays far below that).
void checkMatmul(const float *x, const float *w, const float *y, int64_t m, int64_t k,
                 int64_t n) {
  for (int64_t s = 0; s < 64; ++s) {
    int64_t row = (s * 37) % m, col = (s * 1031 + 7) % n;
    double exact = 0, magnitude = 0;
    for (int64_t i = 0; i < k; ++i) {
      exact += static_cast<double>(x[row * k + i]) * w[i * n + col];
      magnitude += std::fabs(static_cast<double>(x[row * k + i]) * w[i * n + col]);
    }
    if (std::fabs(y[row * n + col] - exact) > 1e-4 * magnitude + 1e-30)
      throw std::runtime_error("libxsmm peer: wrong result at [" + std::to_string(row) + ", " +
                               std::to_string(col) + "]");
  }
}

} // namespace

PeerCall libxsmmMatmul(const Tensor &x, const std::vector<Tensor> &weights, Tensor &y) {
  // libxsmm is column-major: row-major y = x w is y^T = w^T x^T, so w's blocks are its A
  // (bn x bk, leading dim bn) and x its B (bk x rows, leading dim k).
  constexpr int64_t bn = 64, bk = 64, bm = 32;
  const int64_t m = x.shape()[0], k = x.shape()[1], n = weights[0].shape()[1];
  if (n % bn != 0 || k % bk != 0)
    throw std::runtime_error("libxsmm peer: n and k must be multiples of 64");
  const int64_t kBlocks = k / bk, nBlocks = n / bn, mBlocks = (m + bm - 1) / bm;
  auto packed = std::make_shared<std::vector<std::vector<float>>>();
  for (const Tensor &t : weights) {
    const float *w = t.as<float>();
    std::vector<float> p(static_cast<size_t>(k * n));
    for (int64_t nb = 0; nb < nBlocks; ++nb)
      for (int64_t kb = 0; kb < kBlocks; ++kb)
        for (int64_t kk = 0; kk < bk; ++kk)
          std::memcpy(&p[((nb * kBlocks + kb) * bk + kk) * bn], &w[(kb * bk + kk) * n + nb * bn],
                      bn * sizeof(float));
    packed->push_back(std::move(p));
  }
  auto kernelFor = [&](int64_t rows) {
    const float alpha = 1, beta = 0;
    const libxsmm_blasint lda = bn, ldb = static_cast<libxsmm_blasint>(k),
                          ldc = static_cast<libxsmm_blasint>(n);
    libxsmm_smmfunction_reducebatch_strd f = libxsmm_smmdispatch_reducebatch_strd(
        bn, static_cast<libxsmm_blasint>(rows), bk, bk * bn * sizeof(float), bk * sizeof(float),
        &lda, &ldb, &ldc, &alpha, &beta, nullptr, nullptr);
    if (!f)
      throw std::runtime_error("libxsmm peer: no JIT kernel for this CPU");
    return f;
  };
  const int64_t lastRows = m - (mBlocks - 1) * bm;
  auto full = kernelFor(std::min(m, bm)), last = kernelFor(lastRows);
  const int threads = numThreads();
  PeerCall call = [=, out = y](size_t copy) mutable {
    const float *w = (*packed)[copy % packed->size()].data();
    const float *in = x.as<float>();
    float *result = out.as<float>();
    const int64_t items = nBlocks * mBlocks;
    auto work = [&](int t) {
      unsigned long long count = static_cast<unsigned long long>(kBlocks);
      for (int64_t item = items * t / threads; item < items * (t + 1) / threads; ++item) {
        int64_t nb = item % nBlocks, mb = item / nBlocks;
        (mb == mBlocks - 1 ? last : full)(w + nb * kBlocks * bk * bn, in + mb * bm * k,
                                          result + mb * bm * n + nb * bn, &count);
      }
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t)
      helpers.emplace_back(work, t);
    work(0);
    for (std::thread &h : helpers)
      h.join();
  };
  call(0);
  checkMatmul(x.as<float>(), weights[0].as<float>(), y.as<float>(), m, k, n);
  return call;
}

#else

PeerCall libxsmmMatmul(const Tensor &, const std::vector<Tensor> &, Tensor &) { return {}; }

#endif

} // namespace frank::bench
