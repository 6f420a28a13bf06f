// Helpers for tests of loop IR passes on hand-built programs: run one, and the oracle of the
// softmax-like row chain several of them build.
#pragma once

#include "Engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace frank::test {

/// Short constructors for hand-built loop IR: an index variable, an f32 variable, an index.
inline loops::Expr v(const char *name) { return loops::var(name, ElemKind::Index); }
inline loops::Expr f(const char *name) { return loops::var(name, ElemKind::F32); }
inline loops::Expr c(int64_t value) { return loops::intConst(value); }

/// Compiles `program` (one input, one output) and runs it on `x` with a workspace of
/// `workspaceElems` floats filled with `workspaceFill`; returns its output of `outputElems`
/// floats, -1 where it writes nothing.
inline std::vector<float> runLoopProgram(const loops::Program &program, const std::vector<float> &x,
                                         size_t outputElems, size_t workspaceElems,
                                         float workspaceFill = 0.0f) {
  jit::EntryFn kernel = jit::Engine::instance().compile(program, {});
  std::vector<float> workspace(workspaceElems, workspaceFill), y(outputElems, -1.0f);
  void *buffers[] = {const_cast<float *>(x.data()), y.data()};
  int64_t status[3] = {0, 0, 0};
  kernel(buffers, nullptr, nullptr, workspace.data(), status);
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
