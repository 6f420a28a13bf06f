// Code generation choices visible in the LLVM IR: what a parallel loop's context carries, which
// loops the vectorizer may widen, and frank's own math functions.
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace frank::test {
namespace {

// mul_mat_id at 32 tokens over 8 experts: contraction.ranks with its contraction.gather
// fallback, 14 buffers in all (3 inputs, the output, 10 temporaries).
std::string mulMatIdIr(Stage stage) {
  return context()
      .load(componentPath("moe/mul_mat_id.mlir"))
      .function("mul_mat_id")
      .emit(stage, {"64x32x8xf32", "32x2x32xf32", "2x32xi32"});
}

// The parameters of `define ... @NAME(...)`.
std::string paramsOf(const std::string &ir, const std::string &name) {
  size_t at = ir.find("@" + name + "(");
  if (at == std::string::npos)
    return "";
  size_t open = at + name.size() + 2;
  return ir.substr(open, ir.find(')', open) - open);
}

int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// A parallel loop's context carries the buffers its body uses, not all 14: the ranks tiles read
// the weights and the packed input and write the slots (three pointers, then dims, scalars and
// status), so a kernel with many temporaries does not fill a field per buffer before each loop.
TEST(Codegen, ParallelLoopsCarryOnlyTheBuffersTheyUse) {
  std::string ir = mulMatIdIr(Stage::LLVM);
  std::string tiles = paramsOf(ir, "frank_kernel.m_block.body");
  ASSERT_FALSE(tiles.empty()) << ir;
  EXPECT_EQ(count(tiles, "ptr noalias"), 6) << tiles;
  EXPECT_EQ(count(tiles, "ptr noalias readonly"), 1) << tiles; // the weights
  EXPECT_EQ(count(paramsOf(ir, "frank_kernel.body"), "ptr noalias"), 14 + 3);
}

// The loops that rank and pack the pairs address memory through the ids they load: they stay
// scalar, where widening would make each access one scalar access per lane.
TEST(Codegen, LoopsAddressingThroughLoadsStayScalar) {
  EXPECT_THAT(mulMatIdIr(Stage::LLVM),
              testing::HasSubstr("!{!\"llvm.loop.vectorize.enable\", i1 false}"));
  EXPECT_THAT(mulMatIdIr(Stage::OptimizedLLVM),
              testing::Not(testing::ContainsRegex("extractelement <[0-9]+ x i64>")));
}

// swiglu's u * (1 / (1 + exp(-u))), the reciprocal used once, becomes u / (1 + exp(-u)) in a
// specialized kernel: one rounding and one operation fewer. Generic mode evaluates floats as
// written.
TEST(Codegen, ReciprocalUsedOnceFoldsIntoItsProduct) {
  Function swiglu = context().load(componentPath("activation/swiglu.mlir")).function("swiglu");
  const std::vector<std::string> shapes = {"1x2x64xf32", "1x2x64xf32"};
  std::string specialized = swiglu.emit(Stage::LLVM, shapes);
  EXPECT_THAT(specialized, testing::HasSubstr("%silu = fdiv contract float %u, %denom"));
  EXPECT_THAT(specialized, testing::Not(testing::HasSubstr("fdiv contract float 1.0")));
  std::string generic = swiglu.emit(Stage::LLVM, shapes, Mode::Generic);
  EXPECT_THAT(generic, testing::HasSubstr("%sigmoid = fdiv float 1.000000e+00, %denom"));
  EXPECT_THAT(generic, testing::HasSubstr("%silu = fmul float %u, %sigmoid"));
}

} // namespace
} // namespace frank::test
