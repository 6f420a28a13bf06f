// The op builder.
#include "ir/Builder.h"
#include "ir/Ops.h"

namespace frank {

Op *Builder::create(OpKind kind, std::vector<Value *> operands, std::vector<Type> results,
                    std::map<std::string, Attribute> attrs) {
  auto op = std::make_unique<Op>(kind, loc_);
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  for (Type &t : results)
    op->addResult(std::move(t));
  op->parentBlock = &block_;
  Op *raw = op.get();
  block_.ops.insert(block_.ops.begin() + at_, std::move(op));
  ++at_;
  return raw;
}

Op *Builder::insert(std::unique_ptr<Op> op) {
  op->parentBlock = &block_;
  Op *raw = op.get();
  block_.ops.insert(block_.ops.begin() + at_, std::move(op));
  ++at_;
  return raw;
}

Value *Builder::constantIndex(int64_t v) {
  return create(OpKind::ArithConstant, {}, {Type::scalar(ElemKind::Index)},
                {{"value", Attribute{Literal{Literal::Kind::Int, v, 0}}}})
      ->result();
}

Value *Builder::constantFloat(double v, ElemKind type) {
  return create(OpKind::ArithConstant, {}, {Type::scalar(type)},
                {{"value", Attribute{Literal{Literal::Kind::Float, 0, v}}}})
      ->result();
}

Value *Builder::dim(Value *tensor, int64_t d) {
  if (tensor->type.shape[d] != kDynamic)
    return constantIndex(tensor->type.shape[d]);
  Value *index = constantIndex(d);
  return create(OpKind::TensorDim, {tensor, index}, {Type::scalar(ElemKind::Index)})->result();
}

Value *Builder::empty(const Type &type, const std::vector<std::pair<Value *, int64_t>> &sources) {
  std::vector<Value *> sizes;
  for (int64_t d = 0; d < type.rank(); ++d)
    if (type.shape[d] == kDynamic)
      sizes.push_back(dim(sources[d].first, sources[d].second));
  return create(OpKind::TensorEmpty, sizes, {type})->result();
}

Value *Builder::reshape(Value *src, const std::vector<std::vector<int64_t>> &groups, const Type &to,
                        const std::string &name) {
  const bool expand = to.rank() > src->type.rank();
  AttrList reassociation;
  for (const auto &group : groups) {
    AttrList dims;
    for (int64_t d : group)
      dims.push_back(Attribute{d});
    reassociation.push_back(Attribute{dims});
  }
  std::map<std::string, Attribute> attrs{{"reassociation", Attribute{reassociation}}};
  if (expand) {
    if (!to.hasStaticShape())
      internalError("Builder::reshape expands into a dynamic shape");
    AttrList sizes;
    for (int64_t size : to.shape)
      sizes.push_back(Attribute{size});
    attrs["static_output_shape"] = Attribute{sizes};
  }
  Value *view =
      create(expand ? OpKind::TensorExpandShape : OpKind::TensorCollapseShape, {src}, {to}, attrs)
          ->result();
  view->name = name;
  return view;
}

Value *Builder::fill(Value *scalar, Value *tensor) {
  return create(OpKind::LinalgFill, {scalar, tensor}, {tensor->type})->result();
}

Value *Builder::binary(OpKind kind, Value *a, Value *b) {
  return create(kind, {a, b}, {a->type})->result();
}
Value *Builder::unary(OpKind kind, Value *a) { return create(kind, {a}, {a->type})->result(); }
Value *Builder::cmpf(const std::string &predicate, Value *a, Value *b) {
  return create(OpKind::CmpF, {a, b}, {Type::scalar(ElemKind::I1)},
                {{"predicate", Attribute{predicate}}})
      ->result();
}
Value *Builder::select(Value *c, Value *a, Value *b) {
  return create(OpKind::Select, {c, a, b}, {a->type})->result();
}
Value *Builder::cast(OpKind kind, Value *a, ElemKind to) {
  return create(kind, {a}, {Type::scalar(to)})->result();
}
Value *Builder::extract(Value *tensor, std::vector<Value *> indices) {
  indices.insert(indices.begin(), tensor);
  return create(OpKind::TensorExtract, indices, {Type::scalar(tensor->type.elem)})->result();
}
Value *Builder::linalgIndex(int64_t dim) {
  return create(OpKind::LinalgIndex, {}, {Type::scalar(ElemKind::Index)}, {{"dim", Attribute{dim}}})
      ->result();
}

Value *Builder::generic(std::vector<Value *> inputs, Value *output, std::vector<AffineMap> maps,
                        std::vector<bool> reductionDims, const BodyFn &body,
                        const std::string &name) {
  AttrList mapAttrs, iterators;
  for (AffineMap &m : maps)
    mapAttrs.push_back(Attribute{std::move(m)});
  for (bool r : reductionDims)
    iterators.push_back(Attribute{std::string(r ? "reduction" : "parallel")});
  std::vector<Value *> operands = inputs;
  operands.push_back(output);
  Op *op = create(OpKind::LinalgGeneric, operands, {output->type},
                  {{"indexing_maps", Attribute{mapAttrs}},
                   {"iterator_types", Attribute{iterators}},
                   {"num_inputs", Attribute{static_cast<int64_t>(inputs.size())}}});
  op->result()->name = name;
  Block *region = op->addRegion();
  std::vector<Value *> args;
  for (Value *v : operands)
    args.push_back(region->addArgument(Type::scalar(v->type.elem), "in", loc_));
  Builder inner(*region, 0, loc_);
  Value *yielded = body(inner, args);
  inner.create(OpKind::LinalgYield, {yielded}, {});
  return op->result();
}

AffineMap mapOf(int numDims, const std::vector<int> &dims) {
  AffineMap m;
  m.numDims = numDims;
  for (int d : dims)
    m.results.push_back(d < 0 ? AffineResult{true, 0} : AffineResult{false, d});
  return m;
}

} // namespace frank
