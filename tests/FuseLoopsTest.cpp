// fuse-loops: which neighbouring loops fuse (golden tests on hand-built loop IR, no JIT), and
// end to end, that a chain whose consumer needs a whole reduction first is left alone and still
// computes the oracle's answer while a row-local chain becomes one loop.
#include "loops/FuseLoops.h"
#include "TestSupport.h"
#include "oracles/Oracles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

namespace frank::test {
namespace {

using namespace frank::loops;
using IndexOf = std::function<Expr(Expr row, Expr column)>;

constexpr int64_t kRows = 4, kColumns = 8;

Expr rowMajor(Expr row, Expr column) { return add(mul(row, intConst(kColumns)), column); }

// A: t[i, j] = x[i, j] over rows i; then B: y[i, j] = t[read(i, j)] over rows i2.
Program producerConsumer(const IndexOf &read, ForKind aKind = ForKind::Serial,
                         ForKind bKind = ForKind::Parallel, int64_t bRows = kRows) {
  Program p;
  p.name = "k";
  Expr size = intConst(kRows * kColumns);
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, size, nullptr},
               {"t", ElemKind::F32, BufferRole::Temp, 0, size, intConst(0)},
               {"y", ElemKind::F32, BufferRole::Output, 0, size, nullptr}};
  p.workspaceBytes = intConst(4 * kRows * kColumns);
  Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
  Expr i2 = var("i2", ElemKind::Index), j2 = var("j2", ElemKind::Index);
  Stmt a = forLoop("i", intConst(kRows), aKind,
                   {forLoop("j", intConst(kColumns), ForKind::Vectorize,
                            {store(1, rowMajor(i, j), load(0, rowMajor(i, j), ElemKind::F32))})});
  Stmt b = forLoop("i2", intConst(bRows), bKind,
                   {forLoop("j2", intConst(kColumns), ForKind::Vectorize,
                            {store(2, rowMajor(i2, j2), load(1, read(i2, j2), ElemKind::F32))})});
  a->comment = "first";
  b->comment = "second";
  b->bound = intConst(2);
  p.body = {a, let("c", intConst(3)), b};
  return p;
}

TEST(FuseLoops, RowLocalConsumerFuses) {
  Program p = producerConsumer(rowMajor);
  fuseLoops(p);
  ASSERT_EQ(p.body.size(), 2u) << print(p); // the let moved up, one loop
  EXPECT_EQ(p.body[0]->kind, StmtKind::Let);
  std::string text = print(p);
  // The parallel loop's variable and kind, the first loop's comment above, the second's
  // inside; and the loops over a row's columns fused as well, each column being its own row.
  EXPECT_THAT(text,
              testing::HasSubstr("// first\n  for i2 in 0..4 parallel(chunks of at least 2) {\n"
                                 "    for j in 0..8 vectorized {\n"
                                 "      t[((i2 * 8) + j)] = x[((i2 * 8) + j)]\n"
                                 "      // second\n"
                                 "      y[((i2 * 8) + j)] = t[((i2 * 8) + j)]\n    }\n  }\n"))
      << text;
}

// A loop that stores through an index it loads (a gather's read-back) stays scalar in codegen:
// fused with it, a vectorized loop would too. The rows still fuse; their loops over the
// columns stay apart, the vectorized one still vectorized. Without the loaded index, or with
// both loops vectorized, the columns fuse as before.
TEST(FuseLoops, AVectorizedLoopDoesNotFuseWithOneAddressingThroughLoads) {
  auto readBack = [](ForKind columns, bool throughLoad) {
    Program p = producerConsumer(rowMajor);
    p.buffers.push_back(
        {"slot", ElemKind::Index, BufferRole::Input, 0, intConst(kColumns), nullptr});
    Stmt &first = p.body[0]->body[0];
    first->forKind = columns;
    Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
    Expr column = throughLoad ? load(3, j, ElemKind::Index) : j;
    first->body = {store(1, rowMajor(i, j), load(0, rowMajor(i, column), ElemKind::F32))};
    fuseLoops(p);
    return print(p);
  };
  std::string apart = readBack(ForKind::Serial, true);
  EXPECT_THAT(apart, testing::HasSubstr("  for i2 in 0..4 parallel(chunks of at least 2) {\n"
                                        "    for j in 0..8 {\n"
                                        "      t[((i2 * 8) + j)] = x[((i2 * 8) + slot[j])]\n"
                                        "    }\n"
                                        "    // second\n"
                                        "    for j2 in 0..8 vectorized {\n"))
      << apart;
  for (auto [columns, throughLoad] :
       {std::pair{ForKind::Serial, false}, std::pair{ForKind::Vectorize, true}}) {
    std::string fused = readBack(columns, throughLoad);
    EXPECT_THAT(fused, testing::Not(testing::HasSubstr("for j2"))) << fused;
  }
}

// Inner loops whose extents a constant bounds (a causal mask's keys, `minsi(8, i + 1)`) range
// within that bound: row-local loops over them still fuse, and the bound is what the proof uses
// (`mostTrips`).
TEST(FuseLoops, InnerLoopsBoundedByAMinimumFuse) {
  Program p = producerConsumer(rowMajor);
  auto seen = [](const char *row) {
    return binary(OpKind::MinSI, intConst(kColumns), add(var(row, ElemKind::Index), intConst(1)));
  };
  p.body[0]->body[0]->value = seen("i");
  p.body[2]->body[0]->value = seen("i2");
  EXPECT_EQ(mostTrips(p.body[0]->body[0]->value), kColumns);
  EXPECT_EQ(mostTrips(binary(OpKind::MinSI, var("i", ElemKind::Index), var("j", ElemKind::Index))),
            std::nullopt);
  fuseLoops(p);
  std::string text = print(p);
  ASSERT_EQ(p.body.size(), 2u) << text;
  EXPECT_THAT(text, testing::HasSubstr("for j in 0..minsi(8, (i2 + 1)) vectorized {")) << text;
  // Past the row's 8 columns, the bound proves nothing: the loops stay apart.
  Program wide = producerConsumer(rowMajor);
  wide.body[0]->body[0]->value =
      binary(OpKind::MinSI, intConst(kColumns + 1), var("i", ElemKind::Index));
  fuseLoops(wide);
  EXPECT_EQ(wide.body.size(), 3u) << print(wide);
}

// Under a unit loop each (a batch of 1), the nests first lose it, with its variable 0, and then
// fuse as before.
TEST(FuseLoops, UnitLoopsDissolveSoThatTheNestsUnderThemFuse) {
  Program p = producerConsumer(rowMajor);
  auto underUnitLoop = [](Stmt nest, const char *name) {
    return forLoop(name, intConst(1), ForKind::Serial, {std::move(nest)});
  };
  p.body[0] = underUnitLoop(p.body[0], "b");
  p.body[2] = underUnitLoop(p.body[2], "b2");
  // The consumer's store also reads the unit variable (b2 * 32 + ...), which becomes 0.
  p.body[2]->body[0]->body[0]->body[0]->index =
      add(mul(var("b2", ElemKind::Index), intConst(kRows * kColumns)),
          rowMajor(var("i2", ElemKind::Index), var("j2", ElemKind::Index)));
  fuseLoops(p);
  std::string text = print(p);
  ASSERT_EQ(p.body.size(), 2u) << text;
  EXPECT_THAT(text, testing::HasSubstr("  for i2 in 0..4 parallel(chunks of at least 2) {\n"))
      << text;
  EXPECT_THAT(text, testing::HasSubstr("y[((i2 * 8) + j)]")) << text;
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("for b"))) << text;
}

TEST(FuseLoops, ReadsOutsideTheRowDoNotFuse) {
  struct Case {
    const char *name;
    IndexOf read;
  } cases[] = {
      {"the next row", [](Expr r, Expr c) { return rowMajor(add(r, intConst(1)), c); }},
      {"transposed", [](Expr r, Expr c) { return add(mul(c, intConst(kRows)), r); }},
      {"a whole row per column", [](Expr, Expr c) { return c; }},
      {"past the row's end", [](Expr r, Expr c) { return add(rowMajor(r, c), intConst(1)); }},
  };
  for (const Case &c : cases) {
    Program p = producerConsumer(c.read);
    fuseLoops(p);
    EXPECT_EQ(p.body.size(), 3u) << c.name << "\n" << print(p);
  }
  // Different extents, and an index computed from data (a gather), do not fuse either.
  Program shorter = producerConsumer(rowMajor, ForKind::Serial, ForKind::Parallel, kRows - 1);
  fuseLoops(shorter);
  EXPECT_EQ(shorter.body.size(), 3u) << print(shorter);
  Program gathered = producerConsumer(rowMajor);
  Stmt &inner = gathered.body[2]->body[0];
  inner->body = {
      let("g", cast(OpKind::FPToSI, load(0, intConst(0), ElemKind::F32), ElemKind::Index)),
      store(
          2, rowMajor(var("i2", ElemKind::Index), var("j2", ElemKind::Index)),
          load(1, rowMajor(var("g", ElemKind::Index), var("j2", ElemKind::Index)), ElemKind::F32))};
  fuseLoops(gathered);
  EXPECT_EQ(gathered.body.size(), 3u) << print(gathered);
}

TEST(FuseLoops, AParallelLoopInsideTheFusedParallelLoopRunsSerially) {
  Program p = producerConsumer(rowMajor, ForKind::Parallel, ForKind::Parallel);
  p.body[0]->bound = intConst(1);
  p.body[0]->body[0]->forKind = ForKind::Parallel; // as if a nest parallel further in
  fuseLoops(p);
  ASSERT_EQ(p.body.size(), 2u);
  std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("for i in 0..4 parallel(chunks of at least 1)")) << text;
  EXPECT_THAT(text, testing::HasSubstr("for j in 0..8 {")) << text;
}

// A loop's chunk-first variable (a packed panel's region, LowerToLoops.cpp) survives fusion:
// fused loops bind one, the second's uses renamed to it; a loop made serial inside the fused
// parallel loop indexes by its own variable instead, so that parallel chunks never share what a
// chunk of the inner loop owned; and a loop of one iteration dissolves with it 0.
TEST(FuseLoops, ChunkFirstVariablesSurviveFusion) {
  Program p = producerConsumer(rowMajor, ForKind::Parallel, ForKind::Parallel);
  p.body[0]->bound = intConst(1);
  // The loops also write w and v (nothing reads them) at their chunk's first iteration.
  auto addScratch = [](Program &program) {
    for (const char *name : {"w", "v"})
      program.buffers.push_back({name, ElemKind::F32, BufferRole::Temp, 0, intConst(kRows),
                                 intConst(4 * kRows * kColumns)});
  };
  addScratch(p);
  auto chunkIndexed = [](const Stmt &loop, const std::string &first, int buffer = 3) {
    loop->chunkFirst = first;
    loop->body.push_back(store(buffer, var(first, ElemKind::Index), floatConst(0, ElemKind::F32)));
  };
  chunkIndexed(p.body[0], "a_first");
  chunkIndexed(p.body[2], "b_first", 4);
  Stmt inner = p.body[0]->body[0];
  inner->forKind = ForKind::Serial;
  chunkIndexed(inner, "j_first");
  fuseLoops(p);
  ASSERT_EQ(p.body.size(), 2u) << print(p);
  std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("for i in 0..4 parallel(chunks of at least 1) chunk from "
                                       "a_first {"))
      << text;
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("b_first"))) << text;
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("j_first"))) << text;
  EXPECT_THAT(text, testing::HasSubstr("for j in 0..8 {")) << text;
  EXPECT_THAT(text, testing::HasSubstr("w[j] = 0f")) << text;
  EXPECT_THAT(text, testing::HasSubstr("w[a_first] = 0f")) << text;
  EXPECT_THAT(text, testing::HasSubstr("v[a_first] = 0f")) << text;

  Program unit = producerConsumer(rowMajor, ForKind::Parallel, ForKind::Parallel, 1);
  addScratch(unit);
  unit.body[0]->bound = intConst(1);
  unit.body[0] = forLoop("u", intConst(1), ForKind::Serial, {unit.body[0]});
  chunkIndexed(unit.body[0], "u_first");
  fuseLoops(unit);
  text = print(unit);
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("u_first"))) << text;
  EXPECT_THAT(text, testing::HasSubstr("w[0] = 0f")) << text;
}

// Rows of a runtime width (partial specialization): A writes t[i, j] for j < dims[0] in
// tiles of 4 (dims[0] / 4 of them) and the columns those leave over; B reads t[i, `read`].
// Strides and offsets are polynomials in the runtime sizes.
Program runtimeRows(const std::function<Expr(Expr row, Expr column)> &read) {
  Program p;
  p.name = "k";
  p.numDimParams = 1;
  Expr width = dimParam(0), tiles = binary(OpKind::DivSI, dimParam(0), intConst(4));
  Expr size = mul(intConst(kRows), width);
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, size, nullptr},
               {"t", ElemKind::F32, BufferRole::Temp, 0, size, intConst(0)},
               {"y", ElemKind::F32, BufferRole::Output, 0, size, nullptr}};
  p.workspaceBytes = mul(intConst(4), size);
  Expr i = var("i", ElemKind::Index), tile = var("tile", ElemKind::Index);
  Expr left = var("left", ElemKind::Index), j2 = var("j2", ElemKind::Index);
  auto at = [&](Expr row, Expr column) { return add(mul(row, width), column); };
  std::vector<Stmt> tileBody;
  for (int64_t c = 0; c < 4; ++c) {
    Expr column = add(mul(tile, intConst(4)), intConst(c));
    tileBody.push_back(store(1, at(i, column), load(0, at(i, column), ElemKind::F32)));
  }
  Expr leftColumn = add(mul(tiles, intConst(4)), left);
  Stmt a = forLoop(
      "i", intConst(kRows), ForKind::Parallel,
      {forLoop("tile", tiles, ForKind::Serial, std::move(tileBody)),
       forLoop("left", binary(OpKind::SubI, width, mul(tiles, intConst(4))), ForKind::Serial,
               {store(1, at(i, leftColumn), load(0, at(i, leftColumn), ElemKind::F32))})});
  Expr i2 = var("i2", ElemKind::Index);
  Stmt b = forLoop("i2", intConst(kRows), ForKind::Parallel,
                   {forLoop("j2", width, ForKind::Vectorize,
                            {store(2, at(i2, j2), load(1, read(i2, j2), ElemKind::F32))})});
  a->bound = b->bound = intConst(1);
  p.body = {a, b};
  return p;
}

TEST(FuseLoops, RowsOfARuntimeWidthFuse) {
  Program p = runtimeRows([](Expr row, Expr column) { return add(mul(row, dimParam(0)), column); });
  fuseLoops(p);
  EXPECT_EQ(p.body.size(), 1u) << print(p);
  // Past the row's end, or a row further on: no proof that each row stays its own.
  for (auto read : std::vector<std::function<Expr(Expr, Expr)>>{
           [](Expr row, Expr column) {
             return add(add(mul(row, dimParam(0)), column), intConst(1));
           },
           [](Expr row, Expr column) {
             return add(mul(add(row, intConst(1)), dimParam(0)), column);
           },
           [](Expr, Expr column) { return column; }}) {
    Program apart = runtimeRows(read);
    fuseLoops(apart);
    EXPECT_EQ(apart.body.size(), 2u) << print(apart);
  }
}

// Fused parallel loops take the smaller of their minimum chunks, runtime ones too: a loop whose
// first nest is small per row (its chunk many rows) may hold a large one after it, which must
// not run on one thread for it (decode over a runtime key count: the softmax over the keys,
// then P V).
TEST(FuseLoops, FusedParallelLoopsTakeTheSmallerChunkEvenAtRuntime) {
  Program p = runtimeRows([](Expr row, Expr column) { return add(mul(row, dimParam(0)), column); });
  p.body[0]->bound = binary(OpKind::DivSI, intConst(64), dimParam(0));
  p.body[1]->bound = intConst(1);
  fuseLoops(p);
  ASSERT_EQ(p.body.size(), 1u) << print(p);
  EXPECT_THAT(print(p), testing::HasSubstr("parallel(chunks of at least minsi((64 / dims[0]), 1))"))
      << print(p);
}

// Column means subtracted from every row: the reduction's loop over the rows and the
// subtraction's have the same extent, but each row of the subtraction needs every row summed.
TEST(FuseLoops, ConsumerOfAColumnReductionStaysApart) {
  const char *text = R"(
    func.func @f(%x: tensor<13x37xf32>) -> tensor<13x37xf32> {
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<37xf32>
      %init = linalg.fill ins(%zero : f32) outs(%e : tensor<37xf32>) -> tensor<37xf32>
      %sum = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (c)>],
                             iterator_types = ["reduction", "parallel"]}
          ins(%x : tensor<13x37xf32>) outs(%init : tensor<37xf32>) {
      ^bb0(%a: f32, %acc: f32):
        %s = arith.addf %acc, %a : f32
        linalg.yield %s : f32
      } -> tensor<37xf32>
      %o = tensor.empty() : tensor<13x37xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(r, c) -> (r, c)>, affine_map<(r, c) -> (c)>,
                                            affine_map<(r, c) -> (r, c)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%x, %sum : tensor<13x37xf32>, tensor<37xf32>) outs(%o : tensor<13x37xf32>) {
      ^bb0(%a: f32, %s: f32, %out: f32):
        %d = arith.subf %a, %s : f32
        linalg.yield %d : f32
      } -> tensor<13x37xf32>
      return %y : tensor<13x37xf32>
    })";
  const int64_t rows = 13, cols = 37;
  std::vector<float> x = oracle::randomFloats(rows * cols, 7);
  std::vector<double> sums(cols, 0.0), expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sums[c] += x[r * cols + c];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      expected[r * cols + c] = x[r * cols + c] - sums[c];
  Function fn = context().loadString(text, "fuse.mlir").function("f");
  Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols})})[0];
  auto cmp = oracle::compare(y.as<float>(), expected, 1e-5, 1e-5);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
  std::string loops = fn.emit(Stage::Loops, {"13x37xf32"});
  EXPECT_THAT(loops,
              testing::HasSubstr("\n  // linalg.generic at fuse.mlir:14:7: elementwise\n  for "))
      << "the subtraction is a loop of its own\n"
      << loops;
}

// A row's exponentials, then their sum: A writes t[j] = exp(x[j]); the sum's start (s = 0, its
// variable loaded from s) sits between the loops; B adds t[j2] into the variable. Returned with
// B's body given by `sumBody` (the default adds t[j2]) and the loops' kinds.
Program exponentialsThenSum(ForKind aKind = ForKind::Vectorize, ForKind bKind = ForKind::Vectorize,
                            std::vector<Stmt> extraBetween = {}) {
  Program p;
  p.name = "k";
  Expr size = intConst(kColumns);
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, size, nullptr},
               {"t", ElemKind::F32, BufferRole::Temp, 0, size, intConst(0)},
               {"s", ElemKind::F32, BufferRole::Output, 0, intConst(1), nullptr}};
  p.workspaceBytes = intConst(4 * kColumns);
  Expr j = var("j", ElemKind::Index), j2 = var("j2", ElemKind::Index);
  Expr acc = var("acc", ElemKind::F32);
  Stmt a = forLoop("j", size, aKind, {store(1, j, unary(OpKind::Exp, load(0, j, ElemKind::F32)))});
  Stmt b = forLoop("j2", size, bKind,
                   {assign("acc", binary(OpKind::AddF, acc, load(1, j2, ElemKind::F32), true))});
  p.body = {a, store(2, intConst(0), floatConst(0, ElemKind::F32)),
            local("acc", load(2, intConst(0), ElemKind::F32))};
  p.body.insert(p.body.end(), extraBetween.begin(), extraBetween.end());
  p.body.push_back(b);
  p.body.push_back(store(2, intConst(0), acc));
  return p;
}

// The sum's start moves above the exponentials' loop, which touches neither s nor the variable,
// and the two loops become one: each exponential is added as it is made, in the same order.
TEST(FuseLoops, ASumFusesWithTheLoopThatComputesItsTerms) {
  Program p = exponentialsThenSum();
  fuseLoops(p);
  std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("  s[0] = 0f\n"
                                       "  var acc: f32 = s[0]\n"
                                       "  for j in 0..8 vectorized {\n"
                                       "    t[j] = exp(x[j])\n"
                                       "    acc = (acc +[reassoc] t[j])\n"
                                       "  }\n"
                                       "  s[0] = acc\n"))
      << text;
}

// With its exponential in a let, as codegen's loops hold them, the sum reads the let instead of
// loading what the same iteration stored: over runtime sizes LLVM could not tell the store and
// the load apart and left such a loop scalar. A value that costs something (the exponential
// itself) is not computed twice: the load stays.
TEST(FuseLoops, TheSumReadsTheValueItsIterationStored) {
  Program p = exponentialsThenSum();
  Expr j = var("j", ElemKind::Index);
  p.body[0]->body = {let("e", unary(OpKind::Exp, load(0, j, ElemKind::F32))),
                     store(1, j, var("e", ElemKind::F32))};
  fuseLoops(p);
  std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("    t[j] = e\n"
                                       "    acc = (acc +[reassoc] e)\n"))
      << text;

  Program costly = exponentialsThenSum();
  fuseLoops(costly);
  EXPECT_THAT(print(costly), testing::HasSubstr("acc = (acc +[reassoc] t[j])")) << print(costly);
}

// Attention over runtime query and key counts: its softmax's fused loop of exponentials and their
// sum is vectorized, so the AVX-512 exponential (vscalefps) is in the kernel. Loading back what
// the iteration stored, it stayed scalar.
TEST(FuseLoops, RuntimeLengthAttentionKeepsItsVectorExponentials) {
  Function fn = avx512Context()
                    .load(componentPath("attention/attention_gqa.mlir"))
                    .function("attention_gqa")
                    .withRuntimeDims({{"query", 1}, {"key", 1}, {"value", 1}});
  std::string assembly =
      fn.emit(Stage::Assembly, {"1x128x32x128xf32", "1x128x8x128xf32", "1x128x8x128xf32", "f32"});
  EXPECT_THAT(assembly, testing::HasSubstr("vscalefps")) << "no 16-lane exp in the kernel";
}

// What keeps the two loops apart: a statement between them that reads the exponentials (it
// cannot run first), a loop that reads or assigns the variable the other accumulates into, a
// parallel loop, whose iterations would add into one variable at once, and a serial
// accumulation, which would make the vectorized loop serial.
TEST(FuseLoops, AccumulatorsKeepLoopsApartWhereFusingWouldChangeThem) {
  auto loopsLeft = [](const Program &p) {
    std::string text = print(p);
    return count(text, "for j");
  };
  Program readsTerms =
      exponentialsThenSum(ForKind::Vectorize, ForKind::Vectorize,
                          {store(2, intConst(0), load(1, intConst(0), ElemKind::F32))});
  fuseLoops(readsTerms);
  EXPECT_EQ(loopsLeft(readsTerms), 2) << print(readsTerms);

  Program readsSum = exponentialsThenSum();
  readsSum.body[0]->body = {store(1, var("j", ElemKind::Index), var("acc", ElemKind::F32))};
  // `acc` is declared after the first loop here; declared before it, as below, both touch it.
  std::swap(readsSum.body[0], readsSum.body[2]);
  fuseLoops(readsSum);
  EXPECT_EQ(loopsLeft(readsSum), 2) << print(readsSum);

  Program bothAccumulate = exponentialsThenSum();
  std::swap(bothAccumulate.body[0], bothAccumulate.body[2]);
  bothAccumulate.body[2]->body.push_back(
      assign("acc", binary(OpKind::AddF, var("acc", ElemKind::F32), floatConst(1, ElemKind::F32))));
  fuseLoops(bothAccumulate);
  EXPECT_EQ(loopsLeft(bothAccumulate), 2) << print(bothAccumulate);

  Program parallel = exponentialsThenSum(ForKind::Parallel, ForKind::Parallel);
  parallel.body[0]->bound = parallel.body[3]->bound = intConst(1);
  fuseLoops(parallel);
  EXPECT_EQ(loopsLeft(parallel), 2) << print(parallel);

  Program serialSum = exponentialsThenSum(ForKind::Vectorize, ForKind::Serial);
  fuseLoops(serialSum);
  EXPECT_EQ(loopsLeft(serialSum), 2) << print(serialSum);
  EXPECT_THAT(print(serialSum), testing::HasSubstr("for j in 0..8 vectorized")) << print(serialSum);
}

// A softmax's exponentials and their sum are one loop over each row (FuseLoops) and the result
// still matches the oracle.
TEST(FuseLoops, SoftmaxSumsItsExponentialsAsItMakesThem) {
  Module m = context().loadString(kRowSoftmaxModule, "softmax.mlir");
  Function fn = m.function("softmax");
  std::string loops = fn.emit(Stage::Loops, {"7x300xf32"});
  // Three loops over a row's columns: the maximum, the exponentials with their sum, the division.
  EXPECT_EQ(count(loops, "in 0..300 vectorized {"), 3) << loops;
  // The loop that stores the exponentials adds them up before it ends.
  const size_t exp = loops.find("= exp(");
  ASSERT_NE(exp, std::string::npos) << loops;
  EXPECT_LT(loops.find("+[reassoc]", exp), loops.find("}", exp)) << loops;
  const int64_t rows = 7, cols = 300;
  std::vector<float> x = oracle::randomFloats(rows * cols, 3, -4.0f, 4.0f);
  std::vector<double> expected(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = &x[size_t(r * cols)];
    double most = *std::max_element(row, row + cols), sum = 0;
    for (int64_t j = 0; j < cols; ++j)
      sum += std::exp(double(row[j]) - most);
    for (int64_t j = 0; j < cols; ++j)
      expected[size_t(r * cols + j)] = std::exp(double(row[j]) - most) / sum;
  }
  Tensor y = fn({Tensor::borrow(x.data(), DType::F32, {rows, cols})})[0];
  // exp is within a few ulp, the f32 sum of 300 terms of at most 1 adds up to 300 roundings of
  // 2^-24 of it, and the division one more: rtol 1e-5 holds them with room to spare.
  oracle::Comparison cmp = oracle::compare(y.as<float>(), expected, 1e-5, 1e-12);
  EXPECT_TRUE(cmp.ok) << cmp.describe();
}

// rms_norm's sum of squares, its root and its scaling become one pass over each row.
TEST(FuseLoops, RmsNormIsOnePassPerRow) {
  Function rms =
      context().load(componentPath("normalization/rms_norm.mlir")).function("rms_norm_linalg");
  std::string loops = rms.emit(Stage::Loops, {"32x4096xf32", "4096xf32", "f32"});
  size_t topLevelLoops = 0;
  for (size_t at = loops.find("\n  for "); at != std::string::npos;
       at = loops.find("\n  for ", at + 1))
    ++topLevelLoops;
  EXPECT_EQ(topLevelLoops, 1u) << loops;
}

} // namespace
} // namespace frank::test
