// \file The execution engine: LLVM ORC LLJIT for the host CPU (or another, for printing), the
// kernel optimization pipeline, and assembly output. No LLVM type appears here; including ORC and
// the pass builder is slow, so only Engine.cpp does.
#pragma once

#include "codegen/Codegen.h"
#include "loops/LoopIR.h"
#include "loops/Strategy.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace frank::jit {

/// The kernel entry point (see codegen/Codegen.h for the ABI).
using EntryFn = void (*)(void *const *buffers, const int64_t *dims, const uint64_t *scalars,
                         void *workspace, int64_t *status);

enum class Output { LLVM, OptimizedLLVM, Assembly };

class Engine {
public:
  /// The process-wide engine for the host, created on first use.
  static Engine &instance();
  /// The process-wide engine for `cpu`, LLVM's name of a CPU of the host's architecture
  /// (skylake-avx512, znver3), or the host's when empty. An unknown name is an Error. Another
  /// CPU's kernels can always be printed, and run only where the host has its features.
  static Engine &forCpu(const std::string &cpu);
  /// Throws an Error naming the features the host lacks, if this engine's kernels need any.
  void checkRunsOnHost() const;

  /// Generates, optimizes and JIT-compiles `program`, a large kernel in parts on two threads
  /// (see codegen/SplitKernel.h). Thread-safe. `printAfter` sees the LLVM IR after codegen and
  /// after optimization (every part's). `object`, if given, receives the objects the JIT linked as
  /// one payload for the disk cache (left empty if this process already had the kernel).
  EntryFn
  compile(const loops::Program &program, const CodegenOptions &options,
          const std::function<void(const std::string &, const std::string &)> &printAfter = {},
          std::string *object = nullptr);

  /// The kernel `name` if this process already compiled or loaded it, else null.
  EntryFn find(const std::string &name);

  /// Links the objects that `compile` produced, in this process or an earlier one, and returns
  /// its kernel `name` (the one already in the JIT, if any). On failure nothing of the objects
  /// stays in the JIT, `error` says why, and the result is null.
  EntryFn load(const std::string &name, std::string_view object, std::string &error);

  /// What besides the CPU name and features decides the machine code a kernel compiles to on
  /// this host (the vector math library's functions, the optimizer's passes): part of the disk
  /// cache key.
  const std::string &hostFingerprint() const;

  /// The text of one compilation stage, without adding anything to the JIT.
  std::string emit(const loops::Program &program, const CodegenOptions &options, Output output);

  /// The CPU's name and features: part of every kernel cache key.
  const std::string &cpuName() const;
  const std::string &cpuFeatures() const;
  /// The CPU's vector registers, for strategy selection.
  loops::Target target() const;
  /// Whether the CPU has AVX2: without it (x86-64's SSE2) the vectorizer's vectors hold 4 floats,
  /// whatever width the strategies chose.
  bool hasAvx2() const;

  ~Engine();

private:
  explicit Engine(const std::string &cpu);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace frank::jit
