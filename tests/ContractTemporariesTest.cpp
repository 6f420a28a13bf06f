// contract-temporaries: which temporaries keep one row per loop (golden tests on hand-built
// loop IR, no JIT), and, compiled, that a contracted program computes what the original did.
#include "loops/ContractTemporaries.h"
#include "LoopProgramSupport.h"
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace frank::test {
namespace {

using namespace frank::loops;

// x, y are [P, R, C] = [2, 4, 16]; per row r of part p (the parallel loop), a softmax-like
// chain: s = 2 x, m = max(s), y = s - m, with s [P, R, C] and m [P, R] temporaries.
constexpr int64_t kP = 2, kR = 4, kC = 16, kSize = kP * kR * kC;
enum Buf { X, Y, S, M };

Expr element(const char *column) {
  return add(add(mul(v("p"), c(kR * kC)), mul(v("r"), c(kC))), v(column));
}
Expr rowOf() { return add(mul(v("p"), c(kR)), v("r")); }
// Part p's row r is part p + 1's row r - 1.
Expr overlapping(const char *column) {
  return add(add(mul(v("p"), c(kC)), mul(v("r"), c(kC))), v(column));
}

struct Indices {
  std::function<Expr(const char *column)> scaledRead = element;  // s in the max and the output
  std::function<Expr()> maxRead = rowOf;                         // m in the output
  std::function<Expr(const char *column)> scaledWrite = element; // s in the scaling
};

Program rowChain(const Indices &at = {}, ForKind rows = ForKind::Serial) {
  Program p = rowChainBuffers(kSize, kP * kR);
  std::vector<Stmt> row =
      rowChainStatements({element, at.scaledWrite, at.scaledRead, rowOf, at.maxRead}, c(kC));
  p.body = {forLoop("p", c(kP), ForKind::Parallel, {forLoop("r", c(kR), rows, std::move(row))})};
  p.body[0]->bound = c(1);
  p.body[0]->body[0]->bound = c(1); // printed for a parallel loop of rows
  return p;
}

TEST(ContractTemporaries, RowsOfTheirOwnAreReused) {
  Program p = rowChain();
  EXPECT_EQ(contractTemporaries(p), 2);
  const std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("s[((p * 64) + c)] = (x[(((p * 64) + (r * 16)) + c)] * 2f)"))
      << text;
  EXPECT_THAT(text, testing::HasSubstr("m[(p * 4)] = -inff")) << text;
  EXPECT_THAT(text, testing::HasSubstr("(s[((p * 64) + j)] - m[(p * 4)])")) << text;

  // A loop `a` outside the parts whose step (128) passes both parts' rows: the outer terms are
  // taken smallest first (p's 64, then a's), whatever their names' order.
  Indices stepped;
  stepped.scaledRead = stepped.scaledWrite = [](const char *column) {
    return add(element(column), mul(v("a"), c(kP * kR * kC)));
  };
  Program outside = rowChain(stepped);
  outside.body = {forLoop("a", c(2), ForKind::Serial, outside.body)};
  EXPECT_EQ(contractTemporaries(outside), 2);
  EXPECT_THAT(print(outside), testing::HasSubstr("s[(((p * 64) + c) + (a * 128))] = "))
      << print(outside);
}

// Each case shares one temporary between iterations of the row loop (or runs the rows in
// parallel): that temporary keeps its rows, the other still contracts.
TEST(ContractTemporaries, TemporariesSharedAcrossIterationsStay) {
  Program readAfterTheLoop = rowChain();
  // y[p, 0, 0] reads the last row's maximum after the rows are done.
  readAfterTheLoop.body[0]->body.push_back(store(
      Y, mul(v("p"), c(kR * kC)), load(M, add(mul(v("p"), c(kR)), c(kR - 1)), ElemKind::F32)));
  // A loop q outside the parts whose rows land on the next part's: q * 64 + p * 64.
  Program aliased = [] {
    Indices at;
    at.scaledRead = at.scaledWrite = [](const char *column) {
      return add(element(column), mul(v("q"), c(kR * kC)));
    };
    Program p = rowChain(at);
    p.body = {forLoop("q", c(2), ForKind::Serial, p.body)};
    return p;
  }();
  struct Case {
    const char *what;
    Program program;
    int contracted;
    const char *kept; // an access that keeps its row
  };
  const std::vector<Case> cases = {
      {"the previous row's maximum read", rowChain({element, [] { return add(rowOf(), c(-1)); }}),
       1, "m[(((p * 4) + r) + -1)]"},
      {"a read past the row's end",
       rowChain({[](const char *column) { return add(element(column), c(1)); }, rowOf}), 1,
       "s[((((p * 64) + (r * 16)) + k) + 1)]"},
      {"another part's rows read",
       rowChain({[](const char *column) { return add(mul(v("r"), c(kC)), v(column)); }, rowOf}), 1,
       "s[((r * 16) + k)]"},
      {"parts' rows overlapping", rowChain({overlapping, rowOf, overlapping}), 1,
       "s[(((p * 16) + (r * 16)) + c)]"},
      {"a maximum read after the rows", readAfterTheLoop, 1, "m[((p * 4) + r)] = -inff"},
      {"rows in parallel", rowChain({}, ForKind::Parallel), 0, "s[(((p * 64) + (r * 16)) + c)]"},
      {"two loops outside stepping by the same rows", aliased, 1, "(q * 64))] = (x["},
  };
  for (const Case &k : cases) {
    Program p = k.program;
    EXPECT_EQ(contractTemporaries(p), k.contracted) << k.what;
    EXPECT_THAT(print(p), testing::HasSubstr(k.kept)) << k.what << "\n" << print(p);
  }
}

TEST(ContractTemporaries, ContractedProgramComputesTheSame) {
  std::vector<float> x(kSize);
  for (int64_t i = 0; i < kSize; ++i)
    x[size_t(i)] = float((i * 37) % 23) - 11.0f;
  Program contracted = rowChain();
  contracted.name = "row_chain_contracted";
  ASSERT_EQ(contractTemporaries(contracted), 2);
  std::vector<float> y = runLoopProgram(contracted, x, kSize, kSize + kP * kR);
  // The oracle: y[p, r, :] = 2 x[p, r, :] - max(2 x[p, r, :]).
  expectTwiceMinusRowMax(x, y, kC);
}

// The row chain over runtime sizes (a partly specialized softmax): dims[0] columns a row and
// dims[1] rows a part, so that the row stride and the parts' steps are runtime values.
Expr runtimeElement(const char *column) {
  return add(add(mul(v("p"), mul(dimParam(1), dimParam(0))), mul(v("r"), dimParam(0))), v(column));
}
Expr runtimeRow() { return add(mul(v("p"), dimParam(1)), v("r")); }

Program runtimeRowChain(const Indices &at) {
  const int64_t rows = 4, cols = 40, size = kP * rows * cols; // the sizes the tests run
  Program p = rowChainBuffers(size, kP * rows);
  p.numDimParams = 2;
  std::vector<Stmt> row = rowChainStatements(
      {runtimeElement, at.scaledWrite, at.scaledRead, runtimeRow, at.maxRead}, dimParam(0));
  p.body = {
      forLoop("p", c(kP), ForKind::Parallel, {forLoop("r", dimParam(1), ForKind::Serial, row)})};
  p.body[0]->bound = c(1);
  return p;
}

// Over runtime sizes the rows' stride, bounds and steps are polynomials in them: rows of their
// own still contract, and a read past a row's end or into another part's rows still keeps them.
TEST(ContractTemporaries, RowsOverRuntimeSizesAreReusedToo) {
  Indices own{runtimeElement, runtimeRow, runtimeElement};
  Program p = runtimeRowChain(own);
  EXPECT_EQ(contractTemporaries(p), 2);
  std::string text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("s[((p * (dims[1] * dims[0])) + c)] = ")) << text;
  EXPECT_THAT(text, testing::HasSubstr("m[(p * dims[1])] = -inff")) << text;

  Indices pastTheEnd = own;
  pastTheEnd.scaledRead = [](const char *column) { return add(runtimeElement(column), c(1)); };
  p = runtimeRowChain(pastTheEnd);
  EXPECT_EQ(contractTemporaries(p), 1);
  text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("(r * dims[0])) + k) + 1)]")) << text;

  // Part p's rows start at p * dims[0]: the next part's first row is this part's second.
  Indices overlapping = own;
  overlapping.scaledRead = overlapping.scaledWrite = [](const char *column) {
    return add(add(mul(v("p"), dimParam(0)), mul(v("r"), dimParam(0))), v(column));
  };
  p = runtimeRowChain(overlapping);
  EXPECT_EQ(contractTemporaries(p), 1);
  text = print(p);
  EXPECT_THAT(text, testing::HasSubstr("s[(((p * dims[0]) + (r * dims[0])) + c)]")) << text;

  // Compiled at 4 rows of 40 (a remainder past the vectors) and 3 rows of 8: what the oracle
  // says, the contracted rows reused.
  for (const auto &[rows, cols] : {std::pair<int64_t, int64_t>{4, 40}, {3, 8}}) {
    Program contracted = runtimeRowChain(own);
    contracted.name = fmt::format("runtime_row_chain_{}x{}", rows, cols);
    ASSERT_EQ(contractTemporaries(contracted), 2);
    std::vector<float> x(size_t(kP * rows * cols));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float((i * 37) % 23) - 11.0f;
    const int64_t dims[] = {cols, rows};
    std::vector<float> y =
        runLoopProgram(contracted, x, x.size(), kP * 4 * 40 + kP * 4, 0.0f, dims);
    expectTwiceMinusRowMax(x, y, cols);
  }
}

// The pass collects every buffer's accesses in one walk: the same accesses, in the same order,
// with the same loops around them, as one walk per buffer finds.
TEST(ContractTemporaries, OneWalkFindsWhatAWalkPerBufferFinds) {
  Program p = rowChain();
  // A load inside another's index, a prefetch and an if: every place an access may sit.
  p.body[0]->body[0]->body.push_back(
      ifThen(cmp("slt", v("r"), c(2)),
             {prefetch(X, element("r")),
              store(Y, load(M, rowOf(), ElemKind::Index), load(S, c(0), ElemKind::F32))},
             {store(M, rowOf(), floatConst(0, ElemKind::F32))}));
  const std::vector<std::vector<BufferAccess>> all = accessesByBuffer(p.body, p.buffers.size());
  ASSERT_EQ(all.size(), p.buffers.size());
  for (size_t buffer = 0; buffer < p.buffers.size(); ++buffer) {
    const std::vector<BufferAccess> one = accessesOf(p.body, int(buffer));
    ASSERT_EQ(all[buffer].size(), one.size()) << p.buffers[buffer].name;
    EXPECT_FALSE(one.empty()) << p.buffers[buffer].name;
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(all[buffer][i].stmt, one[i].stmt);
      EXPECT_EQ(all[buffer][i].load, one[i].load);
      EXPECT_EQ(all[buffer][i].loops, one[i].loops);
    }
  }
  // X: the scaling's load and the prefetch; M: the store, the local, the max's store, the
  // output's load, the index load and the else branch's store.
  EXPECT_EQ(all[X].size(), 2u);
  EXPECT_EQ(all[M].size(), 6u);
}

} // namespace
} // namespace frank::test
