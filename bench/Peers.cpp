// Peer implementations; see Peers.h.
#include "Peers.h"

#include <cstring>
#include <memory>

#ifdef FRANK_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef FRANK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace frank::bench {

PeerStatus openblasStatus() {
#ifdef FRANK_HAVE_OPENBLAS
  return {true, {}};
#else
  return {false, "OpenBLAS is not installed (make bench-peers installs libopenblas-dev)"};
#endif
}

PeerStatus onednnStatus() {
#ifdef FRANK_HAVE_DNNL
  return {true, {}};
#else
  return {false, "oneDNN is not installed (make bench-peers installs libdnnl-dev)"};
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
                          const Tensor &ids, Tensor &out) {
  const int64_t nOut = weights[0].shape()[0], nIn = weights[0].shape()[1];
  const int64_t experts = weights[0].shape()[2];
  const int64_t used = ids.shape()[0], tokens = ids.shape()[1];
  // Expert-major copies: packed[copy][e] is [n_out, n_in].
  auto packed = std::make_shared<std::vector<Tensor>>();
  for (const Tensor &w : weights) {
    Tensor p = Tensor::zeros(DType::F32, {experts, nOut, nIn});
    const float *src = w.as<float>();
    float *dst = p.as<float>();
    for (int64_t o = 0; o < nOut; ++o)
      for (int64_t i = 0; i < nIn; ++i)
        for (int64_t e = 0; e < experts; ++e)
          dst[(e * nOut + o) * nIn + i] = src[(o * nIn + i) * experts + e];
    packed->push_back(p);
  }
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
PeerCall openblasMulMatId(const std::vector<Tensor> &, const Tensor &, const Tensor &, Tensor &) {
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

} // namespace frank::bench
