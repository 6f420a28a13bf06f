// \file What a statement tree refers to, in the order it first does, and its shape: the tree
// written with each name and buffer replaced by its number in that order (a buffer with its
// element type and whether it is an input), so that two trees that differ only in names have the
// same shape. Codegen gives parallel loop bodies of one shape one chunk function; share-bodies
// writes index constants as holes in the shape to find bodies that differ only in them, and
// rebuilds those bodies with a variable at each hole. One walk serves both, so that what
// share-bodies groups is what codegen then shares.
#pragma once

#include "loops/LoopIR.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace frank::loops {

class TreeWalk {
public:
  enum class Constants : uint8_t {
    Exact, // every constant written into the shape
    Holes  // scalar index constants written as holes, their values in `holes`
  };

  /// `withShape`: write `shape` (most of the walk's cost). `holeNames`: rebuild the trees with a
  /// variable of that name at each hole whose name is not empty (with Constants::Holes).
  TreeWalk(const Program &program, bool withShape, Constants constants = Constants::Exact,
           const std::vector<std::string> *holeNames = nullptr);

  /// Walks `list`; returns it rebuilt with holeNames, else nothing.
  std::vector<Stmt> stmts(const std::vector<Stmt> &list);

  std::vector<std::string> names; // declared, read or assigned, in first-use order
  std::vector<int> buffers;       // read or written, in first-use order
  std::string shape;
  std::vector<int64_t> holes;
  std::vector<bool> holeIsVectorizedExtent; // the hole is a vectorized loop's extent

private:
  Stmt stmt(const Stmt &s);
  Expr expr(const Expr &e, bool vectorizedExtent = false);
  void name(const std::string &n);
  void buffer(int b);
  template <class... Fields> void write(char tag, Fields... fields);
  template <class Field> void raw(Field field);

  const Program &program_;
  const bool withShape_;
  const Constants constants_;
  const std::vector<std::string> *holeNames_;
  std::unordered_map<std::string_view, size_t> nameIds_;
  std::unordered_map<int, size_t> bufferIds_;
};

} // namespace frank::loops
