// forward-copies: which copy nests disappear into their readers or writers (golden tests on
// hand-built loop IR, no JIT), and, compiled, that the forwarded programs compute what the copies
// did, element for element.
#include "loops/ForwardCopies.h"
#include "LoopProgramSupport.h"
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using namespace frank::loops;

// x is [S, G, D] = [4, 2, 8]; the copy makes t [G, S, D] (attention's query moved to grouped
// order), and the reader walks t's rows m = g * S + s two at a time, as a register tile does.
constexpr int64_t kS = 4, kG = 2, kD = 8, kSize = kS * kG * kD;
enum Buf { X, T, Y };

Expr sum(std::vector<Expr> terms) {
  Expr s = c(0);
  for (Expr &t : terms)
    s = add(s, t);
  return s;
}

Program withBuffers(const char *name) {
  Program p;
  p.name = name;
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, c(kSize), nullptr},
               {"t", ElemKind::F32, BufferRole::Temp, 0, c(kSize), c(0)},
               {"y", ElemKind::F32, BufferRole::Output, 0, c(kSize), nullptr}};
  p.workspaceBytes = c(kSize * 4);
  return p;
}

// to[toIndex(g, s, d)] = from[fromIndex(g, s, d)] over g, s, d (d innermost).
Stmt copyNest(int from, int to, Expr fromIndex, Expr toIndex) {
  return forLoop("g", c(kG), ForKind::Serial,
                 {forLoop("s", c(kS), ForKind::Serial,
                          {forLoop("d", c(kD), ForKind::Vectorize,
                                   {let("e", load(from, fromIndex, ElemKind::F32)),
                                    store(to, toIndex, var("e", ElemKind::F32))})})});
}

Expr xIndex() { return sum({v("d"), mul(v("g"), c(kD)), mul(v("s"), c(kG * kD))}); }
Expr grouped() { return sum({v("d"), mul(v("s"), c(kD)), mul(v("g"), c(kS * kD))}); }

// Rows m_block * 2 + i of a [G * S, D] tensor, as vectors of D: row(i)[lane] at row * D.
Expr tileRow(int i) { return mul(add(mul(v("m_block"), c(2)), c(i)), c(kD)); }

// y[m, :] = 2 * t[m, :] for the rows of t two at a time, read as whole vectors.
Stmt tileReader(Expr (*index)(int)) {
  std::vector<Stmt> body;
  for (int i = 0; i < 2; ++i) {
    std::string row = "row" + std::to_string(i);
    body.push_back(let(row, binary(OpKind::MulF, load(T, index(i), ElemKind::F32, kD),
                                   broadcast(floatConst(2, ElemKind::F32), kD))));
    body.push_back(store(Y, tileRow(i), var(row, ElemKind::F32, kD)));
  }
  return forLoop("m_block", c(kG * kS / 2), ForKind::Parallel, std::move(body));
}

Program readsThroughCopy(Expr (*index)(int) = tileRow) {
  Program p = withBuffers("reads_through_copy");
  p.body = {copyNest(X, T, xIndex(), grouped()), tileReader(index)};
  p.body[1]->bound = c(1);
  return p;
}

// o[m, :] = x[m, :] + 1 row by row into the temporary, then copied out as y = o moved back to
// [S, G, D]: attention's output.
Program writesThroughCopy() {
  Program p = withBuffers("writes_through_copy");
  std::vector<Stmt> rows;
  for (int i = 0; i < 2; ++i) {
    std::string row = "row" + std::to_string(i);
    rows.push_back(let(row, binary(OpKind::AddF, load(X, tileRow(i), ElemKind::F32, kD),
                                   broadcast(floatConst(1, ElemKind::F32), kD))));
    rows.push_back(store(T, tileRow(i), var(row, ElemKind::F32, kD)));
  }
  p.body = {forLoop("m_block", c(kG * kS / 2), ForKind::Parallel, std::move(rows)),
            copyNest(T, Y, grouped(), xIndex())};
  p.body[0]->bound = c(1);
  return p;
}

TEST(ForwardCopies, ReadsOfACopyReadItsSource) {
  Program p = readsThroughCopy();
  EXPECT_EQ(forwardCopies(p), 1);
  const std::string text = print(p);
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("t["))) << text;
  // Row m_block * 2 + i of t is x[s, g] with g = m_block / 2, s = (m_block % 2) * 2 + i.
  EXPECT_THAT(text, testing::HasSubstr("x[(((m_block / 2) * 8) + (((m_block % 2) * 2) * 16)) : 8]"))
      << text;
  EXPECT_THAT(text,
              testing::HasSubstr("x[(((m_block / 2) * 8) + ((((m_block % 2) * 2) + 1) * 16)) : 8]"))
      << text;
}

TEST(ForwardCopies, WritesOfACopiedTemporaryWriteItsDestination) {
  Program p = writesThroughCopy();
  EXPECT_EQ(forwardCopies(p), 1);
  const std::string text = print(p);
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("t["))) << text;
  EXPECT_THAT(
      text, testing::HasSubstr("y[(((m_block / 2) * 8) + (((m_block % 2) * 2) * 16)) : 8] = row0"))
      << text;
}

TEST(ForwardCopies, CopiesThatCannotBeForwardedStay) {
  auto guarded = [] {
    Program p = readsThroughCopy();
    p.body[0] = ifThen(cmp("sgt", dimParam(0), c(0)), {p.body[0]});
    p.numDimParams = 1;
    return p;
  };
  auto sourceWritten = [] {
    Program p = readsThroughCopy();
    p.body.push_back(store(X, c(0), floatConst(0, ElemKind::F32)));
    return p;
  };
  auto temporaryWrittenTwice = [] {
    Program p = readsThroughCopy();
    p.body.insert(p.body.begin() + 1, store(T, c(3), floatConst(0, ElemKind::F32)));
    return p;
  };
  auto transposing = [] {
    Program p = readsThroughCopy();
    // x read as [D, S, G]: the columns of x become the rows of t.
    p.body[0] =
        copyNest(X, T, sum({v("g"), mul(v("s"), c(kG)), mul(v("d"), c(kS * kG))}), grouped());
    return p;
  };
  const std::vector<std::pair<const char *, Program>> cases = {
      {"a vector read crossing into the next row",
       readsThroughCopy([](int i) { return add(tileRow(i), c(1)); })},
      {"a read at an index from a let",
       readsThroughCopy([](int i) { return add(tileRow(i), var("k", ElemKind::Index)); })},
      {"a copy that may not run", guarded()},
      {"a source written elsewhere", sourceWritten()},
      {"a temporary written elsewhere", temporaryWrittenTwice()},
      {"a transposing copy", transposing()},
  };
  for (const auto &[what, program] : cases) {
    Program p = program;
    const std::string before = print(p);
    EXPECT_EQ(forwardCopies(p), 0) << what;
    EXPECT_EQ(print(p), before) << what;
  }
  // The written temporary is also read outside the copy, or written again after it: the copy
  // stays.
  Program readElsewhere = writesThroughCopy(), writtenAfter = writesThroughCopy();
  readElsewhere.body.push_back(store(Y, c(0), load(T, c(5), ElemKind::F32)));
  writtenAfter.body.push_back(store(T, c(5), floatConst(0, ElemKind::F32)));
  for (Program *p : {&readElsewhere, &writtenAfter}) {
    const std::string before = print(*p);
    EXPECT_EQ(forwardCopies(*p), 0) << before;
    EXPECT_EQ(print(*p), before);
  }
}

// Compiled, with an oracle of the permutation: y[g * S + s, d] = 2 * x[s, g, d], and
// y[s, g, d] = x[g * S + s, d] + 1.
TEST(ForwardCopies, ForwardedProgramsComputeWhatTheCopiesDid) {
  std::vector<float> x(kSize);
  for (int64_t i = 0; i < kSize; ++i)
    x[size_t(i)] = float(i) * 0.5f - 3.0f;
  Program reads = readsThroughCopy(), writes = writesThroughCopy();
  ASSERT_EQ(forwardCopies(reads), 1);
  ASSERT_EQ(forwardCopies(writes), 1);
  std::vector<float> yReads = runLoopProgram(reads, x, kSize, kSize, -1.0f),
                     yWrites = runLoopProgram(writes, x, kSize, kSize, -1.0f);
  for (int64_t g = 0; g < kG; ++g)
    for (int64_t s = 0; s < kS; ++s)
      for (int64_t d = 0; d < kD; ++d) {
        const size_t grouped = size_t((g * kS + s) * kD + d),
                     ordered = size_t((s * kG + g) * kD + d);
        EXPECT_EQ(yReads[grouped], 2.0f * x[ordered]) << g << " " << s << " " << d;
        EXPECT_EQ(yWrites[ordered], x[grouped] + 1.0f) << g << " " << s << " " << d;
      }
}

} // namespace
} // namespace frank::test
