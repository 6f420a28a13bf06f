// The public C++ API: loading, calling, explicit specialization, outputs, errors.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <cfloat>
#include <cmath>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using testing::HasSubstr;
using testing::ThrowsMessage;

const char *kScaleAdd = R"mlir(
#id = affine_map<(d0) -> (d0)>
module @toy {
  func.func @scale_add(%x: tensor<?xf32>, %y: tensor<?xf32>, %s: f32) -> tensor<?xf32> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xf32>
    %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
        ins(%x, %y : tensor<?xf32>, tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %m = arith.mulf %a, %s : f32
      %t = arith.addf %m, %b : f32
      linalg.yield %t : f32
    } -> tensor<?xf32>
    return %r : tensor<?xf32>
  }
}
)mlir";

TEST(Api, LoadStringAndCall) {
  Context ctx;
  Function fn = ctx.loadString(kScaleAdd, "toy.mlir").function("scale_add");
  EXPECT_EQ(fn.argumentTypes(),
            (std::vector<std::string>{"tensor<?xf32>", "tensor<?xf32>", "f32"}));
  EXPECT_EQ(fn.resultTypes(), (std::vector<std::string>{"tensor<?xf32>"}));
  Tensor x = Tensor::zeros(DType::F32, {5}), y = Tensor::zeros(DType::F32, {5});
  for (int i = 0; i < 5; ++i) {
    x.as<float>()[i] = static_cast<float>(i);
    y.as<float>()[i] = 10.f;
  }
  auto out = fn({x, y, Scalar::f32(2.f)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{5}));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(out[0].as<float>()[i], 2.f * i + 10.f);
}

TEST(Api, QualifiedFunctionNameAndModuleListing) {
  Context ctx;
  Module m = ctx.load(componentPath("normalization/rms_norm.mlir"));
  EXPECT_EQ(m.functionNames(), (std::vector<std::string>{"rms_norm_linalg", "rms_norm_fused"}));
  EXPECT_EQ(m.function("rms_norm_components.rms_norm_linalg").name(), "rms_norm_linalg");
  EXPECT_THAT(
      [&] { m.function("layer_norm"); },
      ThrowsMessage<Error>(HasSubstr("no function '@layer_norm' in module @rms_norm_components; "
                                     "it defines: @rms_norm_linalg, @rms_norm_fused")));
}

TEST(Api, ExplicitSpecializeGivesReusableKernel) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  Kernel k = fn.specialize(std::vector<std::string>{"3x16xf32", "16xf32", "f32"});
  EXPECT_EQ(k.mode(), Mode::Specialized);
  EXPECT_GT(k.compileSeconds(), 0.0);
  EXPECT_THAT(k.explanation(), testing::Contains(HasSubstr("baked in: dim 0 = 3, dim 1 = 16")));
  for (int call = 0; call < 3; ++call) {
    auto x = oracle::randomFloats(48, call), w = oracle::randomFloats(16, 100 + call);
    std::vector<Arg> args{Tensor::borrow(x.data(), DType::F32, {3, 16}),
                          Tensor::borrow(w.data(), DType::F32, {16}), Scalar::f32(1e-3f)};
    EXPECT_EQ(k.outputShapes(args), (std::vector<std::vector<int64_t>>{{3, 16}}));
    auto cmp = oracle::compare(k(args)[0].as<float>(),
                               oracle::rmsNorm(x.data(), w.data(), 1e-3f, 3, 16), 1e-5, 1e-6);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
  EXPECT_EQ(ctx.cacheStats().misses, 1u);
}

TEST(Api, RunIntoCallerOutputsChecksThem) {
  Context ctx;
  Function fn = ctx.loadString(kScaleAdd, "toy.mlir").function("scale_add");
  Tensor x = Tensor::zeros(DType::F32, {4}), y = Tensor::zeros(DType::F32, {4});
  std::vector<Arg> args{x, y, Scalar::f32(1.f)};
  Kernel k = fn.specialize(args);
  std::vector<Tensor> wrongShape{Tensor::zeros(DType::F32, {5})};
  EXPECT_THAT([&] { k.run(args, wrongShape); },
              ThrowsMessage<Error>(
                  HasSubstr("output #0 of '@scale_add' must be 4xf32 but was given 5xf32")));
  std::vector<Tensor> inPlace{x};
  EXPECT_THAT([&] { k.run(args, inPlace); },
              ThrowsMessage<Error>(HasSubstr("output #0 of '@scale_add' overlaps argument #0")));
  std::vector<Tensor> none;
  EXPECT_THAT([&] { k.run(args, none); },
              ThrowsMessage<Error>(HasSubstr("has 1 results but 0 output tensors were given")));
}

TEST(Api, ArgumentErrorsNameTheArgument) {
  Context ctx;
  Function fn = ctx.load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  Tensor x = Tensor::zeros(DType::F32, {32, 4096});
  EXPECT_THAT(
      [&] {
        fn({x, Tensor::zeros(DType::F32, {4095}), Scalar::f32(1e-6f)});
      },
      ThrowsMessage<Error>(testing::AllOf(
          HasSubstr("rms_norm.mlir:"), HasSubstr("error: loop dim d1 of 'linalg.generic' has "
                                                 "extent 4096 from operand #0 (%input) dim 1 but "
                                                 "4095 from operand #2 (%weight) dim 0"))));
  EXPECT_THAT(
      [&] {
        fn({Tensor::zeros(DType::F32, {4096}), Tensor::zeros(DType::F32, {4096}),
            Scalar::f32(1e-6f)});
      },
      ThrowsMessage<Error>(
          HasSubstr("argument #0 (%input) has rank 2 ('tensor<?x?xf32>') but was given rank 1")));
  EXPECT_THAT(
      [&] {
        fn({Tensor::zeros(DType::I32, {2, 2}), Tensor::zeros(DType::F32, {2}), Scalar::f32(1e-6f)});
      },
      ThrowsMessage<Error>(
          HasSubstr("argument #0 (%input) has element type f32 but was given i32")));
  EXPECT_THAT(
      [&] {
        fn({x, Tensor::zeros(DType::F32, {4096})});
      },
      ThrowsMessage<Error>(HasSubstr("expected 3 arguments, got 2")));
  EXPECT_THAT(
      [&] {
        fn({x, Tensor::zeros(DType::F32, {4096}), Tensor::zeros(DType::F32, {1})});
      },
      ThrowsMessage<Error>(HasSubstr("argument #2 (%eps) has type 'f32' but was given '1xf32'")));
}

// An f32 argument given as a double fits while it rounds to a finite float: up to the midpoint
// between the largest float and 2^128, where rounding to nearest even goes to 2^128. Checked
// by the call of a function and by a held kernel, either sign.
TEST(Api, F32ScalarsFitUntilTheyRoundToInfinity) {
  Context ctx;
  Function fn = ctx.loadString(kScaleAdd, "toy.mlir").function("scale_add");
  const double midpoint = 0x1.ffffffp127; // 2^128 - 2^103
  const double below = std::nextafter(midpoint, 0.0);
  Tensor one = Tensor::zeros(DType::F32, {1}), zero = Tensor::zeros(DType::F32, {1});
  one.as<float>()[0] = 1.0f;
  Kernel k = fn.specialize({one, zero, Scalar::f32(1)});
  for (double sign : {1.0, -1.0}) {
    const Scalar fits{DType::F64, false, sign * below, 0};
    const Scalar overflows{DType::F64, false, sign * midpoint, 0};
    EXPECT_EQ(fn({one, zero, fits})[0].as<float>()[0], float(sign) * FLT_MAX);
    EXPECT_EQ(k({one, zero, fits})[0].as<float>()[0], float(sign) * FLT_MAX);
    EXPECT_THAT(
        [&] {
          fn({one, zero, overflows});
        },
        ThrowsMessage<Error>(HasSubstr("in call to '@scale_add': argument #2 (%s) is f32 "
                                       "but")));
    EXPECT_THAT(
        [&] {
          k({one, zero, overflows});
        },
        ThrowsMessage<Error>(HasSubstr("kernel for '@scale_add': argument #2 is f32 but")));
    EXPECT_THAT(
        [&] {
          k({one, zero, overflows});
        },
        ThrowsMessage<Error>(HasSubstr("does not fit")));
  }
}

TEST(Api, ParseErrorsCarryLocationAndCaret) {
  Context ctx;
  EXPECT_THAT([&] { ctx.loadString("func.func @f() {\n  %x = linalg.conv_2d\n}\n", "bad.mlir"); },
              ThrowsMessage<Error>(
                  testing::StartsWith("bad.mlir:2:8: error: unsupported op 'linalg.conv_2d'\n  %x "
                                      "= linalg.conv_2d\n       ^")));
}

TEST(Api, EmitShowsEveryStage) {
  Context ctx;
  Function fn = ctx.load(componentPath("activation/swiglu.mlir")).function("swiglu");
  std::vector<std::string> types{"1x4x100xf32", "1x4x100xf32"};
  EXPECT_THAT(fn.emit(Stage::Mlir, types), HasSubstr("module @activation_components"));
  EXPECT_THAT(fn.emit(Stage::Specialized, types), HasSubstr("tensor<1x4x100xf32>"));
  EXPECT_THAT(fn.emit(Stage::Loops, types), HasSubstr("for d2 in 0..100 vectorized"));
  EXPECT_THAT(fn.emit(Stage::LLVM, types), HasSubstr("noalias"));
  EXPECT_THAT(fn.emit(Stage::OptimizedLLVM, types),
              testing::ContainsRegex("<" + floatVectorWidths() + " x float>"));
  std::string all = fn.emit(Stage::Loops, types, Mode::Specialized, true);
  for (const char *pass : {"inline", "specialize", "fuse-elementwise", "lower-to-loops"})
    EXPECT_THAT(all, HasSubstr(std::string("IR Dump After ") + pass));
}

// ContextOptions::cpu: the host's CPU runs what it compiles, another's kernels print with its
// vector width and run only where the host has its features (CliTest covers a host that lacks
// them), and an unknown name fails when the context is made.
TEST(Api, ContextsCompileForTheCpuTheyName) {
  for (auto [cpu, lanes] : {std::pair{"skylake-avx512", 16}, std::pair{"x86-64-v3", 8}}) {
    SCOPED_TRACE(cpu);
    ContextOptions options;
    options.cpu = cpu;
    Context ctx(options);
    Function fn = ctx.loadString(kScaleAdd, "toy.mlir").function("scale_add");
    EXPECT_THAT(fn.emit(Stage::OptimizedLLVM, {"1000xf32", "1000xf32", "f32"}),
                HasSubstr(fmt::format("<{} x float>", lanes)));
  }
  ContextOptions host;
  host.cpu = "x86-64"; // SSE2: every x86-64 host runs it
  Function fn = Context(host).loadString(kScaleAdd, "toy.mlir").function("scale_add");
  Tensor x = Tensor::zeros(DType::F32, {3}), y = Tensor::zeros(DType::F32, {3});
  x.as<float>()[2] = 4.f;
  EXPECT_EQ(fn({x, y, Scalar::f32(0.5f)})[0].as<float>()[2], 2.f);
  ContextOptions unknown;
  unknown.cpu = "pentium-99";
  EXPECT_THAT([&] { Context ctx(unknown); },
              ThrowsMessage<Error>(HasSubstr("error: unknown CPU 'pentium-99'")));
}

TEST(Api, TensorBasics) {
  Tensor t = Tensor::zeros(DType::F32, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.byteSize(), 24u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.typeString(), "2x3xf32");
  TypeSpec s = parseTypeSpec("32x4096xf32=@x.npy");
  EXPECT_TRUE(s.isTensor);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{32, 4096}));
  EXPECT_EQ(s.value, "@x.npy");
  EXPECT_TRUE(parseTypeSpec("index=4").isIndex);
  EXPECT_EQ(parseTypeSpec("32x?xf32").shape, (std::vector<int64_t>{32, -1})); // a runtime dim
  EXPECT_THAT([] { parseTypeSpec("32x??xf32"); },
              ThrowsMessage<Error>(HasSubstr("dims must be non-negative integers or ?")));
  EXPECT_THAT([] { parseTypeSpec("4xq8"); },
              ThrowsMessage<Error>(HasSubstr("unknown element type 'q8'")));
}

} // namespace
} // namespace frank::test
