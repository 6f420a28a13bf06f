// Linked into every test binary: the suite never reads or writes the user's disk kernel cache,
// however it is run (ctest or the binary itself). A stale or foreign entry there would make
// results depend on earlier runs; tests that exercise the disk cache turn it on explicitly,
// in directories of their own.
#include <cstdlib>

namespace {

const bool isolated = [] {
  ::setenv("FRANK_CACHE", "off", 1);
  ::setenv("FRANK_CACHE_DIR", FRANK_TEST_CACHE_DIR, 1);
  ::unsetenv("FRANK_CACHE_MAX_BYTES");
  return true;
}();

} // namespace
