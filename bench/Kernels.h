// The benchmark cases shared by frank-bench and the `make run` demo: a component at a shape,
// its inputs, and its oracle.
#pragma once

#include "frank/Frank.h"
#include "oracles/Oracles.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

namespace frank::bench {

struct Case {
  std::string name;      // "rms_norm(rows=32,cols=4096)", the filter and the repro
  std::string component; // path below components/
  std::string function;
  std::vector<Tensor> data; // the inputs, 64-byte aligned, shared by copies of the case
  std::vector<Arg> args;
  int64_t bytes = 0; // bytes read and written per call
  int64_t flops = 0; // nominal FLOPs per call (see each case)
  std::function<std::vector<double>()> oracle;
};

// Inputs live in 64-byte aligned tensors, as any runtime's do. (A std::vector's data sits 16
// bytes past a page boundary; such an input 48 bytes below the output modulo 4 KiB makes its
// loads alias the output's stores and doubles rms_norm's time.)
inline Tensor aligned(const std::vector<float> &v, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(DType::F32, std::move(shape));
  std::copy(v.begin(), v.end(), t.as<float>());
  return t;
}

inline std::string componentPath(const std::string &relative) {
  return std::string(FRANK_COMPONENTS_DIR) + "/" + relative;
}

/// S1: rms_norm over [rows, cols]. Nominal FLOPs: 4 per element (square, add, divide,
/// multiply by the weight).
inline Case rmsNormCase(int64_t rows, int64_t cols) {
  Case c;
  c.name = fmt::format("rms_norm(rows={},cols={})", rows, cols);
  c.component = "normalization/rms_norm.mlir";
  c.function = "rms_norm_linalg";
  c.data = {aligned(oracle::randomFloats(rows * cols, 1), {rows, cols}),
            aligned(oracle::randomFloats(cols, 2, 0.5f, 1.5f), {cols})};
  c.args = {c.data[0], c.data[1], Scalar::f32(1e-6f)};
  c.bytes = (2 * rows * cols + cols) * 4;
  c.flops = 4 * rows * cols;
  c.oracle = [x = c.data[0], w = c.data[1], rows, cols] {
    return oracle::rmsNorm(x.as<float>(), w.as<float>(), 1e-6f, rows, cols);
  };
  return c;
}

/// S2: swiglu over [d0, d1, d2]. Nominal FLOPs: 6 per element (negate, exp counted as one,
/// add, divide, two multiplies).
inline Case swigluCase(int64_t d0, int64_t d1, int64_t d2) {
  Case c;
  int64_t n = d0 * d1 * d2;
  c.name = fmt::format("swiglu(d0={},d1={},d2={})", d0, d1, d2);
  c.component = "activation/swiglu.mlir";
  c.function = "swiglu";
  c.data = {aligned(oracle::randomFloats(n, 3, -4, 4), {d0, d1, d2}),
            aligned(oracle::randomFloats(n, 4, -8, 8), {d0, d1, d2})};
  c.args = {c.data[0], c.data[1]};
  c.bytes = 3 * n * 4;
  c.flops = 6 * n;
  c.oracle = [g = c.data[0], u = c.data[1], n] {
    return oracle::swiglu(g.as<float>(), u.as<float>(), n);
  };
  return c;
}

inline void setCounters(benchmark::State &state, const Case &c) {
  state.SetBytesProcessed(state.iterations() * c.bytes);
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations() * c.flops),
                                                benchmark::Counter::kIsRate);
}

/// Registers NAME/specialized, NAME/generic and NAME/oracle for a case; returns their names.
inline std::vector<std::string> registerCase(Context &ctx, const Case &c) {
  Function fn = ctx.load(componentPath(c.component)).function(c.function);
  std::vector<std::string> names;
  for (Mode mode : {Mode::Specialized, Mode::Generic}) {
    Kernel kernel = fn.specialize(c.args, mode);
    std::vector<Tensor> outputs = kernel(c.args);
    std::string name = c.name + (mode == Mode::Specialized ? "/specialized" : "/generic");
    benchmark::RegisterBenchmark(name.c_str(), [kernel, outputs,
                                                c](benchmark::State &state) mutable {
      for (auto _ : state) {
        kernel.run(c.args, outputs);
        benchmark::ClobberMemory();
      }
      setCounters(state, c);
    })->UseRealTime();
    names.push_back(name);
  }
  std::string name = c.name + "/oracle";
  benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State &state) {
    for (auto _ : state) {
      auto y = c.oracle();
      benchmark::DoNotOptimize(y.data());
    }
    setCounters(state, c);
  })->UseRealTime();
  names.push_back(name);
  return names;
}

} // namespace frank::bench
