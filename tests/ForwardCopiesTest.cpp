// forward-copies: which copy nests disappear into their readers or writers (golden tests on
// hand-built loop IR, no JIT), and, compiled, that the forwarded programs compute what the copies
// did, element for element.
#include "loops/ForwardCopies.h"
#include "LoopProgramSupport.h"
#include "TestSupport.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using namespace frank::loops;

// x is [S, G, D] = [4, 2, 8]; the copy makes t [G, S, D] (attention's query moved to grouped
// order), and the reader walks t's rows m = g * S + s two at a time, as a register tile does.
// The length S may also be another constant or a runtime value, dims[0] (partial
// specialization).
constexpr int64_t kS = 4, kG = 2, kD = 8, kSize = kS * kG * kD;
enum Buf { X, T, Y };

Expr sum(std::vector<Expr> terms) {
  Expr s = c(0);
  for (Expr &t : terms)
    s = add(s, t);
  return s;
}

Program withBuffers(const char *name, Expr length) {
  Program p;
  // The engine keeps programs by name: one for each length.
  auto constant = asConstant(length);
  p.name = constant ? fmt::format("{}_{}", name, *constant) : fmt::format("{}_runtime", name);
  Expr size = mul(length, c(kG * kD));
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, size, nullptr},
               {"t", ElemKind::F32, BufferRole::Temp, 0, size, c(0)},
               {"y", ElemKind::F32, BufferRole::Output, 0, size, nullptr}};
  p.workspaceBytes = mul(size, c(4));
  p.numDimParams = asConstant(length) ? 0 : 1;
  return p;
}

// to[toIndex(g, s, d)] = from[fromIndex(g, s, d)] over g, s, d (d innermost).
Stmt copyNest(int from, int to, Expr fromIndex, Expr toIndex, Expr length = c(kS)) {
  return forLoop("g", c(kG), ForKind::Serial,
                 {forLoop("s", length, ForKind::Serial,
                          {forLoop("d", c(kD), ForKind::Vectorize,
                                   {let("e", load(from, fromIndex, ElemKind::F32)),
                                    store(to, toIndex, var("e", ElemKind::F32))})})});
}

Expr xIndex() { return sum({v("d"), mul(v("g"), c(kD)), mul(v("s"), c(kG * kD))}); }
Expr grouped(Expr length = c(kS)) {
  return sum({v("d"), mul(v("s"), c(kD)), mul(v("g"), mul(length, c(kD)))});
}

// Rows m_block * 2 + i of a [G * S, D] tensor, as vectors of D: row(i)[lane] at row * D.
Expr tileRow(int i) { return mul(add(mul(v("m_block"), c(2)), c(i)), c(kD)); }

// y[m, :] = 2 * t[m, :] for the rows of t two at a time, read as whole vectors.
Stmt tileReader(Expr (*index)(int), Expr length = c(kS)) {
  std::vector<Stmt> body;
  for (int i = 0; i < 2; ++i) {
    std::string row = "row" + std::to_string(i);
    body.push_back(let(row, binary(OpKind::MulF, load(T, index(i), ElemKind::F32, kD),
                                   broadcast(floatConst(2, ElemKind::F32), kD))));
    body.push_back(store(Y, tileRow(i), var(row, ElemKind::F32, kD)));
  }
  // G * S / 2 tiles: S of them, as G is 2.
  return forLoop("m_block", length, ForKind::Parallel, std::move(body));
}

Program readsThroughCopy(Expr (*index)(int) = tileRow, Expr length = c(kS)) {
  Program p = withBuffers("reads_through_copy", length);
  p.body = {copyNest(X, T, xIndex(), grouped(length), length), tileReader(index, length)};
  p.body[1]->bound = c(1);
  return p;
}

// o[m, :] = x[m, :] + 1 row by row into the temporary, then copied out as y = o moved back to
// [S, G, D]: attention's output.
Program writesThroughCopy(Expr length = c(kS)) {
  Program p = withBuffers("writes_through_copy", length);
  std::vector<Stmt> rows;
  for (int i = 0; i < 2; ++i) {
    std::string row = "row" + std::to_string(i);
    rows.push_back(let(row, binary(OpKind::AddF, load(X, tileRow(i), ElemKind::F32, kD),
                                   broadcast(floatConst(1, ElemKind::F32), kD))));
    rows.push_back(store(T, tileRow(i), var(row, ElemKind::F32, kD)));
  }
  p.body = {forLoop("m_block", length, ForKind::Parallel, std::move(rows)),
            copyNest(T, Y, grouped(length), xIndex(), length)};
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

// S = 3 or a runtime S: a tile's two rows may belong to two groups (rows 2 and 3 of [2, 3]
// are (0, 2) and (1, 0)), so the row, not m_block, splits into group and position.
TEST(ForwardCopies, RowsSplitByTheLengthWhenATileMayCrossAGroup) {
  for (Expr length : {c(3), dimParam(0)}) {
    const std::string s = asConstant(length) ? "3" : "dims[0]";
    Program reads = readsThroughCopy(tileRow, length), writes = writesThroughCopy(length);
    EXPECT_EQ(forwardCopies(reads), 1) << s;
    EXPECT_EQ(forwardCopies(writes), 1) << s;
    const std::string readText = print(reads), writeText = print(writes);
    EXPECT_THAT(readText, testing::Not(testing::HasSubstr("t["))) << readText;
    EXPECT_THAT(readText, testing::HasSubstr(fmt::format(
                              "x[(((((m_block * 2) + 1) / {0}) * 8) + ((((m_block * 2) + 1) % {0}) "
                              "* 16)) : 8]",
                              s)))
        << readText;
    EXPECT_THAT(writeText, testing::HasSubstr(fmt::format(
                               "y[((((m_block * 2) / {0}) * 8) + (((m_block * 2) % {0}) * 16)) : "
                               "8] = row0",
                               s)))
        << writeText;
  }
}

TEST(ForwardCopies, CopiesThatCannotBeForwardedStay) {
  auto guarded = [] {
    Program p = readsThroughCopy();
    p.body[0] = ifThen(cmp("sgt", dimParam(0), c(0)), {p.body[0]});
    p.numDimParams = 1;
    return p;
  };
  auto underAMinimum = [] {
    Program p = readsThroughCopy();
    p.body[0] =
        forLoop("once", binary(OpKind::MinSI, dimParam(0), c(1)), ForKind::Serial, {p.body[0]});
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
      {"a copy under a loop that may not run", underAMinimum()},
      {"a vector read crossing into the next row over a runtime length",
       readsThroughCopy([](int i) { return add(tileRow(i), c(1)); }, dimParam(0))},
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
// y[s, g, d] = x[g * S + s, d] + 1; for S = 4 and 3 baked in, and for a runtime S from 1 to 5.
TEST(ForwardCopies, ForwardedProgramsComputeWhatTheCopiesDid) {
  auto check = [](Expr length, int64_t s) {
    const int64_t size = s * kG * kD;
    std::vector<float> x(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i)
      x[size_t(i)] = float(i) * 0.5f - 3.0f;
    Program reads = readsThroughCopy(tileRow, length), writes = writesThroughCopy(length);
    ASSERT_EQ(forwardCopies(reads), 1);
    ASSERT_EQ(forwardCopies(writes), 1);
    std::vector<float> yReads = runLoopProgram(reads, x, size_t(size), size_t(size), -1.0f, &s),
                       yWrites = runLoopProgram(writes, x, size_t(size), size_t(size), -1.0f, &s);
    for (int64_t g = 0; g < kG; ++g)
      for (int64_t p = 0; p < s; ++p)
        for (int64_t d = 0; d < kD; ++d) {
          const size_t grouped = size_t((g * s + p) * kD + d),
                       ordered = size_t((p * kG + g) * kD + d);
          EXPECT_EQ(yReads[grouped], 2.0f * x[ordered]) << s << ": " << g << " " << p << " " << d;
          EXPECT_EQ(yWrites[ordered], x[grouped] + 1.0f) << s << ": " << g << " " << p << " " << d;
        }
  };
  check(c(kS), kS);
  check(c(3), 3);
  for (int64_t s : {1, 2, 3, 4, 5})
    check(dimParam(0), s);
}

} // namespace
} // namespace frank::test
