// Conversions to bfloat16 (see Bfloat16.h).
#include "runtime/Bfloat16.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace frank::runtime {

uint16_t bfloat16Bits(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x))
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  // Adding half a bfloat16 unit less one, plus the kept part's lowest bit, rounds the dropped
  // half to nearest even, across the subnormal boundary and up to infinity alike.
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t bfloat16Bits(double x) {
  if (std::isnan(x))
    return bfloat16Bits(static_cast<float>(x));
  // Rounded to odd as a float first (the truncated value with its lowest bit set when inexact),
  // then to nearest even: the float keeps more than two extra bits, so this rounds only once.
  float f = static_cast<float>(x);
  if (std::isinf(f) && !std::isinf(x))
    f = std::copysign(std::numeric_limits<float>::max(), f);
  else if (std::fabs(static_cast<double>(f)) > std::fabs(x))
    f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != x)
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1);
  return bfloat16Bits(f);
}

} // namespace frank::runtime

namespace {

_Float16 inHalfRegister(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return h;
}

} // namespace

extern "C" {
_Float16 frank_truncsfbf2(float x) { return inHalfRegister(frank::runtime::bfloat16Bits(x)); }
_Float16 frank_truncdfbf2(double x) { return inHalfRegister(frank::runtime::bfloat16Bits(x)); }
}
