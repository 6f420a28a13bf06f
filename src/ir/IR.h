// The tensor IR: MLIR's structure (modules, functions, ops with operands, results, attributes
// and single-block regions) restricted to the subset frank-jit accepts.
//
// Semantics, as in MLIR:
// - Values are SSA: defined once, by an op result or a block argument, and immutable. Tensors
//   are values too; whether two tensors share storage is decided later by the buffer plan.
// - A region may use any value visible at its parent op (implicit capture).
// - `index` is a 64-bit signed integer. Integer arithmetic wraps (two's complement).
// - Float arithmetic is IEEE-754 round-to-nearest; fast-math freedoms are granted by the
//   lowering, never assumed here.
// - A tensor dim is either static (>= 0) or dynamic (kDynamic), written `?`.
#pragma once

#include "ir/Diagnostics.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace frank {

constexpr int64_t kDynamic = -1;

enum class ElemKind : uint8_t { F16, BF16, F32, F64, I1, I8, I16, I32, I64, Index };

const char *elemName(ElemKind kind);
bool isFloatElem(ElemKind kind);
int elemBits(ElemKind kind); // index counts as 64
/// Whether a tensor of `shape` (its dynamic dims left out, they count when known) with elements
/// of `elemBytes` has strides in bytes past 2^63, which the kernels' 64-bit index arithmetic
/// cannot count: the product of its non-zero dims, as an empty dim makes no stride smaller.
bool stridesOverflow(int64_t elemBytes, const std::vector<int64_t> &shape);

/// A scalar, a ranked tensor, or an opaque runtime handle (`!util.list<?>` and friends).
struct Type {
  enum class Kind : uint8_t { Scalar, Tensor, Opaque };
  Kind kind = Kind::Scalar;
  ElemKind elem = ElemKind::F32;
  std::vector<int64_t> shape; // tensors only
  std::string opaqueName;     // opaque only, e.g. "!util.list<?>"

  static Type scalar(ElemKind e) { return {Kind::Scalar, e, {}, {}}; }
  static Type tensor(ElemKind e, std::vector<int64_t> s) {
    return {Kind::Tensor, e, std::move(s), {}};
  }
  static Type opaque(std::string name) {
    return {Kind::Opaque, ElemKind::F32, {}, std::move(name)};
  }

  bool isTensor() const { return kind == Kind::Tensor; }
  bool isScalar() const { return kind == Kind::Scalar; }
  bool isIndex() const { return isScalar() && elem == ElemKind::Index; }
  bool isFloat() const { return isScalar() && isFloatElem(elem); }
  bool isInteger() const { return isScalar() && !isFloatElem(elem); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool hasStaticShape() const;
  int64_t numDynamicDims() const;
  bool operator==(const Type &other) const = default;
  /// MLIR spelling: "f32", "tensor<?x4096xf32>".
  std::string str() const;
};

/// One result of an affine map: a loop dim or a constant coordinate.
struct AffineResult {
  bool isConstant = false;
  int64_t value = 0; // dim position, or the constant
  bool operator==(const AffineResult &) const = default;
};

/// `affine_map<(d0, ..., dn-1) -> (results)>`. Dims are positional; names are not kept.
struct AffineMap {
  int numDims = 0;
  std::vector<AffineResult> results;

  static AffineMap identity(int n);
  bool isPermutation() const;          // every dim exactly once, no constants
  bool isProjectedPermutation() const; // each dim at most once, no constants
  bool operator==(const AffineMap &) const = default;
  std::string str() const;
};

/// A literal scalar value of an attribute or constant.
struct Literal {
  enum class Kind : uint8_t { Int, Float, Bool };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  bool operator==(const Literal &) const = default;
};

/// `dense<...> : tensor<...>`: a splat (one value) or every element row-major.
struct DenseAttr {
  std::vector<Literal> values;
  bool operator==(const DenseAttr &) const = default;
};

struct Attribute;
using AttrList = std::vector<Attribute>;

/// Attribute values. Ops store them by name (see each op's accessor in Ops.h).
struct Attribute {
  std::variant<int64_t, double, std::string, AffineMap, Type, DenseAttr, AttrList, Literal> value;

  const AttrList &list() const { return std::get<AttrList>(value); }
  int64_t integer() const { return std::get<int64_t>(value); }
  const std::string &string() const { return std::get<std::string>(value); }
  const AffineMap &map() const { return std::get<AffineMap>(value); }
  bool operator==(const Attribute &) const = default;
};

struct Op;
struct Block;

/// An SSA value: an op result or a block argument.
struct Value {
  Type type;
  std::string name; // the source name without '%', kept for messages and printing
  Op *definingOp = nullptr;
  Block *ownerBlock = nullptr; // set for block arguments
  int index = 0;               // result number, or argument number
  Location loc;

  bool isBlockArgument() const { return ownerBlock != nullptr; }
};

/// A single-block region. Regions never have more than one block in this subset.
struct Block {
  std::vector<std::unique_ptr<Value>> arguments;
  std::vector<std::unique_ptr<Op>> ops;
  Op *parentOp = nullptr; // null for a function body

  Value *addArgument(Type type, std::string name, Location loc);
  Op *terminator() const { return ops.empty() ? nullptr : ops.back().get(); }
};

enum class OpKind : uint16_t {
#define FRANK_OP(kind, name) kind,
#include "ir/Ops.def"
};

/// An operation. Its kind fixes the meaning of operands, attributes and regions; Ops.h has
/// the accessors that spell that out per op.
struct Op {
  OpKind kind;
  Location loc;
  std::vector<Value *> operands;
  std::vector<std::unique_ptr<Value>> results;
  std::map<std::string, Attribute> attrs;
  std::vector<std::unique_ptr<Block>> regions;
  Block *parentBlock = nullptr;

  Op(OpKind k, Location l) : kind(k), loc(std::move(l)) {}
  const char *name() const;
  Value *result(int i = 0) const { return results[i].get(); }
  Value *addResult(Type type, std::string name = {});
  Block *addRegion();
  bool hasAttr(const std::string &key) const { return attrs.count(key) != 0; }
  const Attribute &attr(const std::string &key) const;
};

/// A function definition, or an external declaration (no body) bound by the linker.
struct FuncOp {
  std::string name; // may be qualified, "module.fn"
  bool isPublic = true;
  std::vector<Type> argTypes;
  std::vector<Type> resultTypes;
  std::unique_ptr<Block> body; // null for a declaration; its arguments are the parameters
  Location loc;

  bool isDeclaration() const { return body == nullptr; }
};

struct ModuleOp {
  std::string name; // empty for an anonymous module
  std::vector<std::unique_ptr<FuncOp>> functions;
  Location loc;

  FuncOp *lookup(const std::string &name) const;
};

/// Op names and kinds, both ways.
const char *opName(OpKind kind);
bool lookupOpKind(std::string_view name, OpKind &kind);

/// Calls `fn` on every op nested under `block`, in order, parents before their regions' ops.
template <class Fn> void walk(Block &block, Fn &&fn) {
  for (auto &op : block.ops) {
    fn(*op);
    for (auto &region : op->regions)
      walk(*region, fn);
  }
}

} // namespace frank
