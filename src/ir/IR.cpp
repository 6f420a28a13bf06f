// Types, maps and the op name table.
#include "ir/Diagnostics.h"
#include "ir/Ops.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace frank {

const char *elemName(ElemKind kind) {
  switch (kind) {
  case ElemKind::F16: return "f16";
  case ElemKind::BF16: return "bf16";
  case ElemKind::F32: return "f32";
  case ElemKind::F64: return "f64";
  case ElemKind::I1: return "i1";
  case ElemKind::I8: return "i8";
  case ElemKind::I16: return "i16";
  case ElemKind::I32: return "i32";
  case ElemKind::I64: return "i64";
  case ElemKind::Index: return "index";
  }
  return "?";
}

bool isFloatElem(ElemKind kind) {
  return kind == ElemKind::F16 || kind == ElemKind::BF16 || kind == ElemKind::F32 ||
         kind == ElemKind::F64;
}

bool stridesOverflow(int64_t elemBytes, const std::vector<int64_t> &shape) {
  int64_t bytes = elemBytes;
  for (int64_t d : shape)
    if (d > 0 && __builtin_mul_overflow(bytes, d, &bytes))
      return true;
  return false;
}

int elemBits(ElemKind kind) {
  switch (kind) {
  case ElemKind::F16:
  case ElemKind::BF16:
  case ElemKind::I16: return 16;
  case ElemKind::F32:
  case ElemKind::I32: return 32;
  case ElemKind::F64:
  case ElemKind::I64:
  case ElemKind::Index: return 64;
  case ElemKind::I1: return 1;
  case ElemKind::I8: return 8;
  }
  return 0;
}

bool Type::hasStaticShape() const {
  return std::none_of(shape.begin(), shape.end(), [](int64_t d) { return d == kDynamic; });
}

int64_t Type::numDynamicDims() const { return std::count(shape.begin(), shape.end(), kDynamic); }

std::string Type::str() const {
  switch (kind) {
  case Kind::Scalar: return elemName(elem);
  case Kind::Opaque: return opaqueName;
  case Kind::Tensor: {
    std::string s = "tensor<";
    for (int64_t d : shape)
      s += (d == kDynamic ? std::string("?") : std::to_string(d)) + "x";
    return s + elemName(elem) + ">";
  }
  }
  return "?";
}

AffineMap AffineMap::identity(int n) {
  AffineMap m;
  m.numDims = n;
  for (int i = 0; i < n; ++i)
    m.results.push_back({false, i});
  return m;
}

bool AffineMap::isProjectedPermutation() const {
  std::vector<bool> seen(numDims, false);
  for (const AffineResult &r : results) {
    if (r.isConstant || seen[r.value])
      return false;
    seen[r.value] = true;
  }
  return true;
}

bool AffineMap::isPermutation() const {
  return isProjectedPermutation() && static_cast<int>(results.size()) == numDims;
}

std::string AffineMap::str() const {
  std::string s = "affine_map<(";
  for (int i = 0; i < numDims; ++i)
    s += fmt::format("{}d{}", i ? ", " : "", i);
  s += ") -> (";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i)
      s += ", ";
    s += results[i].isConstant ? fmt::format("{}", results[i].value)
                               : fmt::format("d{}", results[i].value);
  }
  return s + ")>";
}

Value *Block::addArgument(Type type, std::string name, Location loc) {
  auto v = std::make_unique<Value>();
  v->type = std::move(type);
  v->name = std::move(name);
  v->ownerBlock = this;
  v->index = static_cast<int>(arguments.size());
  v->loc = std::move(loc);
  arguments.push_back(std::move(v));
  return arguments.back().get();
}

Value *Op::addResult(Type type, std::string name) {
  auto v = std::make_unique<Value>();
  v->type = std::move(type);
  v->name = std::move(name);
  v->definingOp = this;
  v->index = static_cast<int>(results.size());
  v->loc = loc;
  results.push_back(std::move(v));
  return results.back().get();
}

Block *Op::addRegion() {
  regions.push_back(std::make_unique<Block>());
  regions.back()->parentOp = this;
  return regions.back().get();
}

const Attribute &Op::attr(const std::string &key) const {
  auto it = attrs.find(key);
  if (it == attrs.end())
    internalError(fmt::format("op '{}' has no attribute '{}'", name(), key));
  return it->second;
}

const char *Op::name() const { return opName(kind); }

FuncOp *ModuleOp::lookup(const std::string &fnName) const {
  for (auto &f : functions)
    if (f->name == fnName)
      return f.get();
  return nullptr;
}

static const char *const kOpNames[] = {
#define FRANK_OP(kind, name) name,
#include "ir/Ops.def"
};

const char *opName(OpKind kind) { return kOpNames[static_cast<int>(kind)]; }

bool lookupOpKind(std::string_view name, OpKind &kind) {
  for (size_t i = 0; i < std::size(kOpNames); ++i)
    if (name == kOpNames[i]) {
      kind = static_cast<OpKind>(i);
      return true;
    }
  return false;
}

std::optional<std::vector<bool>> droppedSliceDims(const std::vector<int64_t> &sizes,
                                                  const std::vector<int64_t> &slice) {
  std::vector<bool> dropped(sizes.size(), false);
  // Sizes from `at` on, against the slice's dims from `kept` on: keeping a size that fits the
  // next dim first, as MLIR matches them ([1, 5, 1] to 1x? keeps the leading 1), else dropping
  // a unit size.
  std::function<bool(size_t, size_t)> match = [&](size_t at, size_t kept) {
    if (at == sizes.size())
      return kept == slice.size();
    if (kept < slice.size() &&
        (sizes[at] == slice[kept] || sizes[at] == kDynamic || slice[kept] == kDynamic) &&
        match(at + 1, kept + 1))
      return true;
    if (sizes[at] != 1)
      return false;
    dropped[at] = true;
    if (match(at + 1, kept))
      return true;
    dropped[at] = false;
    return false;
  };
  if (sizes.size() < slice.size() || !match(0, 0))
    return std::nullopt;
  return dropped;
}

std::optional<std::vector<bool>> droppedSliceDims(const Op &op, const std::vector<int64_t> &sizes) {
  if (op.hasAttr(kDroppedDimsAttr)) {
    std::vector<bool> dropped;
    for (const Attribute &d : op.attr(kDroppedDimsAttr).list())
      dropped.push_back(d.integer() != 0);
    return dropped;
  }
  const Type &slice =
      op.kind == OpKind::TensorInsertSlice ? op.operands[0]->type : op.result()->type;
  return droppedSliceDims(sizes, slice.shape);
}

std::string notRankReducible(const std::vector<int64_t> &sizes, const Type &slice) {
  std::vector<std::string> words;
  for (int64_t size : sizes)
    words.push_back(size == kDynamic ? "?" : std::to_string(size));
  return fmt::format("sizes [{}] cannot be rank-reduced to '{}'", fmt::join(words, ", "),
                     slice.str());
}

std::vector<int64_t> concatShape(const Op &op, const Type &result) {
  const int64_t dim = concatDim(op);
  std::vector<int64_t> shape = op.operands[0]->type.shape;
  for (size_t i = 1; i < op.operands.size(); ++i) {
    const Type &t = op.operands[i]->type;
    for (int64_t d = 0; d < t.rank(); ++d) {
      if (d == dim) {
        shape[d] =
            shape[d] == kDynamic || t.shape[d] == kDynamic ? kDynamic : shape[d] + t.shape[d];
        continue;
      }
      if (shape[d] == kDynamic)
        shape[d] = t.shape[d];
      else if (t.shape[d] != kDynamic && t.shape[d] != shape[d])
        fail(op.loc, fmt::format("'tensor.concat' operand #{} (%{}) has {} along dim {} where the "
                                 "others have {}",
                                 i, op.operands[i]->name, t.shape[d], d, shape[d]));
    }
  }
  for (int64_t d = 0; d < result.rank(); ++d)
    if (result.shape[d] != kDynamic && shape[d] != kDynamic && result.shape[d] != shape[d])
      fail(op.loc, fmt::format("dim {} of '{}' is {} but the operands give {}", d, result.str(),
                               result.shape[d], shape[d]));
  return shape;
}

bool GenericView::allParallel() const {
  for (int d = 0; d < numLoops(); ++d)
    if (isReduction(d))
      return false;
  return true;
}

std::optional<VisibleKeys> visibleKeys(const Op &generic) {
  if (!generic.hasAttr(kVisibleKeysAttr))
    return std::nullopt;
  const AttrList &values = generic.attr(kVisibleKeysAttr).list();
  VisibleKeys keys{int(values[0].integer()), int(values[1].integer()), values[2].integer(),
                   values[3].integer()};
  if (values.size() >= 6) {
    keys.block = int(values[4].integer());
    keys.blockRows = values[5].integer();
  }
  if (values.size() == 9) {
    keys.periodDivisor = values[6].integer();
    keys.keyCoef = values[7].integer();
    keys.periodCoef = values[8].integer();
  }
  return keys;
}

void setVisibleKeys(Op &generic, const VisibleKeys &keys) {
  AttrList values{Attribute{int64_t{keys.query}}, Attribute{int64_t{keys.key}},
                  Attribute{keys.period}, Attribute{keys.offset}};
  if (keys.block >= 0 || keys.runtime()) {
    values.push_back(Attribute{int64_t{keys.block}});
    values.push_back(Attribute{keys.blockRows});
  }
  if (keys.runtime())
    for (int64_t v : {keys.periodDivisor, keys.keyCoef, keys.periodCoef})
      values.push_back(Attribute{v});
  generic.attrs[kVisibleKeysAttr] = Attribute{values};
}

bool isTerminator(OpKind kind) {
  return kind == OpKind::LinalgYield || kind == OpKind::Return || kind == OpKind::FlowReturn ||
         kind == OpKind::ExtYield || kind == OpKind::ScfYield;
}

bool isMathUnary(OpKind kind) {
  switch (kind) {
  case OpKind::Exp:
  case OpKind::Exp2:
  case OpKind::Log:
  case OpKind::Sqrt:
  case OpKind::Rsqrt:
  case OpKind::Tanh:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Erf:
  case OpKind::AbsF:
  case OpKind::NegF: return true;
  default: return false;
  }
}

bool isArithBinary(OpKind kind) {
  switch (kind) {
  case OpKind::AddF:
  case OpKind::SubF:
  case OpKind::MulF:
  case OpKind::DivF:
  case OpKind::RemF:
  case OpKind::MaximumF:
  case OpKind::MinimumF:
  case OpKind::PowF:
  case OpKind::AddI:
  case OpKind::SubI:
  case OpKind::MulI:
  case OpKind::DivSI:
  case OpKind::DivUI:
  case OpKind::RemSI:
  case OpKind::RemUI:
  case OpKind::AndI:
  case OpKind::OrI:
  case OpKind::XOrI:
  case OpKind::MaxSI:
  case OpKind::MinSI: return true;
  default: return false;
  }
}

bool isCast(OpKind kind) {
  switch (kind) {
  case OpKind::IndexCast:
  case OpKind::SIToFP:
  case OpKind::UIToFP:
  case OpKind::FPToSI:
  case OpKind::TruncI:
  case OpKind::ExtSI:
  case OpKind::ExtUI:
  case OpKind::ExtF:
  case OpKind::TruncF: return true;
  default: return false;
  }
}

bool isPureScalarOp(OpKind kind) {
  return kind == OpKind::ArithConstant || isMathUnary(kind) || isArithBinary(kind) ||
         isCast(kind) || kind == OpKind::CmpF || kind == OpKind::CmpI || kind == OpKind::Select;
}

} // namespace frank
