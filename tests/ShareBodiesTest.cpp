// share-bodies: which parallel loops take their differing constants from lets (golden tests on
// hand-built loop IR, no JIT), that codegen then compiles one chunk for them which computes what
// each loop computed, and that the MoE block's three expert projections become one chunk.
#include "loops/ShareBodies.h"
#include "Engine.h"
#include "TestSupport.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using namespace frank::loops;

constexpr int64_t kRows = 1 << 14; // parallel: each chunk at least kMinChunkElements

// out[i * columns + j] = in[i * columns + j] * factor over rows i (parallel) and columns j.
Stmt scaleRows(const std::string &i, const std::string &j, int in, int out, int64_t columns,
               double factor = 2, ForKind columnKind = ForKind::Serial) {
  Expr at = add(mul(var(i, ElemKind::Index), intConst(columns)), var(j, ElemKind::Index));
  Stmt loop = forLoop(i, intConst(kRows), ForKind::Parallel,
                      {forLoop(j, intConst(columns), columnKind,
                               {store(out, at,
                                      binary(OpKind::MulF, load(in, at, ElemKind::F32),
                                             floatConst(factor, ElemKind::F32)))})});
  loop->bound = intConst(kRows / 4);
  return loop;
}

// Two inputs of 8 and 12 columns and their outputs.
Program twoWidths() {
  Program p;
  p.name = "widths";
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(kRows * 8), nullptr},
               {"y", ElemKind::F32, BufferRole::Input, 1, intConst(kRows * 12), nullptr},
               {"out1", ElemKind::F32, BufferRole::Output, 0, intConst(kRows * 8), nullptr},
               {"out2", ElemKind::F32, BufferRole::Output, 1, intConst(kRows * 12), nullptr}};
  p.workspaceBytes = intConst(0);
  return p;
}

// The loops differ in their column count, the same value in three places (the extent and both
// strides): one let per loop, read in all three.
TEST(ShareBodies, DifferingConstantsBecomeLetsBeforeEachLoop) {
  Program p = twoWidths();
  p.body = {scaleRows("i", "j", 0, 2, 8), scaleRows("k", "l", 1, 3, 12)};
  EXPECT_EQ(shareBodies(p), 2);
  const std::string text = print(p);
  EXPECT_THAT(text,
              testing::HasSubstr("  let i_const0: index = 8\n"
                                 "  for i in 0..16384 parallel(chunks of at least 4096) {\n"
                                 "    for j in 0..i_const0 {\n"
                                 "      out1[((i * i_const0) + j)] = (x[((i * i_const0) + j)] "
                                 "* 2f)\n"))
      << text;
  EXPECT_THAT(text, testing::HasSubstr("  let k_const0: index = 12\n"
                                       "  for k in 0..16384 parallel(chunks of at least 4096) {\n"
                                       "    for l in 0..k_const0 {\n"))
      << text;
  EXPECT_EQ(count(text, "let "), 2) << text;
}

// Codegen compiles one chunk for both loops, and each call computes its own loop's result.
TEST(ShareBodies, SharedChunkComputesEachLoop) {
  Program p = twoWidths();
  p.body = {scaleRows("i", "j", 0, 2, 8), scaleRows("k", "l", 1, 3, 12)};
  ASSERT_EQ(shareBodies(p), 2);
  std::string ir = jit::Engine::instance().emit(p, CodegenOptions{}, jit::Output::LLVM);
  EXPECT_EQ(count(ir, ".chunk("), 1) << ir;
  EXPECT_EQ(count(ir, "call void @frank_parallel_for(ptr @widths.i.chunk"), 2) << ir;
  jit::EntryFn kernel = jit::Engine::instance().compile(p, CodegenOptions{});
  std::vector<float> x(kRows * 8), y(kRows * 12), out1(x.size(), -1), out2(y.size(), -1);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i % 97);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = -float(i % 89);
  void *buffers[] = {x.data(), y.data(), out1.data(), out2.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out1[i], 2 * x[i]) << i;
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(out2[i], 2 * y[i]) << i;
}

// Loops left as they are: the same constants (codegen shares them already), a different body,
// a differing extent of a vectorized loop, a lone loop, and more differing constants than
// kMaxSharedConstants.
TEST(ShareBodies, LeavesAloneWhatCodegenCannotShareCheaply) {
  auto unchanged = [](Program p) {
    const std::string before = print(p);
    EXPECT_EQ(shareBodies(p), 0);
    EXPECT_EQ(print(p), before);
  };
  Program p = twoWidths();
  p.body = {scaleRows("i", "j", 0, 2, 8), scaleRows("k", "l", 0, 2, 8)};
  unchanged(p);
  p.body = {scaleRows("i", "j", 0, 2, 8), scaleRows("k", "l", 1, 3, 12, 3)};
  unchanged(p); // a float constant differs: another body
  p.body = {scaleRows("i", "j", 0, 2, 8, 2, ForKind::Vectorize),
            scaleRows("k", "l", 1, 3, 12, 2, ForKind::Vectorize)};
  unchanged(p);
  p.body = {scaleRows("i", "j", 0, 2, 8)};
  unchanged(p);
  auto manyOffsets = [](const std::string &i, int in, int out, int64_t first) {
    std::vector<Stmt> stores;
    for (int64_t c = 0; c <= kMaxSharedConstants; ++c)
      stores.push_back(store(out, add(var(i, ElemKind::Index), intConst(first + c)),
                             load(in, var(i, ElemKind::Index), ElemKind::F32)));
    Stmt loop = forLoop(i, intConst(64), ForKind::Parallel, std::move(stores));
    loop->bound = intConst(16);
    return loop;
  };
  p.body = {manyOffsets("i", 0, 2, 0), manyOffsets("k", 1, 3, 100)};
  unchanged(p);
  // Shuffles of other lanes: another body, though all else differs only in constants.
  auto shuffledRows = [](const std::string &i, int in, int out, int64_t columns,
                         std::vector<int> picks) {
    Expr row = mul(var(i, ElemKind::Index), intConst(columns));
    Stmt loop = forLoop(
        i, intConst(kRows), ForKind::Parallel,
        {store(out, row,
               shuffle(load(in, row, ElemKind::F32, 4),
                       load(in, add(row, intConst(4)), ElemKind::F32, 4), std::move(picks)))});
    loop->bound = intConst(kRows / 4);
    return loop;
  };
  p.body = {shuffledRows("i", 0, 2, 8, {0, 4, 1, 5}), shuffledRows("k", 1, 3, 12, {0, 4, 1, 5})};
  EXPECT_EQ(shareBodies(p), 2); // the same lanes: one body
  p.body = {shuffledRows("i", 0, 2, 8, {0, 4, 1, 5}), shuffledRows("k", 1, 3, 12, {2, 6, 3, 7})};
  unchanged(p);
}

// Loops nested in serial loops or ifs share as well, each with its lets in its own block.
TEST(ShareBodies, LoopsInsideOtherStatementsShare) {
  Program p = twoWidths();
  p.body = {forLoop("b", intConst(2), ForKind::Serial, {scaleRows("i", "j", 0, 2, 8)}),
            ifThen(cmp("eq", intConst(1), intConst(1)), {scaleRows("k", "l", 1, 3, 12)})};
  EXPECT_EQ(shareBodies(p), 2);
  ASSERT_EQ(p.body[0]->body.size(), 2u);
  EXPECT_EQ(p.body[0]->body[0]->kind, StmtKind::Let);
  ASSERT_EQ(p.body[1]->body.size(), 2u);
  EXPECT_EQ(p.body[1]->body[0]->kind, StmtKind::Let);
  std::string ir = jit::Engine::instance().emit(p, CodegenOptions{}, jit::Output::LLVM);
  EXPECT_EQ(count(ir, ".chunk("), 1) << ir;
}

// The MoE block at 32 tokens, AVX-512 kernel: the gate and up projections read other weights
// into other outputs and compile as one chunk; the down projection, whose packed input passes a
// quarter of L2, runs in k blocks, another nest (MoeBlockTest checks the results).
TEST(ShareBodies, MoeBlockProjectionsShareOneChunk) {
  Function fn =
      avx512Context().load(componentPath("moe/moe_ffn_block.mlir")).function("moe_ffn_block");
  const std::vector<std::string> shapes = {
      "32x1024xf32", "8x1024xf32", "3584x1024x8xf32", "3584x1024x8xf32", "1024x3584x8xf32",
      "index=8",     "index=2",    "index=1024",      "index=3584",      "i1=1"};
  std::string loops = fn.emit(Stage::Loops, shapes);
  EXPECT_EQ(count(loops, "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16\n"), 2) << loops;
  EXPECT_EQ(count(loops, "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 k-block=1792\n"), 1)
      << loops;
  std::string ir = fn.emit(Stage::LLVM, shapes);
  EXPECT_EQ(count(ir, "call void @frank_parallel_for(ptr @frank_kernel.m_block_1.chunk"), 2) << ir;
  EXPECT_EQ(count(ir, "call void @frank_parallel_for(ptr @frank_kernel.m_part.chunk"), 1) << ir;
}

} // namespace
} // namespace frank::test
