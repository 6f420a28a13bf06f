// Argument checks shared by both compilation modes.
#include "Signature.h"

namespace frank {

std::string ArgSpec::str() const {
  if (type.isTensor()) {
    std::string s;
    for (int64_t d : type.shape)
      s += (d == kDynamic ? std::string("?") : std::to_string(d)) + "x";
    return s + elemName(type.elem);
  }
  if (intValue)
    return fmt::format("{}={}", type.str(), *intValue);
  return type.str();
}

std::string argumentName(const FuncOp &fn, size_t i) {
  if (fn.body && !fn.body->arguments[i]->name.empty())
    return fmt::format("argument #{} (%{})", i, fn.body->arguments[i]->name);
  return fmt::format("argument #{}", i);
}

void checkArguments(const FuncOp &fn, const std::vector<ArgSpec> &args) {
  const std::string where = fmt::format("in call to '@{}'", fn.name);
  if (args.size() != fn.argTypes.size())
    throw Error(fmt::format("error: {}: expected {} arguments, got {}", where, fn.argTypes.size(),
                            args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    const Type &want = fn.argTypes[i];
    const Type &got = args[i].type;
    std::string arg = argumentName(fn, i);
    if (want.isTensor() != got.isTensor() || want.kind == Type::Kind::Opaque)
      throw Error(fmt::format("error: {}: {} has type '{}' but was given '{}'", where, arg,
                              want.str(), args[i].str()));
    if (want.elem != got.elem)
      throw Error(fmt::format("error: {}: {} has element type {} but was given {} ('{}')", where,
                              arg, elemName(want.elem), elemName(got.elem), args[i].str()));
    if (!want.isTensor())
      continue;
    if (want.rank() != got.rank())
      throw Error(fmt::format("error: {}: {} has rank {} ('{}') but was given rank {} ('{}')",
                              where, arg, want.rank(), want.str(), got.rank(), args[i].str()));
    for (int64_t d = 0; d < want.rank(); ++d) {
      if (got.shape[d] == kDynamic && want.shape[d] != kDynamic)
        throw Error(fmt::format("error: {}: {} dim {} is {} in the signature ('{}'); only a "
                                "dynamic dim can stay a runtime value",
                                where, arg, d, want.shape[d], want.str()));
      if (got.shape[d] < 0 && got.shape[d] != kDynamic)
        throw Error(
            fmt::format("error: {}: {} dim {} has negative size {}", where, arg, d, got.shape[d]));
      if (want.shape[d] != kDynamic && want.shape[d] != got.shape[d])
        throw Error(fmt::format("error: {}: {} dim {} is {} in the signature ('{}') but was "
                                "given {}",
                                where, arg, d, want.shape[d], want.str(), got.shape[d]));
    }
  }
}

} // namespace frank
