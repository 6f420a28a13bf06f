// Helpers for tests of loop IR passes on hand-built programs: run one, and the oracle of the
// softmax-like row chain several of them build.
#pragma once

#include "Engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

namespace frank::test {

/// Short constructors for hand-built loop IR: an index variable, an f32 variable, an index.
inline loops::Expr v(const char *name) { return loops::var(name, ElemKind::Index); }
inline loops::Expr f(const char *name) { return loops::var(name, ElemKind::F32); }
inline loops::Expr c(int64_t value) { return loops::intConst(value); }

/// The row chain's program without a body: input x and output y of `size` floats, temporaries
/// s (`size`) and m (`rows`, one per row) in a workspace of both.
inline loops::Program rowChainBuffers(int64_t size, int64_t rows) {
  using namespace loops;
  Program p;
  p.name = "row_chain";
  p.buffers = {{"x", ElemKind::F32, BufferRole::Input, 0, c(size), nullptr},
               {"y", ElemKind::F32, BufferRole::Output, 0, c(size), nullptr},
               {"s", ElemKind::F32, BufferRole::Temp, 0, c(size), c(0)},
               {"m", ElemKind::F32, BufferRole::Temp, 0, c(rows), c(size * 4)}};
  p.workspaceBytes = c((size + rows) * 4);
  return p;
}

/// Where the row chain's statements read and write, for row r of part p (the loops around them).
struct RowChainIndices {
  std::function<loops::Expr(const char *column)> element;     // x and y
  std::function<loops::Expr(const char *column)> scaledWrite; // s in the scaling
  std::function<loops::Expr(const char *column)> scaledRead;  // s in the max and the output
  std::function<loops::Expr()> row;                           // m in the max
  std::function<loops::Expr()> maxRead;                       // m in the output
};

/// One row of the chain over `cols` columns (buffers as rowChainBuffers makes them): s = 2 x,
/// m = -inf, m = max(m, s) through a local, y = s - m.
inline std::vector<loops::Stmt> rowChainStatements(const RowChainIndices &at, loops::Expr cols) {
  using namespace loops;
  enum { X, Y, S, M };
  const double inf = std::numeric_limits<double>::infinity();
  return {forLoop("c", cols, ForKind::Vectorize,
                  {store(S, at.scaledWrite("c"),
                         binary(OpKind::MulF, load(X, at.element("c"), ElemKind::F32),
                                floatConst(2, ElemKind::F32)))}),
          store(M, at.row(), floatConst(-inf, ElemKind::F32)),
          local("acc", load(M, at.row(), ElemKind::F32)),
          forLoop("k", cols, ForKind::Vectorize,
                  {assign("acc", binary(OpKind::MaximumF, f("acc"),
                                        load(S, at.scaledRead("k"), ElemKind::F32)))}),
          store(M, at.row(), f("acc")),
          forLoop("j", cols, ForKind::Vectorize,
                  {store(Y, at.element("j"),
                         binary(OpKind::SubF, load(S, at.scaledRead("j"), ElemKind::F32),
                                load(M, at.maxRead(), ElemKind::F32)))})};
}

/// Compiles `program` (one input, one output) and runs it on `x` with a workspace of
/// `workspaceElems` floats filled with `workspaceFill` (and its runtime dims `dims`); returns
/// its output of `outputElems` floats, -1 where it writes nothing.
inline std::vector<float> runLoopProgram(const loops::Program &program, const std::vector<float> &x,
                                         size_t outputElems, size_t workspaceElems,
                                         float workspaceFill = 0.0f,
                                         const int64_t *dims = nullptr) {
  jit::EntryFn kernel = jit::Engine::instance().compile(program, {});
  std::vector<float> workspace(workspaceElems, workspaceFill), y(outputElems, -1.0f);
  void *buffers[] = {const_cast<float *>(x.data()), y.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, dims, nullptr, workspace.data(), status);
  return y;
}

/// The row chain's oracle, exactly: y = 2 x - max(2 x) along each row of `cols`.
inline void expectTwiceMinusRowMax(const std::vector<float> &x, const std::vector<float> &y,
                                   int64_t cols) {
  ASSERT_EQ(x.size(), y.size());
  for (int64_t row = 0; row < int64_t(x.size()) / cols; ++row) {
    float most = -std::numeric_limits<float>::infinity();
    for (int64_t col = 0; col < cols; ++col)
      most = std::max(most, 2.0f * x[size_t(row * cols + col)]);
    for (int64_t col = 0; col < cols; ++col)
      EXPECT_EQ(y[size_t(row * cols + col)], 2.0f * x[size_t(row * cols + col)] - most)
          << row << " " << col;
  }
}

} // namespace frank::test
