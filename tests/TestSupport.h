// Shared test helpers: component paths, guarded output buffers.
#pragma once

#include "Engine.h"
#include "frank/Frank.h"

#include <gtest/gtest.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/TargetParser/Host.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace frank::test {

/// One context per test binary, so that tests reuse each other's kernels.
inline Context &context() {
  static Context ctx;
  return ctx;
}

/// The CPUs the tests of each target's loop IR, LLVM IR and assembly generate code for, whatever
/// the host (the kernels run only where it has their features).
inline constexpr const char *kAvx512Cpu = "skylake-avx512";
inline constexpr const char *kAvx2Cpu = "x86-64-v3";

/// The CPU a context with no `cpu` option generates code for: $FRANK_CPU, else the host's.
inline std::string targetCpu() {
  const char *cpu = std::getenv("FRANK_CPU");
  return cpu ? cpu : llvm::sys::getHostCPUName().str();
}

/// The engine of a context with no `cpu` option: $FRANK_CPU's, else the host's.
inline jit::Engine &engineOfContexts() {
  const char *cpu = std::getenv("FRANK_CPU");
  return jit::Engine::forCpu(cpu ? cpu : "");
}

/// The vector registers strategies are selected for in a context with no `cpu` option.
inline loops::Target targetOfContexts() { return engineOfContexts().target(); }

/// The widths of the float vectors in the kernels of a context with no `cpu` option, as a regex
/// group: 8 or 16 lanes with AVX2 or AVX-512, SSE's 4 without AVX2 (x86-64).
inline std::string floatVectorWidths() { return engineOfContexts().hasAvx2() ? "(8|16)" : "(4)"; }

/// Options whose `--config=` text is `config`.
inline ContextOptions withConfig(std::string config) {
  ContextOptions options;
  options.loweringConfig = std::move(config);
  return options;
}

/// Options that generate code for `cpu`, with `--config=` text `config`.
inline ContextOptions forCpu(std::string cpu, std::string config = {}) {
  ContextOptions options = withConfig(std::move(config));
  options.cpu = std::move(cpu);
  return options;
}

/// A context that generates code for kAvx512Cpu.
inline Context &avx512Context() {
  static Context ctx(forCpu(kAvx512Cpu));
  return ctx;
}

inline std::string modeName(Mode m) { return m == Mode::Specialized ? "specialized" : "generic"; }

inline std::string componentPath(const std::string &relative) {
  return std::string(FRANK_TESTS_DIR) + "/../components/" + relative;
}

/// Replaces every occurrence of `from` in `text`.
inline std::string replaceAll(std::string text, const std::string &from, const std::string &to) {
  for (size_t at = text.find(from); !from.empty() && at != std::string::npos;
       at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// A component's text with every `from` replaced by `to`: a variant of it for one test.
inline std::string componentTextWith(const std::string &relative, const std::string &from,
                                     const std::string &to) {
  std::ifstream file(componentPath(relative), std::ios::binary);
  std::string text(std::istreambuf_iterator<char>(file), {});
  EXPECT_NE(text.find(from), std::string::npos) << relative << " has no '" << from << "'";
  return replaceAll(std::move(text), from, to);
}

/// linalg.softmax over the rows of a 2-D f32 tensor of any size, as @softmax.
inline constexpr const char *kRowSoftmaxModule = R"(
    func.func @softmax(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %a = tensor.dim %x, %c0 : tensor<?x?xf32>
      %b = tensor.dim %x, %c1 : tensor<?x?xf32>
      %e = tensor.empty(%a, %b) : tensor<?x?xf32>
      %r = linalg.softmax dimension(1) ins(%x : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
      return %r : tensor<?x?xf32>
    })";

/// How many times `what` occurs in `text` (functions in LLVM IR, statements in loop IR).
inline int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// An f32 output tensor with guard regions before and after it. Tiling and tail bugs that
/// write out of bounds change a guard, which `guardsIntact` reports.
class GuardedOutput {
public:
  static constexpr int64_t kGuard = 64;            // elements on each side (256 bytes)
  // A signaling NaN: arithmetic never produces one, and adding to it (a read-modify-write past
  // the output) quiets it, where a quiet NaN plus anything is the same NaN.
  static constexpr uint32_t kPattern = 0x7f80dead;

  explicit GuardedOutput(std::vector<int64_t> shape) : shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : shape_)
      n *= d;
    // Keep the tensor itself 64-byte aligned, as the runtime's own outputs are.
    storage_ = Tensor::zeros(DType::F32, {n + 2 * kGuard});
    for (int64_t i = 0; i < n + 2 * kGuard; ++i)
      std::memcpy(storage_.as<float>() + i, &kPattern, 4);
    tensor_ = Tensor::borrow(storage_.as<float>() + kGuard, DType::F32, shape_);
    numel_ = n;
  }

  Tensor &tensor() { return tensor_; }
  const float *data() const { return storage_.as<float>() + kGuard; }

  /// Empty when intact; otherwise says which guard element changed.
  std::string guardsIntact() const {
    const float *all = storage_.as<float>();
    for (int64_t i = 0; i < kGuard; ++i) {
      if (!isPattern(all[i]))
        return "guard element " + std::to_string(kGuard - i) + " before the output was written";
      if (!isPattern(all[kGuard + numel_ + i]))
        return "guard element " + std::to_string(i) + " after the output was written";
    }
    return {};
  }

private:
  static bool isPattern(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits == kPattern;
  }
  std::vector<int64_t> shape_;
  Tensor storage_;
  Tensor tensor_;
  int64_t numel_ = 0;
};

} // namespace frank::test
