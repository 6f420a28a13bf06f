// \file Creates ops at a point in a block, for passes that rewrite IR.
#pragma once

#include "ir/IR.h"

#include <functional>

namespace frank {

class Builder {
public:
  /// Inserts before position `at` of `block`; every op gets location `loc`.
  Builder(Block &block, size_t at, Location loc) : block_(block), at_(at), loc_(std::move(loc)) {}

  Op *create(OpKind kind, std::vector<Value *> operands, std::vector<Type> results,
             std::map<std::string, Attribute> attrs = {});
  Value *constantIndex(int64_t v);
  Value *constantFloat(double v, ElemKind type);
  Value *dim(Value *tensor, int64_t d);
  /// tensor.empty of `type`, its dynamic sizes read from the given (value, dim) sources.
  Value *empty(const Type &type, const std::vector<std::pair<Value *, int64_t>> &dimSources);
  Value *fill(Value *scalar, Value *tensor);
  Value *binary(OpKind kind, Value *a, Value *b);
  Value *unary(OpKind kind, Value *a);
  Value *cmpf(const std::string &predicate, Value *a, Value *b);
  Value *select(Value *c, Value *a, Value *b);
  Value *cast(OpKind kind, Value *a, ElemKind to);
  Value *extract(Value *tensor, std::vector<Value *> indices);
  Value *linalgIndex(int64_t dim);
  /// A view of `src` as `to`: tensor.collapse_shape when `to` has the lower rank, else
  /// tensor.expand_shape (whose `to` must be static). `groups[i]` lists the dims of the higher
  /// rank that dim i of the lower one spans; the result is named `name`.
  Value *reshape(Value *src, const std::vector<std::vector<int64_t>> &groups, const Type &to,
                 const std::string &name);

  using BodyFn = std::function<Value *(Builder &, const std::vector<Value *> &args)>;
  /// A linalg.generic over `numLoops` dims; `body` builds the scalar body from the block
  /// arguments (one per input, then the output) and returns the value to yield.
  Value *generic(std::vector<Value *> inputs, Value *output, std::vector<AffineMap> maps,
                 std::vector<bool> reductionDims, const BodyFn &body, const std::string &name = {});

  /// Inserts an existing op (e.g. a clone).
  Op *insert(std::unique_ptr<Op> op);

  size_t position() const { return at_; }

private:
  Block &block_;
  size_t at_;
  Location loc_;
};

/// An affine map over `numDims` dims whose results are the given dims (-1: the constant 0).
AffineMap mapOf(int numDims, const std::vector<int> &dims);

} // namespace frank
