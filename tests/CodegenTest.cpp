// Code generation choices visible in the LLVM IR: what a parallel loop's context carries, which
// loops the vectorizer may widen, and frank's own math functions.
#include "Engine.h"
#include "TestSupport.h"

#include <cmath>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <regex>
#include <string>

namespace frank::test {
namespace {

// mul_mat_id: contraction.ranks with 8 experts (chosen by hand, the slots in order unless
// `ranks` says otherwise), contraction.gather with 4
// (a vector of 4 f32 is too short for ranks). At 30 tokens the 60 pairs take 64 slots in order,
// packed into temporaries.
std::string mulMatIdIr(Stage stage, int experts = 8, int tokens = 32,
                       const std::string &ranks = "ranks=in-order") {
  Context forced(withConfig("pipeline=contraction.ranks," + ranks));
  return (experts == 8 ? forced : context())
      .load(componentPath("moe/mul_mat_id.mlir"))
      .function("mul_mat_id")
      .emit(stage, {fmt::format("64x32x{}xf32", experts), fmt::format("32x2x{}xf32", tokens),
                    fmt::format("2x{}xi32", tokens)});
}

// The parameters of `define ... @NAME(...)`.
std::string paramsOf(const std::string &ir, const std::string &name) {
  size_t at = ir.find("@" + name + "(");
  if (at == std::string::npos)
    return "";
  size_t open = at + name.size() + 2;
  return ir.substr(open, ir.find(')', open) - open);
}

// A parallel loop's context carries the buffers its body uses, not all 7 (10 by choice): the
// ranks tiles read the weights, the slots' choices and the packed input and write the slots
// (four pointers, then dims, scalars and status), so a kernel with many temporaries does not
// fill a field per buffer before each loop.
TEST(Codegen, ParallelLoopsCarryOnlyTheBuffersTheyUse) {
  for (const char *ranks : {"in-order", "by-choice"}) {
    SCOPED_TRACE(ranks);
    const bool byChoice = std::string(ranks) == "by-choice";
    std::string ir = mulMatIdIr(Stage::LLVM, 8, 30, fmt::format("ranks={}", ranks));
    std::string tiles = paramsOf(ir, "frank_kernel.m_block.body");
    ASSERT_FALSE(tiles.empty()) << ir;
    EXPECT_EQ(count(tiles, "ptr noalias"), 4 + 3) << tiles;
    EXPECT_EQ(count(tiles, "ptr noalias readonly"), 1) << tiles; // the weights
    EXPECT_EQ(count(paramsOf(ir, "frank_kernel.body"), "ptr noalias"), (byChoice ? 10 : 7) + 3);
  }
}

// The loops that group and pack the pairs of contraction.gather address memory through the ids
// they load: they stay scalar, where widening would make each access one scalar access per lane.
TEST(Codegen, LoopsAddressingThroughLoadsStayScalar) {
  EXPECT_THAT(mulMatIdIr(Stage::Loops, 4), testing::HasSubstr("contraction.gather"));
  EXPECT_THAT(mulMatIdIr(Stage::LLVM, 4),
              testing::HasSubstr("!{!\"llvm.loop.vectorize.enable\", i1 false}"));
  EXPECT_THAT(mulMatIdIr(Stage::OptimizedLLVM, 4),
              testing::Not(testing::ContainsRegex("extractelement <[0-9]+ x i64>")));
}

// A vectorized loop that computes exp asks the vectorizer for `expInterleave` vectors an
// iteration (exp is a long chain of dependent operations; with one vector an iteration, the
// out-of-order window holds too few of them); other loops, and expInterleave 0, leave the choice
// to the vectorizer. Both loops compute what they say.
TEST(Codegen, ExpLoopsInterleaveAsAsked) {
  using namespace loops;
  const int64_t n = 1024;
  for (int interleave : {0, 4}) {
    SCOPED_TRACE(fmt::format("expInterleave {}", interleave));
    Program program;
    program.name = fmt::format("exp_interleave_{}", interleave);
    program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(n), nullptr},
                       {"e", ElemKind::F32, BufferRole::Output, 0, intConst(n), nullptr},
                       {"twice", ElemKind::F32, BufferRole::Output, 1, intConst(n), nullptr}};
    program.workspaceBytes = intConst(0);
    Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
    program.body = {forLoop("i", intConst(n), ForKind::Vectorize,
                            {store(1, i, unary(OpKind::Exp, load(0, i, ElemKind::F32)))}),
                    forLoop("j", intConst(n), ForKind::Vectorize,
                            {store(2, j,
                                   binary(OpKind::MulF, load(0, j, ElemKind::F32),
                                          floatConst(2, ElemKind::F32)))})};
    CodegenOptions options;
    options.expInterleave = interleave;
    std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
    EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 4}"), interleave ? 1 : 0) << ir;
    jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
    std::vector<float> x(n), e(n), twice(n);
    for (int64_t k = 0; k < n; ++k)
      x[size_t(k)] = float(k % 97) / 8 - 6;
    void *buffers[] = {x.data(), e.data(), twice.data()};
    int64_t status[3] = {0, 0, 0};
    kernel(buffers, nullptr, nullptr, nullptr, status);
    for (int64_t k = 0; k < n; ++k) {
      // frank's exp is within about 2 ulp (MathFunctions.cpp); 4 ulp of slack.
      EXPECT_NEAR(e[size_t(k)], std::exp(double(x[size_t(k)])),
                  4 * std::exp(double(x[size_t(k)])) * 0x1p-23)
          << "x = " << x[size_t(k)];
      EXPECT_EQ(twice[size_t(k)], 2 * x[size_t(k)]);
    }
  }
}

// An interleaved exp loop whose extent may leave part of four vectors (a runtime length; a
// causal softmax's rows, multiples of 16) runs that part in a second loop of one vector an
// iteration, so that the scalar exp takes fewer than one vector's elements. A constant multiple
// of four vectors keeps one loop. Every element is exp's, at lengths around the steps.
TEST(Codegen, ExpLoopsOfRuntimeLengthsLeaveTheScalarLessThanAVector) {
  using namespace loops;
  const int64_t most = 80;
  Program program;
  program.name = "exp_runtime_length";
  program.numDimParams = 1;
  program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(most), nullptr},
                     {"e", ElemKind::F32, BufferRole::Output, 0, intConst(most), nullptr}};
  program.workspaceBytes = intConst(0);
  Expr i = var("i", ElemKind::Index);
  program.body = {forLoop("i", dimParam(0), ForKind::Vectorize,
                          {store(1, i, unary(OpKind::Exp, load(0, i, ElemKind::F32)))})};
  CodegenOptions options;
  options.expInterleave = 4;
  std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
  EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 4}"), 1) << ir;
  EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 1}"), 1) << ir;
  EXPECT_THAT(ir, testing::HasSubstr("%i.whole = sub i64")) << ir;
  jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
  std::vector<float> x(most);
  for (int64_t k = 0; k < most; ++k)
    x[size_t(k)] = float(k % 29) / 4 - 3;
  for (int64_t n : {0, 1, 7, 8, 16, 31, 32, 33, 48, 63, 64, 80}) {
    std::vector<float> e(most, -1.0f);
    void *buffers[] = {x.data(), e.data()};
    int64_t dims[] = {n};
    int64_t status[3] = {0, 0, 0};
    kernel(buffers, dims, nullptr, nullptr, status);
    for (int64_t k = 0; k < most; ++k) {
      if (k >= n) {
        EXPECT_EQ(e[size_t(k)], -1.0f) << "past the length " << n << " at " << k;
        continue;
      }
      // frank's exp is within about 2 ulp (MathFunctions.cpp); 4 ulp of slack.
      const double want = std::exp(double(x[size_t(k)]));
      EXPECT_NEAR(e[size_t(k)], want, 4 * want * 0x1p-23) << "length " << n << " at " << k;
    }
  }
  // 1024 elements are whole steps of four vectors: one loop.
  program.body[0]->value = intConst(1024);
  program.buffers[0].numElements = program.buffers[1].numElements = intConst(1024);
  ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
  EXPECT_EQ(count(ir, "llvm.loop.interleave.count"), 1) << ir;
  EXPECT_THAT(ir, testing::Not(testing::HasSubstr("i.whole"))) << ir;
}

// Any vectorized loop of a runtime length (a partly specialized softmax's rows) takes four
// vectors an iteration over the multiples of four, then one vector an iteration over the rest:
// the vectorizer's own epilogue would take half vectors and leave the rest of them to its scalar
// loop. At vectorBits 0 the vectorizer keeps the choice, in one loop. Both the elementwise loop
// and the sum compute what they say at every length around the steps, at either vector width.
TEST(Codegen, VectorizedLoopsOfRuntimeLengthsRunTheRestOneVectorAnIteration) {
  using namespace loops;
  const int64_t most = 160;
  Program program;
  program.numDimParams = 1;
  program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(most), nullptr},
                     {"twice", ElemKind::F32, BufferRole::Output, 0, intConst(most), nullptr},
                     {"sum", ElemKind::F32, BufferRole::Output, 1, intConst(1), nullptr}};
  program.workspaceBytes = intConst(0);
  Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
  Expr acc = var("acc", ElemKind::F32);
  program.body = {
      forLoop(
          "i", dimParam(0), ForKind::Vectorize,
          {store(1, i,
                 binary(OpKind::MulF, load(0, i, ElemKind::F32), floatConst(2, ElemKind::F32)))}),
      local("acc", floatConst(0, ElemKind::F32)),
      forLoop("j", dimParam(0), ForKind::Vectorize,
              {assign("acc", binary(OpKind::AddF, acc, load(0, j, ElemKind::F32), true))}),
      store(2, intConst(0), acc)};
  for (int bits : {512, 256, 0}) {
    SCOPED_TRACE(fmt::format("vectorBits {}", bits));
    CodegenOptions options;
    options.vectorBits = bits;
    options.expInterleave = 0;
    program.name = fmt::format("runtime_length_loops_{}", bits);
    std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
    const int64_t step = 4 * bits / 32;
    // The hints are uniqued: one of each, which both loops' parts name.
    EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 4}"), bits ? 1 : 0) << ir;
    EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 1}"), bits ? 1 : 0) << ir;
    EXPECT_EQ(count(ir, "!llvm.loop !"), bits ? 4 : 0) << ir;
    if (bits) {
      EXPECT_THAT(ir, testing::HasSubstr("%i.whole = sub i64")) << ir;
      EXPECT_THAT(ir, testing::HasSubstr("%j.whole = sub i64")) << ir;
      EXPECT_EQ(count(ir, fmt::format(", {}\n", step)), 2) << ir; // the srems by the step
    } else {
      EXPECT_THAT(ir, testing::Not(testing::HasSubstr(".whole"))) << ir;
    }
    jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
    std::vector<float> x(most);
    for (int64_t k = 0; k < most; ++k)
      x[size_t(k)] = float(k % 23) - 11;
    for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 48, 63, 64, 65, 80, 112, 127, 128, 129, 160}) {
      std::vector<float> twice(most, -1.0f);
      float sum = -1.0f;
      void *buffers[] = {x.data(), twice.data(), &sum};
      int64_t dims[] = {n};
      int64_t status[3] = {0, 0, 0};
      kernel(buffers, dims, nullptr, nullptr, status);
      double want = 0;
      for (int64_t k = 0; k < most; ++k) {
        EXPECT_EQ(twice[size_t(k)], k < n ? 2 * x[size_t(k)] : -1.0f)
            << "length " << n << " at " << k;
        if (k < n)
          want += x[size_t(k)];
      }
      // Small integers: every partial sum is exact, in any order.
      EXPECT_EQ(sum, float(want)) << "length " << n;
    }
  }
}

// Two vectorized loops of `of(x[i])` over input x: i's of 128 trips into a, j's of `longTrips`
// into b.
loops::Program shortAndLongLoops(const char *name, int64_t longTrips,
                                 const std::function<loops::Expr(loops::Expr)> &of) {
  using namespace loops;
  const int64_t shortTrips = 128;
  Program program;
  program.name = name;
  program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(longTrips), nullptr},
                     {"a", ElemKind::F32, BufferRole::Output, 0, intConst(shortTrips), nullptr},
                     {"b", ElemKind::F32, BufferRole::Output, 1, intConst(longTrips), nullptr}};
  program.workspaceBytes = intConst(0);
  auto loop = [&](int buffer, int64_t trips, const char *var) {
    Expr i = loops::var(var, ElemKind::Index);
    return forLoop(var, intConst(trips), ForKind::Vectorize,
                   {store(buffer, i, of(load(0, i, ElemKind::F32)))});
  };
  program.body = {loop(1, shortTrips, "i"), loop(2, longTrips, "j")};
  return program;
}

// A vectorized loop of a few vectors (attention's softmax rows of 128) asks for no interleaving,
// which would only multiply its IR; a long one leaves the choice to the vectorizer. Both compute
// what they say.
TEST(Codegen, ShortVectorizedLoopsAreNotInterleaved) {
  using namespace loops;
  const int64_t shortTrips = 128, longTrips = 4096;
  Program program = shortAndLongLoops("short_and_long_loops", longTrips, [](Expr x) {
    return binary(OpKind::MulF, std::move(x), floatConst(2, ElemKind::F32));
  });
  std::string ir = jit::Engine::instance().emit(program, {}, jit::Output::LLVM);
  // The short loop's latch carries the hint, the long one's no loop metadata at all. Both test
  // their index at the bottom, and neither is guarded: their bounds say each runs.
  EXPECT_THAT(ir, testing::HasSubstr("!{!\"llvm.loop.interleave.count\", i32 1}"));
  EXPECT_THAT(ir, testing::HasSubstr("br i1 %i.more, label %i.body, label %i.exit, !llvm.loop"));
  EXPECT_THAT(ir, testing::HasSubstr("br i1 %j.more, label %j.body, label %j.exit\n")) << ir;
  EXPECT_THAT(ir, testing::Not(testing::HasSubstr(".entered"))) << ir;
  jit::EntryFn kernel = jit::Engine::instance().compile(program, {});
  std::vector<float> x(longTrips), a(shortTrips), b(longTrips);
  for (int64_t k = 0; k < longTrips; ++k)
    x[size_t(k)] = float(k % 101) - 50;
  void *buffers[] = {x.data(), a.data(), b.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (int64_t k = 0; k < longTrips; ++k) {
    if (k < shortTrips) {
      EXPECT_EQ(a[size_t(k)], 2 * x[size_t(k)]);
    }
    EXPECT_EQ(b[size_t(k)], 2 * x[size_t(k)]);
  }
}

// Short exp loops too (attention's softmax rows of 128) take one vector an iteration whatever
// expInterleave asks, in one loop; a long one takes expInterleave's. Both are exp.
TEST(Codegen, ShortExpLoopsAreNotInterleaved) {
  using namespace loops;
  const int64_t shortTrips = 128, longTrips = 1024;
  Program program = shortAndLongLoops("short_and_long_exp_loops", longTrips,
                                      [](Expr x) { return unary(OpKind::Exp, std::move(x)); });
  CodegenOptions options;
  options.expInterleave = 4;
  std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
  EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 1}"), 1) << ir;
  EXPECT_EQ(count(ir, "!{!\"llvm.loop.interleave.count\", i32 4}"), 1) << ir;
  EXPECT_THAT(ir, testing::Not(testing::HasSubstr("i.whole"))) << ir;
  jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
  std::vector<float> x(longTrips), a(shortTrips), b(longTrips);
  for (int64_t k = 0; k < longTrips; ++k)
    x[size_t(k)] = float(k % 89) / 8 - 5;
  void *buffers[] = {x.data(), a.data(), b.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (int64_t k = 0; k < longTrips; ++k) {
    // frank's exp is within about 2 ulp (MathFunctions.cpp); 4 ulp of slack.
    const double want = std::exp(double(x[size_t(k)]));
    if (k < shortTrips) {
      EXPECT_NEAR(a[size_t(k)], want, 4 * want * 0x1p-23) << "short loop at " << k;
    }
    EXPECT_NEAR(b[size_t(k)], want, 4 * want * 0x1p-23) << "long loop at " << k;
  }
}

// An address whose terms change in different loops is summed a loop at a time, outermost
// first, a GEP each, with its constant last: x[i * 33 + j + 1] is x + i * 33, hoistable out of
// j's loop, then + (j + 1), which becomes the load's displacement. An address of one loop's
// terms stays one inbounds GEP. Both compute what they say, past the buffers' first rows.
TEST(Codegen, AddressesAreSummedOneLoopAtATime) {
  using namespace loops;
  const int64_t rows = 8, columns = 32, stride = columns + 1;
  Program program;
  program.name = "addresses_by_loop";
  program.buffers = {
      {"x", ElemKind::F32, BufferRole::Input, 0, intConst(rows * stride), nullptr},
      {"y", ElemKind::F32, BufferRole::Output, 0, intConst(rows * columns), nullptr}};
  program.workspaceBytes = intConst(0);
  Expr i = var("i", ElemKind::Index), j = var("j", ElemKind::Index);
  Expr read = load(0, add(add(mul(i, intConst(stride)), j), intConst(1)), ElemKind::F32);
  program.body = {
      forLoop("i", intConst(rows), ForKind::Serial,
              {forLoop("j", intConst(columns), ForKind::Serial,
                       {store(1, add(mul(i, intConst(columns)), j),
                              binary(OpKind::MulF, read, floatConst(2, ElemKind::F32)))})})};
  std::string ir = jit::Engine::instance().emit(program, {}, jit::Output::LLVM);
  std::smatch outer;
  ASSERT_TRUE(
      std::regex_search(ir, outer, std::regex(R"((%[\w.]+) = getelementptr float, ptr %x, i64 %)")))
      << ir;
  EXPECT_THAT(ir, testing::ContainsRegex("getelementptr float, ptr " + outer[1].str() + ", i64 %"));
  // y's index, i * 32 + j, reads both loops too; no address of one loop here to stay inbounds.
  EXPECT_THAT(ir, testing::Not(testing::HasSubstr("getelementptr inbounds float, ptr %x")));
  jit::EntryFn kernel = jit::Engine::instance().compile(program, {});
  std::vector<float> x(rows * stride), y(rows * columns);
  for (size_t k = 0; k < x.size(); ++k)
    x[k] = float(k % 61) - 30;
  void *buffers[] = {x.data(), y.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c)
      EXPECT_EQ(y[size_t(r * columns + c)], 2 * x[size_t(r * stride + c + 1)]) << r << ", " << c;
}

// mul_mat_id at 32 tokens (64 pairs, 8 experts) in contraction.ranks for `cpu`, its slots
// `ranks` (in-order or by-choice).
const std::vector<std::string> kRanksTypes = {"64x32x8xf32", "32x2x32xf32", "2x32xi32"};
Function ranksFor(const char *cpu, const std::string &ranks) {
  return Context(forCpu(cpu, "pipeline=contraction.ranks,ranks=" + ranks))
      .load(componentPath("moe/mul_mat_id.mlir"))
      .function("mul_mat_id");
}

// A contraction.ranks tile permutes each row's vector of choices by each rank's choices with
// one vpermps per rank and row (4x2 tile with AVX2's 16 registers: 8; with AVX-512's, a 4x4
// tile of two k steps: 32), where a permute lane by lane would be 8 or 16 extracts and inserts
// each. With two k steps each k's 8 choices are a vector of their own, spread over the 16
// slots' lanes by the permute itself: widening them takes no instruction. Both targets, on any
// host.
TEST(Codegen, RanksPermuteEachRowWithOneInstruction) {
  for (auto [cpu, wide] : {std::pair{kAvx512Cpu, true}, std::pair{kAvx2Cpu, false}}) {
    SCOPED_TRACE(cpu);
    Function fn = ranksFor(cpu, "in-order");
    std::string loops = fn.emit(Stage::Loops, kRanksTypes);
    const std::string tile = wide ? "tile=4x4 lanes=16" : "tile=4x2 lanes=8";
    EXPECT_THAT(loops, testing::HasSubstr("contraction.ranks m=d0 n=- k=d3 " + tile)) << loops;
    // With 16 lanes, a step takes two k, permuting each row's two vectors for each of its slots'.
    const int permutes = wide ? 32 : 8;
    EXPECT_EQ(count(loops, "permute("), permutes) << loops;
    std::string assembly = fn.emit(Stage::Assembly, kRanksTypes);
    // The 512-bit permute may come out in the integer domain (vpermd), which does the same.
    EXPECT_EQ(count(assembly, "vpermps") + count(assembly, "vpermd"), permutes) << assembly;
    EXPECT_EQ(count(assembly, "vinsertps"), 0) << assembly;
    EXPECT_EQ(count(assembly, "vinsertf"), 0) << assembly;
  }
}

// By choice, lane j of a vector of slots is expert j mod 8: the tiles of the ranks of even
// routing (here 8) multiply each row's vector of experts as it is loaded (AVX-512: loaded twice
// over, into 16 lanes, by one broadcast), with no permute; only the tiles of the pairs past
// them permute, one vpermps a row and vector of slots.
TEST(Codegen, RanksByChoicePermuteOnlyTheirOverflow) {
  for (auto [cpu, wide] : {std::pair{kAvx512Cpu, true}, std::pair{kAvx2Cpu, false}}) {
    SCOPED_TRACE(cpu);
    Function fn = ranksFor(cpu, "by-choice");
    std::string loops = fn.emit(Stage::Loops, kRanksTypes);
    const int lanes = wide ? 16 : 8;
    const size_t byChoice = loops.find(fmt::format("lanes={} ranks=by-choice\n", lanes));
    const size_t overflow = loops.find("for rank_block in 0..minsi((permuted_vectors / ");
    ASSERT_NE(byChoice, std::string::npos) << loops;
    ASSERT_NE(overflow, std::string::npos) << loops;
    EXPECT_LT(byChoice, overflow) << loops;
    EXPECT_EQ(count(loops.substr(byChoice, overflow - byChoice), "permute("), 0) << loops;
    EXPECT_THAT(loops.substr(byChoice, overflow - byChoice),
                testing::HasSubstr(
                    fmt::format("let prod: f32x{} = ({} * x)", lanes, wide ? "repeated" : "t")));
    const int permutes = count(loops, "permute(");
    EXPECT_GT(permutes, 0) << loops;
    std::string assembly = fn.emit(Stage::Assembly, kRanksTypes);
    EXPECT_EQ(count(assembly, "vpermps") + count(assembly, "vpermd"), permutes) << assembly;
    if (wide) // each row's 8 experts, loaded into both halves of a vector
      EXPECT_GT(count(assembly, "vbroadcastf64x4") + count(assembly, "vbroadcastf32x8"), 0)
          << assembly;
  }
}

// Permute: lane i of the result is lane indices[i] of the vector, repeats allowed, both as one
// vpermps (256 and 512 bits) and lane by lane (no permute instruction, or 64-bit lanes), from a
// vector of as many lanes or of half as many (spread over the indices' lanes).
TEST(Codegen, PermutePicksLanesByIndexWithAndWithoutVpermps) {
  const std::string features = jit::Engine::instance().cpuFeatures();
  std::vector<int> widths = {0};
  if (features.find("+avx2") != std::string::npos)
    widths.push_back(256);
  if (features.find("+avx512f") != std::string::npos)
    widths.push_back(512);
  for (ElemKind elem : {ElemKind::F32, ElemKind::F64})
    for (int lanes : {8, 16})
      for (int source : {lanes, lanes / 2})
        for (int permuteBits : widths) {
          SCOPED_TRACE(fmt::format("{} x {} from {}, permuteBits {}", elemName(elem), lanes, source,
                                   permuteBits));
          using namespace loops;
          Program program;
          program.name =
              fmt::format("permute_{}_{}_{}_{}", elemName(elem), lanes, source, permuteBits);
          program.buffers = {
              {"v", elem, BufferRole::Input, 0, intConst(source), nullptr},
              {"index", ElemKind::I32, BufferRole::Input, 1, intConst(lanes), nullptr},
              {"out", elem, BufferRole::Output, 0, intConst(lanes), nullptr}};
          program.workspaceBytes = intConst(0);
          program.body = {store(2, intConst(0),
                                permute(load(0, intConst(0), elem, source),
                                        load(1, intConst(0), ElemKind::I32, lanes)))};
          CodegenOptions options;
          options.permuteBits = permuteBits;
          const bool oneInstruction = elemBits(elem) == 32 && lanes * 32 <= permuteBits;
          std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
          EXPECT_EQ(ir.find("llvm.x86.avx") != std::string::npos, oneInstruction) << ir;
          jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
          std::vector<double> v(source), out(lanes, -1);
          std::vector<float> vf(source), outf(lanes, -1);
          std::vector<int32_t> index(lanes);
          for (int i = 0; i < source; ++i)
            v[i] = vf[i] = float(10 + i);
          for (int i = 0; i < lanes; ++i)
            index[i] = (i * 5 + 3) % lanes / 2; // lanes below half, most twice
          const bool f32 = elem == ElemKind::F32;
          void *buffers[] = {f32 ? (void *)vf.data() : v.data(), index.data(),
                             f32 ? (void *)outf.data() : out.data()};
          int64_t status[3] = {0, 0, 0};
          kernel(buffers, nullptr, nullptr, nullptr, status);
          for (int i = 0; i < lanes; ++i)
            EXPECT_EQ(f32 ? double(outf[i]) : out[i], 10.0 + index[i]) << "lane " << i;
        }
}

// transposeInRegisters: L rows of L lanes (L of 2 to 16, f32 and f64) come out as the columns,
// bit for bit, through log2(L) rounds of L two-vector shuffles; the shuffles print with their
// lanes.
TEST(Codegen, ShufflesTransposeASquareInRegisters) {
  for (ElemKind elem : {ElemKind::F32, ElemKind::F64})
    for (int lanes : {2, 4, 8, 16}) {
      SCOPED_TRACE(fmt::format("{} x {}", elemName(elem), lanes));
      using namespace loops;
      Program program;
      program.name = fmt::format("transpose_{}_{}", elemName(elem), lanes);
      program.buffers = {{"m", elem, BufferRole::Input, 0, intConst(lanes * lanes), nullptr},
                         {"t", elem, BufferRole::Output, 0, intConst(lanes * lanes), nullptr}};
      program.workspaceBytes = intConst(0);
      std::vector<Expr> rows;
      for (int j = 0; j < lanes; ++j)
        rows.push_back(load(0, intConst(j * lanes), elem, lanes));
      int names = 0;
      rows = transposeInRegisters(rows, program.body,
                                  [&] { return fmt::format("swapped_{}", names++); });
      EXPECT_EQ(names, lanes * std::countr_zero(unsigned(lanes)));
      for (int i = 0; i < lanes; ++i)
        program.body.push_back(store(1, intConst(i * lanes), rows[size_t(i)]));
      if (lanes == 4) {
        EXPECT_THAT(print(program), testing::HasSubstr("shuffle(m[0 : 4], m[8 : 4], [0 1 4 5])"))
            << print(program);
      }
      jit::EntryFn kernel = jit::Engine::instance().compile(program, {});
      std::vector<double> m(size_t(lanes * lanes)), t(m.size(), -1);
      std::vector<float> mf(m.size()), tf(m.size(), -1);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = mf[i] = float(i) + 0.25f;
      const bool f32 = elem == ElemKind::F32;
      void *buffers[] = {f32 ? (void *)mf.data() : m.data(), f32 ? (void *)tf.data() : t.data()};
      int64_t status[3] = {0, 0, 0};
      kernel(buffers, nullptr, nullptr, nullptr, status);
      for (int i = 0; i < lanes; ++i)
        for (int j = 0; j < lanes; ++j)
          EXPECT_EQ(f32 ? double(tf[size_t(i * lanes + j)]) : t[size_t(i * lanes + j)],
                    m[size_t(j * lanes + i)])
              << i << ", " << j;
    }
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

// A kernel of three heavy nests: out[i] = x[i] * (1 + 2 + ... + 110) for i < 64; a check that
// every id is below 8, then out[64 + i] = x[i] * 2 in the same run (it weighs too little alone);
// and out[128] = 7. Each run is outlined (two `.nest` functions) where `outline` allows it.
loops::Program threeNests(bool outline) {
  using namespace loops;
  Program program;
  program.name = fmt::format("three_nests_{}", outline);
  program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(64), nullptr},
                     {"ids", ElemKind::I32, BufferRole::Input, 1, intConst(4), nullptr},
                     {"out", ElemKind::F32, BufferRole::Output, 0, intConst(129), nullptr}};
  program.workspaceBytes = intConst(0);
  program.checks = {{Location{}, "id {} is not below {}"}};
  Expr x = load(0, var("i", ElemKind::Index), ElemKind::F32);
  Expr sum = x;
  for (int k = 2; k <= 110; ++k)
    sum = binary(OpKind::AddF, sum, binary(OpKind::MulF, x, floatConst(k, ElemKind::F32)));
  Expr id = cast(OpKind::IndexCast, load(1, var("j", ElemKind::Index), ElemKind::I32),
                 ElemKind::Index);
  Expr sum2 = load(0, var("k", ElemKind::Index), ElemKind::F32);
  for (int k = 1; k < 160; ++k)
    sum2 = binary(OpKind::MaximumF, sum2, floatConst(-k, ElemKind::F32));
  program.body = {
      forLoop("i", intConst(64), ForKind::Serial, {store(2, var("i", ElemKind::Index), sum)}),
      forLoop("j", intConst(4), ForKind::Serial,
              {check(cmp("ult", id, intConst(8)), 0, id, intConst(8))}),
      forLoop("k", intConst(64), ForKind::Serial,
              {store(2, add(var("k", ElemKind::Index), intConst(64)),
                     binary(OpKind::MulF, sum2, floatConst(2, ElemKind::F32)))}),
      store(2, intConst(128), floatConst(7, ElemKind::F32))};
  return program;
}

// Outlined nests compute what the inline statements do, and a check that fails in a nest stops
// the kernel there: the statements after it, in the nest and after the call, do not run.
TEST(Codegen, OutlinedNestsStopWhereTheirCheckFails) {
  for (bool outline : {true, false}) {
    SCOPED_TRACE(outline ? "outlined" : "inline");
    loops::Program program = threeNests(outline);
    CodegenOptions options;
    options.outlineNests = outline;
    std::string ir = jit::Engine::instance().emit(program, options, jit::Output::LLVM);
    EXPECT_EQ(count(ir, "define internal void @" + program.name + ".i.nest("), outline ? 1 : 0);
    EXPECT_EQ(count(ir, "define internal void @" + program.name + ".j.nest("), outline ? 1 : 0);
    EXPECT_EQ(count(ir, ".nest("), outline ? 4 : 0) << ir; // two definitions, two calls
    jit::EntryFn kernel = jit::Engine::instance().compile(program, options);
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i)
      x[i] = float(i % 7) - 3;
    for (int32_t bad : {-1, 3, 8}) {
      std::vector<int32_t> ids = {1, 7, 0, 5};
      if (bad != 3)
        ids[2] = bad;
      std::vector<float> out(129, -1);
      void *buffers[] = {x.data(), ids.data(), out.data()};
      int64_t status[3] = {0, 0, 0};
      kernel(buffers, nullptr, nullptr, nullptr, status);
      const bool fails = bad != 3;
      EXPECT_EQ(status[0], fails ? 1 : 0) << "id " << bad;
      if (fails) {
        EXPECT_EQ(status[1], bad);
        EXPECT_EQ(status[2], 8);
      }
      for (int i = 0; i < 64; ++i) {
        ASSERT_EQ(out[i], x[i] * 6105.0f) << i; // 1 + 2 + ... + 110, exact in f32
        ASSERT_EQ(out[64 + i], fails ? -1.0f : std::max(x[i], -1.0f) * 2) << 64 + i;
      }
      EXPECT_EQ(out[128], fails ? -1.0f : 7.0f);
    }
  }
}

// Parallel loops whose bodies differ only in names and buffers share one chunk function, each
// passing its own buffers: out1 = x * 2 and out2 = y * 2 (the MoE block's gate and up
// projections, in small), not out3 = x * 3 nor out4 = ints * 2.
TEST(Codegen, ParallelLoopsOfOneShapeShareTheirChunk) {
  using namespace loops;
  Program program;
  program.name = "one_shape";
  const int64_t n = 1 << 16; // parallel: each chunk at least kMinChunkElements
  program.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, intConst(n), nullptr},
                     {"y", ElemKind::F32, BufferRole::Input, 1, intConst(n), nullptr},
                     {"ints", ElemKind::I32, BufferRole::Input, 2, intConst(n), nullptr},
                     {"out1", ElemKind::F32, BufferRole::Output, 0, intConst(n), nullptr},
                     {"out2", ElemKind::F32, BufferRole::Output, 1, intConst(n), nullptr},
                     {"out3", ElemKind::F32, BufferRole::Output, 2, intConst(n), nullptr},
                     {"out4", ElemKind::I32, BufferRole::Output, 3, intConst(n), nullptr}};
  program.workspaceBytes = intConst(0);
  auto times = [&](const char *i, int from, int to, double factor) {
    ElemKind elem = program.buffers[size_t(from)].elem;
    Expr k = elem == ElemKind::F32 ? floatConst(factor, elem) : intConst(int64_t(factor), elem);
    Stmt loop = forLoop(i, intConst(n), ForKind::Parallel,
                        {store(to, var(i, ElemKind::Index),
                               binary(elem == ElemKind::F32 ? OpKind::MulF : OpKind::MulI,
                                      load(from, var(i, ElemKind::Index), elem), k))});
    loop->bound = intConst(n / 4);
    return loop;
  };
  program.body = {times("i", 0, 3, 2), times("j", 1, 4, 2), times("k", 0, 5, 3),
                  times("l", 2, 6, 2)};
  std::string ir = jit::Engine::instance().emit(program, CodegenOptions{}, jit::Output::LLVM);
  EXPECT_EQ(count(ir, "call void @frank_parallel_for("), 4) << ir;
  EXPECT_EQ(count(ir, "define internal void @one_shape.i.chunk("), 1) << ir;
  EXPECT_EQ(count(ir, ".chunk("), 3) << ir; // i (twice), k, l
  EXPECT_EQ(count(ir, "call void @frank_parallel_for(ptr @one_shape.i.chunk"), 2) << ir;
  jit::EntryFn kernel = jit::Engine::instance().compile(program, CodegenOptions{});
  std::vector<float> x(n), y(n), out1(n), out2(n), out3(n);
  std::vector<int32_t> ints(n), out4(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = float(i % 101);
    y[i] = -float(i % 37);
    ints[i] = int32_t(i % 1000);
  }
  void *buffers[] = {x.data(),    y.data(),    ints.data(), out1.data(),
                     out2.data(), out3.data(), out4.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, nullptr, status);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out1[i], x[i] * 2) << i;
    ASSERT_EQ(out2[i], y[i] * 2) << i;
    ASSERT_EQ(out3[i], x[i] * 3) << i;
    ASSERT_EQ(out4[i], ints[i] * 2) << i;
  }
}

} // namespace
} // namespace frank::test
