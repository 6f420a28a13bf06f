// The frank-jit C++ API: load components, call their functions on host tensors, and get
// kernels specialized to the shapes they are called with. No LLVM type appears here.
//
//   frank::Context ctx;
//   frank::Module mod = ctx.load("components/normalization/rms_norm.mlir");
//   frank::Function rms = mod.function("rms_norm_linalg");
//   std::vector<frank::Tensor> y = rms({x, w, frank::Scalar::f32(1e-6f)});
#pragma once

#include "frank/Tensor.h"

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace frank {

/// Specialized: every dim and integer argument becomes a constant; one kernel per shape
/// signature. Generic: dims stay runtime values, one straightforward loop nest per op; one
/// kernel per rank and dtype signature (the baseline, and a second implementation to test with).
enum class Mode : uint8_t { Specialized, Generic };

using Arg = std::variant<Tensor, Scalar>;

/// The stages that `Function::emit` can show, in pipeline order.
enum class Stage : uint8_t { Mlir, Specialized, Loops, LLVM, OptimizedLLVM, Assembly };

struct CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;  // each miss compiled one kernel
  uint64_t kernels = 0; // kernels held
  double compileSeconds = 0;
};

namespace detail {
struct ContextImpl;
struct ModuleImpl;
struct KernelImpl;
struct Access;
} // namespace detail

/// A compiled kernel for one signature. Cheap to copy; safe to call from several threads.
class Kernel {
public:
  /// Runs on `args`, allocating the outputs.
  std::vector<Tensor> operator()(const std::vector<Arg> &args) const;
  /// Runs on `args` into caller-provided outputs (shapes and dtypes are checked; outputs may
  /// not overlap the arguments).
  void run(const std::vector<Arg> &args, std::vector<Tensor> &outputs) const;
  /// The output shapes for these arguments.
  std::vector<std::vector<int64_t>> outputShapes(const std::vector<Arg> &args) const;
  /// "32x4096xf32, 4096xf32, f32" (generic kernels show '?' dims).
  std::string signature() const;
  Mode mode() const;
  double compileSeconds() const;
  /// Lines saying which dims and values were baked in.
  const std::vector<std::string> &explanation() const;

private:
  friend struct detail::Access;
  std::shared_ptr<const detail::KernelImpl> impl_;
};

class Function {
public:
  /// Specializes (or finds the cached kernel) for these arguments, then runs it.
  std::vector<Tensor> operator()(const std::vector<Arg> &args, Mode mode = Mode::Specialized) const;
  /// The kernel for arguments like these: their shapes, dtypes and integer values.
  Kernel specialize(const std::vector<Arg> &args, Mode mode = Mode::Specialized) const;
  /// The same from type strings as the command line takes them: "32x4096xf32", "f32",
  /// "index=4", "i1=true".
  Kernel specialize(const std::vector<std::string> &argTypes, Mode mode = Mode::Specialized) const;
  /// The text of one stage for these argument types. `printAfterAll` prefixes the IR after every
  /// pass, as `--print-ir-after-all` does.
  std::string emit(Stage stage, const std::vector<std::string> &argTypes,
                   Mode mode = Mode::Specialized, bool printAfterAll = false) const;

  const std::string &name() const { return name_; }
  /// The declared argument and result types, as MLIR spells them.
  std::vector<std::string> argumentTypes() const;
  std::vector<std::string> resultTypes() const;

private:
  friend class Module;
  std::shared_ptr<const detail::ModuleImpl> module_;
  std::string name_;
};

class Module {
public:
  Function function(const std::string &name) const;
  std::vector<std::string> functionNames() const;
  /// The module as MLIR text (it parses back to the same IR).
  std::string print() const;

private:
  friend class Context;
  friend struct detail::Access;
  std::shared_ptr<const detail::ModuleImpl> impl_;
};

/// Where `Context::load` finds the modules that a file's external declarations
/// (`util.func private @M.f(...)`) name: explicit files, then directories scanned for `.mlir`
/// files indexed by their module symbol. frank-jit's own component library is searched last
/// unless `componentLibrary` is false.
struct LinkOptions {
  std::vector<std::string> files;
  std::vector<std::string> searchPaths;
  bool componentLibrary = true;
};

struct ContextOptions {
  /// Check every data-dependent index (gathers, tensor.extract) before reading: an index out of
  /// range is an error naming the op, instead of a read outside the tensor. Off is faster.
  bool boundsChecks = true;
  /// Hand-set lowering choices for every contraction, as `frank-jit --config=` takes them:
  /// comma-separated `pipeline=loops|contraction.outer|contraction.dot|contraction.gather`,
  /// `tile=MxN` (register tile), `k-block=K` (0: none). Empty: the strategy selection decides.
  /// Checked when the context is made.
  std::string loweringConfig;
};

/// Owns the kernel cache. Kernels are keyed by the module's content hash, the function, the
/// argument signature, the mode and the host CPU; concurrent first calls compile once.
class Context {
public:
  explicit Context(ContextOptions options = {});
  ~Context();
  /// Parses, links (iree-link semantics: declarations bound to public functions of the module
  /// whose symbol they name, transitively, signatures checked) and verifies a component.
  Module load(const std::string &path, const LinkOptions &link = {});
  Module loadString(const std::string &text, const std::string &name = "<string>",
                    const LinkOptions &link = {});
  CacheStats cacheStats() const;
  void clearCache();

private:
  std::shared_ptr<detail::ContextImpl> impl_;
};

/// Threads that kernels' parallel loops use, the caller included. The default is
/// FRANK_NUM_THREADS, or else the number of hardware threads; 1 runs every kernel serially.
int numThreads();
void setNumThreads(int threads);

/// Parses a command-line style type: "32x4096xf32" (tensor), "f32", "index=4", "i1=true".
/// Returns the element type, the shape (empty and `isTensor` false for scalars) and the value.
struct TypeSpec {
  bool isTensor = false;
  DType dtype = DType::F32;
  bool isIndex = false;
  std::vector<int64_t> shape;
  std::string value; // the text after '=', if any
};
TypeSpec parseTypeSpec(const std::string &text);

} // namespace frank
