// Fuzzes the parser and the verifier with arbitrary text. Malformed input must end in a
// frank::Error (never a crash, hang, leak or sanitizer report), and an internal compiler error
// is a bug. Text that is accepted must print as MLIR that parses back to the same printed IR.
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "link/Linker.h"
#include "parse/Parser.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

bool isInternalError(const frank::Error &error) {
  return dynamic_cast<const frank::InternalError *>(&error) != nullptr;
}

[[noreturn]] void bug(const char *what, const std::string &detail) {
  std::fprintf(stderr, "fuzz_parse: %s\n%s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string printed;
  try {
    auto module = frank::parseString(text, "fuzz.mlir");
    // No link sources: a declaration is an error, a module without any links unchanged.
    frank::linkModule(*module, {});
    frank::verifyModule(*module);
    printed = frank::printModule(*module);
  } catch (const frank::Error &error) {
    if (isInternalError(error))
      bug("internal compiler error", error.what());
    return 0;
  }
  try {
    auto reparsed = frank::parseString(printed, "printed.mlir");
    frank::verifyModule(*reparsed);
    std::string again = frank::printModule(*reparsed);
    if (again != printed)
      bug("the printed module prints differently after parsing it back",
          fmt::format("first:\n{}\nsecond:\n{}", printed, again));
  } catch (const frank::Error &error) {
    bug("the printed module does not parse back", fmt::format("{}\n{}", printed, error.what()));
  }
  return 0;
}
