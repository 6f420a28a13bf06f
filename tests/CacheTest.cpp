// The kernel cache: hits, misses, per-signature kernels, concurrent first calls.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace frank::test {
namespace {

std::vector<Arg> rmsArgs(std::vector<float> &x, std::vector<float> &w, int64_t rows, int64_t cols) {
  x = oracle::randomFloats(rows * cols, rows + cols);
  w = oracle::randomFloats(cols, cols);
  return {Tensor::borrow(x.data(), DType::F32, {rows, cols}),
          Tensor::borrow(w.data(), DType::F32, {cols}), Scalar::f32(1e-6f)};
}

TEST(KernelCache, SecondCallWithSameSignatureCompilesNothing) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x, w;
  auto args = rmsArgs(x, w, 4, 64);
  fn(args);
  CacheStats first = ctx.cacheStats();
  EXPECT_EQ(first.misses, 1u);
  EXPECT_EQ(first.hits, 0u);
  EXPECT_GT(first.compileSeconds, 0.0);
  fn(args);
  CacheStats second = ctx.cacheStats();
  EXPECT_EQ(second.misses, 1u);
  EXPECT_EQ(second.hits, 1u);
  EXPECT_EQ(second.kernels, 1u);
  EXPECT_EQ(second.compileSeconds, first.compileSeconds);
}

TEST(KernelCache, OtherShapesGetOtherKernels) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x, w;
  Kernel a = fn.specialize(rmsArgs(x, w, 4, 64));
  Kernel b = fn.specialize(rmsArgs(x, w, 5, 64));
  Kernel c = fn.specialize(rmsArgs(x, w, 4, 64));
  EXPECT_EQ(ctx.cacheStats().misses, 2u);
  EXPECT_EQ(ctx.cacheStats().hits, 1u);
  EXPECT_EQ(a.signature(), "4x64xf32, 64xf32, f32");
  EXPECT_EQ(b.signature(), "5x64xf32, 64xf32, f32");
  // A specialized kernel refuses other shapes rather than reading out of bounds.
  auto other = rmsArgs(x, w, 5, 64);
  EXPECT_THAT([&] { a(other); },
              testing::ThrowsMessage<Error>(testing::HasSubstr(
                  "was compiled for argument #0 as 4x64xf32 but was given 5x64xf32")));
}

// A kernel's errors quote its source: a module of the same IR from other text (here two blank
// lines before it) gets kernels of its own, which quote that text. It had reused the first
// module's kernel and named the first file's line. The same text loaded again shares them.
TEST(KernelCache, ModulesFromOtherTextGetKernelsQuotingTheirOwnSource) {
  const std::string text = R"(util.func @f(%t: tensor<?xf32>, %at: index) -> tensor<?xf32> {
  %r = tensor.extract_slice %t[%at] [2] [1] : tensor<?xf32> to tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)";
  Context ctx;
  std::vector<float> t(5, 1.0f);
  auto call = [&](Module m) {
    m.function("f")({Tensor::borrow(t.data(), DType::F32, {5}), Scalar::index(4)}, Mode::Generic);
  };
  auto failsAt = [](const std::string &where) {
    return testing::ThrowsMessage<Error>(testing::StartsWith(
        where + ": error: the slice window reaches index 5 in dim 0, which has size 5"));
  };
  EXPECT_THAT([&] { call(ctx.loadString(text, "a.mlir")); }, failsAt("a.mlir:2:3"));
  EXPECT_THAT([&] { call(ctx.loadString("\n\n" + text, "b.mlir")); }, failsAt("b.mlir:4:3"));
  EXPECT_EQ(ctx.cacheStats().misses, 2u);
  EXPECT_THAT([&] { call(ctx.loadString(text, "a.mlir")); }, failsAt("a.mlir:2:3"));
  EXPECT_EQ(ctx.cacheStats().misses, 2u);
}

TEST(KernelCache, GenericKernelServesEveryShapeOfItsRank) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x, w;
  for (int64_t rows : {1, 3, 8})
    for (int64_t cols : {5, 64}) {
      auto args = rmsArgs(x, w, rows, cols);
      Tensor y = fn(args, Mode::Generic)[0];
      auto cmp = oracle::compare(
          y.as<float>(), oracle::rmsNorm(x.data(), w.data(), 1e-6f, rows, cols), 1e-5, 1e-6);
      EXPECT_TRUE(cmp.ok) << cmp.describe();
    }
  EXPECT_EQ(ctx.cacheStats().misses, 1u);
  EXPECT_EQ(ctx.cacheStats().hits, 5u);
}

TEST(KernelCache, GenericKernelChecksExtentsAtRunTime) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x(4 * 64), w(63);
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {4, 64}),
                        Tensor::borrow(w.data(), DType::F32, {63}), Scalar::f32(1e-6f)};
  EXPECT_THAT([&] { fn(args, Mode::Generic); },
              testing::ThrowsMessage<Error>(testing::AllOf(
                  testing::HasSubstr("loop dim d1 of 'linalg.generic' has extent 64"),
                  testing::HasSubstr("but 63 from operand #2 (%weight) dim 0"))));
}

TEST(KernelCache, ConcurrentFirstCallsCompileOnce) {
  Context ctx;
  Function fn = ctx.load(componentPath("activation/swiglu.mlir")).function("swiglu");
  const int64_t n = 1000;
  auto gate = oracle::randomFloats(n, 1), up = oracle::randomFloats(n, 2);
  auto expected = oracle::swiglu(gate.data(), up.data(), n);
  std::vector<Arg> args{Tensor::borrow(gate.data(), DType::F32, {1, 1, n}),
                        Tensor::borrow(up.data(), DType::F32, {1, 1, n})};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        Tensor y = fn(args)[0];
        if (!oracle::compare(y.as<float>(), expected, 1e-5, 1e-6).ok)
          ++failures;
      }
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ctx.cacheStats().misses, 1u);
  EXPECT_EQ(ctx.cacheStats().hits, 159u);
}

TEST(KernelCache, FailedCompilationsAreNotCached) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::vector<float> x(4 * 64), w(65);
  std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {4, 64}),
                        Tensor::borrow(w.data(), DType::F32, {65}), Scalar::f32(1e-6f)};
  for (int attempt = 0; attempt < 2; ++attempt)
    EXPECT_THROW(fn(args), Error);
  EXPECT_EQ(ctx.cacheStats().kernels, 0u);
  EXPECT_EQ(ctx.cacheStats().misses, 2u);
}

TEST(KernelCache, ContextsDoNotShareKernels) {
  Context a, b;
  std::vector<float> x, w;
  auto args = rmsArgs(x, w, 2, 8);
  a.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg")(args);
  b.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg")(args);
  EXPECT_EQ(a.cacheStats().misses, 1u);
  EXPECT_EQ(b.cacheStats().misses, 1u);
}

} // namespace
} // namespace frank::test
