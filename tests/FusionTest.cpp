// fuse-elementwise: which producers fold into their consumers (golden tests on the specialized
// IR), and that a producer recomputed in several consumers computes what it stored before.
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace frank::test {
namespace {

// A softmax's first steps over 6 rows of 40: `producer` (the body of a generic over %x, and %z
// where it names it, into %s) feeds both the row maximum and the exponentials of the differences.
// `returnsProducer` returns %s as well.
std::string softmaxSteps(const std::string &producer, bool readsZ = false,
                         bool returnsProducer = false) {
  std::string text = R"(
    func.func @f(%x: tensor<6x40xf32>, %z: tensor<6x40xf32>, %scale: f32) -> RESULTS {
      %ninf = arith.constant 0xFF800000 : f32
      %e0 = tensor.empty() : tensor<6x40xf32>
      %s = linalg.generic {indexing_maps = [MAPS affine_map<(r, c) -> (r, c)>],
                           iterator_types = ["parallel", "parallel"]}
          INS outs(%e0 : tensor<6x40xf32>) {
      ^bb0(ARGS %o: f32):
        PRODUCER
      } -> tensor<6x40xf32>
      %e1 = tensor.empty() : tensor<6xf32>
      %init = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<6xf32>) -> tensor<6xf32>
      %max = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (r)>],
                             iterator_types = ["parallel", "reduction"]}
          ins(%s : tensor<6x40xf32>) outs(%init : tensor<6xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %v = arith.maximumf %acc, %a : f32
        linalg.yield %v : f32
      } -> tensor<6xf32>
      %e2 = tensor.empty() : tensor<6x40xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (r)>,
                                            affine_map<(r, c) -> (r, c)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%s, %max : tensor<6x40xf32>, tensor<6xf32>) outs(%e2 : tensor<6x40xf32>) {
      ^bb0(%a: f32, %m: f32, %o: f32):
        %d = arith.subf %a, %m : f32
        %v = math.exp %d : f32
        linalg.yield %v : f32
      } -> tensor<6x40xf32>
      return RETURNED
    })";
  const std::string map = "affine_map<(r, c) -> (r, c)>, ";
  text = replaceAll(text, "RESULTS",
                    returnsProducer ? "(tensor<6x40xf32>, tensor<6x40xf32>)" : "tensor<6x40xf32>");
  text = replaceAll(text, "MAPS", readsZ ? map + map : map);
  text = replaceAll(text, "INS",
                    readsZ ? "ins(%x, %z : tensor<6x40xf32>, tensor<6x40xf32>)"
                           : "ins(%x : tensor<6x40xf32>)");
  text = replaceAll(text, "ARGS", readsZ ? "%a: f32, %b: f32," : "%a: f32,");
  text = replaceAll(text, "PRODUCER", producer);
  return replaceAll(text, "RETURNED",
                    returnsProducer ? "%y, %s : tensor<6x40xf32>, tensor<6x40xf32>"
                                    : "%y : tensor<6x40xf32>");
}

const std::vector<std::string> kShapes = {"6x40xf32", "6x40xf32", "f32"};

// The scaled scores, read by the row maximum and by the exponentials, are computed in both and
// never stored; the exponentials still match a double-precision softmax step.
TEST(Fusion, CheapProducerOfSeveralConsumersIsRecomputedInEach) {
  Function fn = context()
                    .loadString(softmaxSteps("%m = arith.mulf %a, %scale : f32\n"
                                             "        linalg.yield %m : f32"),
                                "fusion.mlir")
                    .function("f");
  const std::string specialized = fn.emit(Stage::Specialized, kShapes);
  EXPECT_EQ(count(specialized, "linalg.generic"), 2) << specialized;
  EXPECT_EQ(count(specialized, "arith.mulf"), 2) << specialized;

  const int64_t rows = 6, cols = 40;
  const float scale = 1.7f;
  std::vector<float> x = oracle::randomFloats(rows * cols, 11), z(rows * cols, 0.f);
  std::vector<double> expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY;
    for (int64_t c = 0; c < cols; ++c)
      max = std::max(max, double(x[r * cols + c]) * scale);
    for (int64_t c = 0; c < cols; ++c)
      expected[r * cols + c] = std::exp(double(x[r * cols + c]) * scale - max);
  }
  Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols}),
                 Tensor::borrow(z.data(), DType::F32, {rows, cols}), Scalar::f32(scale)})[0];
  // |x * scale - max| < 3.4: the rounding of the product and of the difference (half an ulp of
  // 2 and of 4 at most, 3.6e-7 together) moves exp's result by that much relative, and exp adds
  // about one ulp (MathTest), 1.2e-7.
  auto cmp = oracle::compare(y.as<float>(), expected, 1e-6, 0);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// A scaled input centred by its column sums: the sums (a reduction over the rows) and the
// subtraction both recompute the product, so the scaled copy, which would go through memory
// three times, is never made.
TEST(Fusion, ProductRecomputedInAColumnReductionAndItsConsumer) {
  const char *text = R"(
    func.func @f(%x: tensor<?x?xf32>, %scale: f32) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = tensor.dim %x, %c0 : tensor<?x?xf32>
      %cols = tensor.dim %x, %c1 : tensor<?x?xf32>
      %zero = arith.constant 0.0 : f32
      %e0 = tensor.empty(%rows, %cols) : tensor<?x?xf32>
      %s = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (r, c)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%x : tensor<?x?xf32>) outs(%e0 : tensor<?x?xf32>) {
      ^bb0(%a: f32, %o: f32):
        %m = arith.mulf %a, %scale : f32
        linalg.yield %m : f32
      } -> tensor<?x?xf32>
      %e1 = tensor.empty(%cols) : tensor<?xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<?xf32>) -> tensor<?xf32>
      %sum = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (c)>],
                             iterator_types = ["reduction", "parallel"]}
          ins(%s : tensor<?x?xf32>) outs(%init : tensor<?xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %v = arith.addf %acc, %a : f32
        linalg.yield %v : f32
      } -> tensor<?xf32>
      %e2 = tensor.empty(%rows, %cols) : tensor<?x?xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (c)>,
                                            affine_map<(r, c) -> (r, c)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%s, %sum : tensor<?x?xf32>, tensor<?xf32>) outs(%e2 : tensor<?x?xf32>) {
      ^bb0(%a: f32, %m: f32, %o: f32):
        %d = arith.subf %a, %m : f32
        linalg.yield %d : f32
      } -> tensor<?x?xf32>
      return %y : tensor<?x?xf32>
    })";
  Function fn = context().loadString(text, "fusion.mlir").function("f");
  const int64_t rows = 67, cols = 45;
  const std::string specialized = fn.emit(Stage::Specialized, {"67x45xf32", "f32"});
  EXPECT_EQ(count(specialized, "linalg.generic"), 2) << specialized;
  EXPECT_EQ(count(specialized, "arith.mulf"), 2) << specialized;

  const float scale = 0.75f;
  std::vector<float> x = oracle::randomFloats(rows * cols, 5);
  std::vector<double> sums(cols, 0.0), expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sums[c] += double(x[r * cols + c]) * scale;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      expected[r * cols + c] = double(x[r * cols + c]) * scale - sums[c];
  Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols}), Scalar::f32(scale)})[0];
  // A column sum of 67 products below 0.75 in magnitude, accumulated in f32 in any order: each
  // partial sum is below 64, so 67 roundings of half an ulp of 64 (1.9e-6) stay within 1.3e-4,
  // which the subtraction passes on. A wrong scale or column would miss by tenths.
  auto cmp = oracle::compare(y.as<float>(), expected, 0, 1.5e-4);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// What would cost more recomputed than stored stays a tensor of its own: a transcendental
// function, a producer reading two tensors (each consumer would read both), and one that a
// consumer other than a generic (here the return) needs stored anyway.
TEST(Fusion, CostlyProducersOfSeveralConsumersAreStored) {
  struct Case {
    const char *what;
    std::string text;
  };
  const Case cases[] = {
      {"an exponential", softmaxSteps("%m = math.exp %a : f32\n        linalg.yield %m : f32")},
      {"a sum of two tensors",
       softmaxSteps("%m = arith.addf %a, %b : f32\n        linalg.yield %m : f32", true)},
      {"a product also returned",
       softmaxSteps("%m = arith.mulf %a, %scale : f32\n        linalg.yield %m : f32", false,
                    true)},
  };
  for (const Case &c : cases) {
    Function fn = context().loadString(c.text, "fusion.mlir").function("f");
    const std::string specialized = fn.emit(Stage::Specialized, kShapes);
    EXPECT_EQ(count(specialized, "linalg.generic"), 3) << c.what << "\n" << specialized;
  }
}

} // namespace
} // namespace frank::test
