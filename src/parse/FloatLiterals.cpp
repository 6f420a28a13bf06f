// Float literals rounded once to their type.
#include "parse/FloatLiterals.h"

#include <llvm/Support/Error.h>

#include <cctype>

namespace frank {

const llvm::fltSemantics &floatSemantics(ElemKind elem) {
  switch (elem) {
  case ElemKind::F16: return llvm::APFloat::IEEEhalf();
  case ElemKind::BF16: return llvm::APFloat::BFloat();
  case ElemKind::F32: return llvm::APFloat::IEEEsingle();
  default: return llvm::APFloat::IEEEdouble();
  }
}

size_t hexDigitsOf(ElemKind elem) {
  return elem == ElemKind::F64 ? 16 : elem == ElemKind::F32 ? 8 : 4;
}

double floatFromBits(uint64_t bits, ElemKind elem) {
  const unsigned width = static_cast<unsigned>(hexDigitsOf(elem) * 4);
  llvm::APFloat value(floatSemantics(elem), llvm::APInt(width, bits));
  bool losesInfo = false;
  value.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return value.convertToDouble();
}

std::optional<double> roundDecimal(std::string_view text, ElemKind elem, bool &overflow) {
  overflow = false;
  // Digits, an optional dot and exponent: APFloat also reads hexadecimal floats and names such
  // as "inf", which are not decimal literals.
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+'))
    digits.remove_prefix(1);
  if (digits.empty() ||
      !(std::isdigit(static_cast<unsigned char>(digits[0])) || digits[0] == '.') ||
      digits.find_first_of("xXpP") != std::string_view::npos)
    return std::nullopt;
  llvm::APFloat value(floatSemantics(elem));
  auto status = value.convertFromString(llvm::StringRef(text.data(), text.size()),
                                        llvm::APFloat::rmNearestTiesToEven);
  if (!status) {
    llvm::consumeError(status.takeError());
    return std::nullopt;
  }
  overflow = (*status & llvm::APFloat::opOverflow) != 0;
  return floatFromBits(value.bitcastToAPInt().getZExtValue(), elem);
}

} // namespace frank
