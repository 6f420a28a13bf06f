// distribute-rows: which row loops run their statement groups over blocks of rows (golden tests
// on hand-built loop IR, no JIT), and, compiled, that a distributed program computes what the
// original did.
#include "loops/DistributeRows.h"
#include "LoopProgramSupport.h"
#include "TestSupport.h"
#include "loops/ContractTemporaries.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace frank::test {
namespace {

using namespace frank::loops;

// x, y are [P, R, C] = [2, 8, 16]; per row r of part p (the parallel loop), a softmax-like
// chain: s = 2 x, m = max(s), y = s - m, with s [P, R, C] and m [P, R] temporaries.
constexpr int64_t kP = 2, kR = 8, kC = 16, kSize = kP * kR * kC;
enum Buf { X, Y, S, M };

// Element `column` of row r of part p, for parts of `rows` rows.
Expr element(const char *column, int64_t rows = kR) {
  return add(add(mul(v("p"), c(rows * kC)), mul(v("r"), c(kC))), v(column));
}
Expr rowOf(int64_t rows = kR) { return add(mul(v("p"), c(rows)), v("r")); }

// The row's statements: scale, start the maximum, reduce into it, subtract it.
std::vector<Stmt> softmaxLikeRow(
    const std::function<Expr()> &maxRead = [] { return rowOf(); }, int64_t rows = kR) {
  auto inRow = [rows](const char *column) { return element(column, rows); };
  return rowChainStatements({inRow, inRow, inRow, [rows] { return rowOf(rows); }, maxRead}, c(kC));
}

Program rowProgram(std::vector<Stmt> row, ForKind rows = ForKind::Serial, int64_t extent = kR) {
  Program p = rowChainBuffers(kSize, kP * kR);
  p.body = {
      forLoop("p", c(kP), ForKind::Parallel, {forLoop("r", c(extent), rows, std::move(row))})};
  p.body[0]->bound = c(1);
  p.body[0]->body[0]->bound = c(1); // printed for a parallel loop of rows
  return p;
}

TEST(DistributeRows, ShortRowsRunGroupByGroupOverBlocksOfFour) {
  Program p = rowProgram(softmaxLikeRow());
  EXPECT_EQ(distributeRows(p), 1);
  const std::string text = print(p);
  // Four groups: the scaling, the maximum's start, its reduction (the local and its loop read
  // together), the subtraction.
  EXPECT_THAT(text, testing::HasSubstr("for r_block in 0..2 {\n      for r in 0..4 {\n        "
                                       "for c in 0..16 vectorized {"))
      << text;
  EXPECT_EQ(count(text, "for r in 0..4 {"), 4) << text;
  EXPECT_THAT(text, testing::HasSubstr("      for r in 0..4 {\n        var acc: f32 = "
                                       "m[((p * 8) + ((r_block * 4) + r))]\n        for k"))
      << text;
  // contract-temporaries then keeps a block of rows of each temporary.
  EXPECT_EQ(contractTemporaries(p), 2);
  const std::string contracted = print(p);
  EXPECT_THAT(contracted, testing::HasSubstr("s[(((p * 128) + (r * 16)) + c)] = (x["))
      << contracted;
  EXPECT_THAT(contracted, testing::HasSubstr("m[((p * 8) + r)] = -inff")) << contracted;
}

// Each case must keep its row loop whole.
TEST(DistributeRows, LoopsThatAreNotIndependentShortRowsStay) {
  // A loop of 16 trips around the subtraction: 256 a row.
  std::vector<Stmt> longRow = softmaxLikeRow();
  longRow.back() = forLoop("t", c(16), ForKind::Serial, {longRow.back()});
  // A maximum carried from row to row: the local is declared outside the row loop.
  std::vector<Stmt> carried = softmaxLikeRow();
  carried.erase(carried.begin() + 2);
  Program carriedAcross = rowProgram(carried);
  carriedAcross.body[0]->body.insert(carriedAcross.body[0]->body.begin(),
                                     local("acc", floatConst(0, ElemKind::F32)));
  // Groups that pass nothing on: y = 2 x, and m = sum(x) apart.
  std::vector<Stmt> apart = {
      forLoop("c", c(kC), ForKind::Vectorize,
              {store(Y, element("c"),
                     binary(OpKind::MulF, load(X, element("c"), ElemKind::F32),
                            floatConst(2, ElemKind::F32)))}),
      local("acc", floatConst(0, ElemKind::F32)),
      forLoop("k", c(kC), ForKind::Vectorize,
              {assign("acc", binary(OpKind::AddF, f("acc"), load(X, element("k"), ElemKind::F32),
                                    /*reassoc=*/true))}),
      store(M, rowOf(), f("acc"))};
  std::vector<Stmt> checked = softmaxLikeRow();
  checked.insert(checked.begin() + 1, check(cmp("slt", v("r"), c(kR)), 0, v("r"), c(kR)));
  struct Case {
    const char *what;
    Program program;
  };
  const std::vector<Case> cases = {
      {"the previous row's maximum read",
       rowProgram(softmaxLikeRow([] { return add(rowOf(), c(-1)); }))},
      {"rows in parallel", rowProgram(softmaxLikeRow(), ForKind::Parallel)},
      {"rows of 256 trips", rowProgram(longRow)},
      {"six rows, no whole block",
       rowProgram(softmaxLikeRow([] { return rowOf(6); }, 6), ForKind::Serial, 6)},
      {"an accumulator declared outside the rows", carriedAcross},
      {"groups that pass nothing on", rowProgram(apart)},
      {"a check among the rows' statements", rowProgram(checked)},
  };
  for (const Case &k : cases) {
    Program p = k.program;
    const std::string before = print(p);
    EXPECT_EQ(distributeRows(p), 0) << k.what;
    EXPECT_EQ(print(p), before) << k.what;
  }
}

TEST(DistributeRows, DistributedProgramComputesTheSame) {
  std::vector<float> x(kSize);
  for (int64_t i = 0; i < kSize; ++i)
    x[size_t(i)] = float((i * 37) % 23) - 11.0f;
  Program distributed = rowProgram(softmaxLikeRow());
  distributed.name = "row_chain_distributed";
  ASSERT_EQ(distributeRows(distributed), 1);
  ASSERT_EQ(contractTemporaries(distributed), 2);
  std::vector<float> y = runLoopProgram(distributed, x, kSize, kSize + kP * kR);
  // The oracle: y[p, r, :] = 2 x[p, r, :] - max(2 x[p, r, :]).
  expectTwiceMinusRowMax(x, y, kC);
}

} // namespace
} // namespace frank::test
