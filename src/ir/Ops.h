// Per-op accessors: what each op's operands, attributes and regions mean.
#pragma once

#include "ir/IR.h"

#include <optional>

namespace frank {

/// linalg.generic: operands are ins then the single outs; one result; one body region whose
/// block has one scalar argument per operand. Attributes: "indexing_maps" (one AffineMap per
/// operand), "iterator_types" ("parallel" or "reduction" per loop dim), "num_inputs".
struct GenericView {
  Op &op;
  int numInputs() const { return static_cast<int>(op.attr("num_inputs").integer()); }
  int numLoops() const { return map(0).numDims; }
  Value *input(int i) const { return op.operands[i]; }
  Value *output() const { return op.operands.back(); }
  const AffineMap &map(int operand) const { return op.attr("indexing_maps").list()[operand].map(); }
  const AffineMap &outputMap() const { return map(numInputs()); }
  bool isReduction(int dim) const {
    return op.attr("iterator_types").list()[dim].string() == "reduction";
  }
  bool allParallel() const;
  Block &body() const { return *op.regions[0]; }
};

/// The lowering choices an author set on one op (linalg.matmul, linalg.batch_matmul,
/// linalg.generic, iree_linalg_ext.attention), as `--config=` text; the generics the op becomes
/// carry it. It wins over `--config` for the contractions of that op.
inline constexpr const char *kConfigAttr = "frank.config";

/// `frank.visible_keys = [query dim, key dim, period, offset]` on a generic (CausalMask.h): its
/// points whose key dim's index passes (the query's index mod period) + offset may be skipped,
/// since what they add is exactly 0 or what they write is read only by points that skip too.
/// Generalize sets it, when a causal mask hides those keys, on an attention's scores, its
/// softmax up to the sum of the exponentials (the normalization writes 0 there) and its weighted
/// sum. With blocks of queries, `[..., block dim, rows]`: the query's
/// index is block * rows + the query dim's. Over runtime sizes, `[..., block dim, rows, divisor,
/// key coefficient, period coefficient]` (CausalBound): the period is the query dim's extent over
/// the divisor (0: `period`), and the offset adds the coefficients times the key dim's extent
/// and the period.
inline constexpr const char *kVisibleKeysAttr = "frank.visible_keys";
struct VisibleKeys {
  int query = 0, key = 0;
  int64_t period = 1, offset = 0;
  int block = -1; // -1: none
  int64_t blockRows = 0;
  int64_t periodDivisor = 0;
  int64_t keyCoef = 0, periodCoef = 0;
  bool runtime() const { return periodDivisor != 0 || keyCoef != 0 || periodCoef != 0; }
};
std::optional<VisibleKeys> visibleKeys(const Op &generic);
void setVisibleKeys(Op &generic, const VisibleKeys &keys);

/// arith.cmpf / arith.cmpi predicate, e.g. "olt", "eq".
inline const std::string &predicate(const Op &op) { return op.attr("predicate").string(); }

/// arith.constant: a scalar Literal in "value".
inline const Literal &constantValue(const Op &op) {
  return std::get<Literal>(op.attr("value").value);
}

/// linalg.index: the loop dim it reads.
inline int64_t indexDim(const Op &op) { return op.attr("dim").integer(); }

/// util.call: the callee symbol without '@'.
inline const std::string &callee(const Op &op) { return op.attr("callee").string(); }

/// The op as its author wrote it: a generic made from a named op answers with that op's name.
inline std::string displayName(const Op &op) {
  return op.hasAttr("origin") ? op.attr("origin").string() : std::string(op.name());
}

/// tensor.concat: the dim its operands join along.
inline int64_t concatDim(const Op &op) { return op.attr("dimension").integer(); }
/// tensor.concat's result shape from its operands' types (kDynamic where one is unknown). Fails
/// at the op where two operands' known extents differ along another dim, or where the result
/// type's static dims differ from the operands'.
std::vector<int64_t> concatShape(const Op &op, const Type &result);

/// Which of a slice's `sizes` (kDynamic where unknown) a rank-reducing slice whose type has
/// dims `slice` leaves out: static unit sizes, the others matching the slice's dims in order
/// (equal, or one of them dynamic), each size kept where it can be. nullopt where none fits.
std::optional<std::vector<bool>> droppedSliceDims(const std::vector<int64_t> &sizes,
                                                  const std::vector<int64_t> &slice);

/// The parser's droppedSliceDims of a slice as written (one 0 or 1 a dim): the later stages
/// drop the same dims whatever sizes specialization finds.
inline constexpr const char *kDroppedDimsAttr = "dropped_dims";

/// The dims slice op `op` (extract_slice or insert_slice) drops: as parsed, else computed from
/// `sizes` (kDynamic where unknown) and its slice type; nullopt where none fit.
std::optional<std::vector<bool>> droppedSliceDims(const Op &op, const std::vector<int64_t> &sizes);

/// Why `sizes` (kDynamic where unknown) cannot be a slice of type `slice`: the error message.
std::string notRankReducible(const std::vector<int64_t> &sizes, const Type &slice);

bool isTerminator(OpKind kind);
/// Scalar ops whose result depends only on their operands (arith and math).
bool isPureScalarOp(OpKind kind);
bool isMathUnary(OpKind kind);
bool isArithBinary(OpKind kind);
bool isCast(OpKind kind);

} // namespace frank
