// Integer op semantics on constants.
#include "ir/IntegerSemantics.h"

#include <limits>

namespace frank {

int64_t wrapToType(int64_t v, ElemKind type) {
  int bits = elemBits(type);
  if (bits >= 64)
    return v;
  uint64_t mask = (uint64_t{1} << bits) - 1, u = static_cast<uint64_t>(v) & mask;
  if (type != ElemKind::I1 && (u >> (bits - 1)))
    u |= ~mask;
  return static_cast<int64_t>(u);
}

static uint64_t unsignedOf(int64_t v, ElemKind type) {
  int bits = elemBits(type);
  return bits >= 64 ? static_cast<uint64_t>(v)
                    : static_cast<uint64_t>(v) & ((uint64_t{1} << bits) - 1);
}

bool isIntegerDivision(OpKind op) {
  return op == OpKind::DivSI || op == OpKind::DivUI || op == OpKind::RemSI || op == OpKind::RemUI;
}

bool signedDivisionOverflows(OpKind op, ElemKind type, int64_t dividend, int64_t divisor) {
  if (op != OpKind::DivSI && op != OpKind::RemSI)
    return false;
  const int64_t smallest = std::numeric_limits<int64_t>::min() >> (64 - elemBits(type));
  return wrapToType(dividend, type) == wrapToType(smallest, type) &&
         wrapToType(divisor, type) == wrapToType(-1, type);
}

std::optional<int64_t> foldInteger(OpKind op, ElemKind operandType, ElemKind resultType,
                                   llvm::ArrayRef<int64_t> v, const std::string &predicate) {
  auto u = [&](size_t i) { return unsignedOf(v[i], operandType); };
  // i1 holds 0 and 1, but signed ops read true as -1, as LLVM's would.
  auto s = [&](size_t i) { return operandType == ElemKind::I1 ? -(v[i] & 1) : v[i]; };
  auto wrapped = [&](uint64_t r) { return wrapToType(static_cast<int64_t>(r), resultType); };
  switch (op) {
  case OpKind::AddI: return wrapped(u(0) + u(1));
  case OpKind::SubI: return wrapped(u(0) - u(1));
  case OpKind::MulI: return wrapped(u(0) * u(1));
  // The most negative value divided by -1 wraps to itself, as the hardware's would overflow.
  case OpKind::DivSI: return s(1) == -1 ? wrapped(0 - u(0)) : wrapToType(s(0) / s(1), resultType);
  case OpKind::RemSI: return s(1) == -1 ? 0 : wrapToType(s(0) % s(1), resultType);
  case OpKind::DivUI: return wrapped(u(0) / u(1));
  case OpKind::RemUI: return wrapped(u(0) % u(1));
  case OpKind::MaxSI: return wrapToType(std::max(s(0), s(1)), resultType);
  case OpKind::MinSI: return wrapToType(std::min(s(0), s(1)), resultType);
  case OpKind::AndI: return v[0] & v[1];
  case OpKind::OrI: return v[0] | v[1];
  case OpKind::XOrI: return wrapToType(v[0] ^ v[1], resultType);
  case OpKind::IndexCast:
  case OpKind::ExtSI:
  case OpKind::TruncI: return wrapToType(s(0), resultType);
  case OpKind::ExtUI: return static_cast<int64_t>(u(0));
  case OpKind::Select: return v[0] ? v[1] : v[2];
  case OpKind::CmpI: {
    const std::string &p = predicate;
    if (p == "eq")
      return v[0] == v[1];
    if (p == "ne")
      return v[0] != v[1];
    if (p == "slt")
      return s(0) < s(1);
    if (p == "sle")
      return s(0) <= s(1);
    if (p == "sgt")
      return s(0) > s(1);
    if (p == "sge")
      return s(0) >= s(1);
    if (p == "ult")
      return u(0) < u(1);
    if (p == "ule")
      return u(0) <= u(1);
    if (p == "ugt")
      return u(0) > u(1);
    if (p == "uge")
      return u(0) >= u(1);
    return std::nullopt;
  }
  default: return std::nullopt;
  }
}

} // namespace frank
