// Fuzzes specialization and lowering: a valid function (every public function of components/
// and tests/data), called with fuzzed shapes and integer values under one of a few lowering
// configurations, is specialized and lowered to loop IR or to LLVM IR (not JIT-compiled: that
// costs tens of milliseconds per input). Shapes that do not fit must end in a frank::Error; an
// internal compiler error, any other exception, a crash or a sanitizer report is a bug.
//
// Input bytes, read from the front (missing bytes read as 0):
//   [0]  the function, modulo their number
//   [1]  bits 0-2: the configuration; bit 3: generic mode; bit 4: emit LLVM IR instead of loop IR;
//        bit 5: every argument is followed by one more byte that may change its rank or type;
//        bit 6: partial specialization, and one more byte follows: bit i set keeps the i-th
//        dynamic dim given a size of its own (below) a runtime value, `?`
//   then per argument:
//     tensor: one byte per dim. A dynamic dim is 0..64 for a byte below 0xC0 (byte % 65), else a
//             dim chosen earlier (so shapes agree as often as they must; a runtime dim's copies
//             are runtime too). A static dim is kept for a byte below 0xF8, else replaced by
//             byte - 0xF8.
//     integer or index scalar: one byte: below 0x40 an earlier dim (no value if it is a
//             runtime dim), up to 0xEF a value in
//             -8..71, up to 0xFD an extreme value, 0xFE eight more bytes (little-endian), 0xFF
//             no value (a runtime value).
//     i1: one byte: 0xFF no value, else bit 0.
//     float scalars take no byte (their values never change the kernel).
#include "frank/Frank.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace {

struct Target {
  frank::Function function;
  std::vector<std::string> argTypes; // as MLIR spells them: "tensor<?x4xf32>", "index", "f32"
};

// Lowering configurations, picked by the input: the strategy selection, no bounds checks, and
// overrides of the contraction pipelines (fitting or not: the latter must be errors).
struct Options {
  bool boundsChecks;
  const char *loweringConfig;
};
const Options kOptions[] = {
    {true, ""},
    {false, ""},
    {true, "pipeline=loops"},
    {true, "tile=1x1,k-block=1,pack=1"},
    {true, "tile=3x1,k-block=4,pack=0"},
    {true, "pipeline=contraction.dot"},
    {true, "pipeline=contraction.outer,tile=3x5,k-block=7"},
    {false, "tile=6x2,k-block=256,pack=1"},
};
constexpr size_t kConfigs = std::size(kOptions);

std::vector<frank::Context> *contexts;
std::vector<std::vector<Target>> *targets; // per configuration, the same functions in order

std::vector<std::string> sourceFiles() {
  std::vector<std::string> files;
  for (const char *dir : {FRANK_COMPONENTS_DIR, FRANK_TESTS_DATA_DIR})
    for (const auto &entry : std::filesystem::recursive_directory_iterator(dir))
      if (entry.path().extension() == ".mlir")
        files.push_back(entry.path().string());
  std::sort(files.begin(), files.end()); // the first byte must name the same function every run
  return files;
}

class Reader {
public:
  Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t word() {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i)
      value |= uint64_t{byte()} << (8 * i);
    return value;
  }

private:
  const uint8_t *data_;
  size_t size_;
  size_t pos_ = 0;
};

const int64_t kExtremes[] = {std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(),
                             int64_t{1} << 32,
                             -(int64_t{1} << 32),
                             int64_t{1} << 62,
                             int64_t{1} << 31,
                             -1,
                             4096,
                             65537,
                             std::numeric_limits<int64_t>::min() + 1,
                             std::numeric_limits<int64_t>::max() - 1,
                             1000003};

/// "tensor<?x4xf32>" -> dims {"?", "4"} and element "f32"; scalars have no dims.
void splitType(const std::string &type, std::vector<std::string> &dims, std::string &elem) {
  dims.clear();
  elem = type;
  if (type.rfind("tensor<", 0) != 0)
    return;
  std::string body = type.substr(7, type.size() - 8);
  size_t start = 0;
  for (size_t x; (x = body.find('x', start)) != std::string::npos; start = x + 1)
    dims.push_back(body.substr(start, x - start));
  elem = body.substr(start);
}

// A dim of the pool that stays a runtime value.
constexpr int64_t kRuntimeDim = -1;

std::vector<std::string> argumentsFor(const Target &target, Reader &in, bool mutate,
                                      uint8_t runtimeMask) {
  std::vector<int64_t> pool; // the dims chosen so far, or kRuntimeDim
  int freshDims = 0;
  std::vector<std::string> args;
  std::vector<std::string> dims;
  std::string elem;
  for (const std::string &declared : target.argTypes) {
    splitType(declared, dims, elem);
    std::string arg;
    bool tensor = declared.rfind("tensor<", 0) == 0;
    if (tensor) {
      for (const std::string &dim : dims) {
        uint8_t b = in.byte();
        int64_t value = 0;
        if (dim != "?")
          value = b < 0xF8 ? std::stoll(dim) : b - 0xF8;
        else if (b < 0xC0 || pool.empty())
          value = freshDims < 8 && (runtimeMask >> freshDims++ & 1) ? kRuntimeDim : b % 65;
        else
          value = pool[(b - 0xC0) % pool.size()];
        pool.push_back(value);
        arg += value == kRuntimeDim ? "?x" : fmt::format("{}x", value);
      }
      arg += elem;
    } else if (elem == "i1") {
      uint8_t b = in.byte();
      arg = b == 0xFF ? "i1" : fmt::format("i1={}", (b & 1) ? "true" : "false");
    } else if (elem[0] == 'i') { // index and integers
      uint8_t b = in.byte();
      const bool runtimeDim = b < 0x40 && !pool.empty() && pool[b % pool.size()] == kRuntimeDim;
      if (b == 0xFF || runtimeDim) {
        arg = elem;
      } else {
        int64_t value = 0;
        if (b < 0x40)
          value = pool.empty() ? b : pool[b % pool.size()];
        else if (b < 0xF0)
          value = (b - 0x40) % 80 - 8;
        else if (b < 0xFE)
          value = kExtremes[b - 0xF0];
        else
          value = static_cast<int64_t>(in.word());
        arg = fmt::format("{}={}", elem, value);
      }
    } else {
      arg = elem; // floats are runtime values in every mode
    }
    if (mutate) {
      uint8_t b = in.byte();
      if (b == 1 && tensor && !dims.empty())
        arg.erase(0, arg.find('x') + 1); // one dim fewer
      else if (b == 2)
        arg.insert(0, "3x"); // one dim more (a scalar becomes a tensor)
      else if (b == 3)
        arg = arg.substr(0, arg.rfind(elem)) + (elem == "f32" ? "f16" : "f32");
    }
    args.push_back(arg);
  }
  return args;
}

[[noreturn]] void bug(const char *what, const Target &target, const std::vector<std::string> &args,
                      const std::string &detail) {
  std::fprintf(stderr, "fuzz_specialize: %s in @%s(%s)\n%s\n", what, target.function.name().c_str(),
               fmt::format("{}", fmt::join(args, ", ")).c_str(), detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  contexts = new std::vector<frank::Context>();
  targets = new std::vector<std::vector<Target>>(kConfigs);
  std::vector<std::string> files = sourceFiles();
  for (size_t c = 0; c < kConfigs; ++c) {
    frank::ContextOptions options;
    options.boundsChecks = kOptions[c].boundsChecks;
    options.loweringConfig = kOptions[c].loweringConfig;
    options.diskCache = false; // nothing here runs a kernel
    frank::Context &context = contexts->emplace_back(options);
    for (const std::string &file : files) {
      frank::Module module = context.load(file);
      for (const std::string &name : module.functionNames()) {
        frank::Function function = module.function(name);
        (*targets)[c].push_back({function, function.argumentTypes()});
      }
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader in(data, size);
  const auto &functions = (*targets)[0];
  size_t index = in.byte() % functions.size();
  uint8_t flags = in.byte();
  const Target &target = (*targets)[(flags & 7) % kConfigs][index];
  frank::Mode mode = (flags & 8) ? frank::Mode::Generic : frank::Mode::Specialized;
  frank::Stage stage = (flags & 16) ? frank::Stage::LLVM : frank::Stage::Loops;
  const uint8_t runtimeMask = (flags & 64) ? in.byte() : 0;
  std::vector<std::string> args = argumentsFor(target, in, (flags & 32) != 0, runtimeMask);
  // FRANK_FUZZ_VERBOSE=1 prints each call and its outcome (to check what seeds reach).
  static const bool verbose = std::getenv("FRANK_FUZZ_VERBOSE") != nullptr;
  if (verbose)
    std::fprintf(stderr, "@%s(%s) config %zu, %s, %s: ", target.function.name().c_str(),
                 fmt::format("{}", fmt::join(args, ", ")).c_str(), (flags & 7) % kConfigs,
                 mode == frank::Mode::Generic ? "generic" : "specialized",
                 stage == frank::Stage::LLVM ? "llvm" : "loops");
  try {
    std::string text = target.function.emit(stage, args, mode);
    if (text.empty())
      bug("empty output", target, args, "");
    if (verbose)
      std::fprintf(stderr, "ok\n");
  } catch (const frank::Error &error) {
    if (dynamic_cast<const frank::InternalError *>(&error))
      bug("internal compiler error", target, args, error.what());
    if (verbose)
      std::fprintf(stderr, "%s\n", error.what());
  }
  return 0;
}
