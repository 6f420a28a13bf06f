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
#include <optional>
#include <string>
#include <utility>
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
  uint64_t misses = 0;       // each miss made one kernel: compiled, or loaded from the disk cache
  uint64_t kernels = 0;      // kernels held
  double compileSeconds = 0; // spent making the kernels that were compiled
  // The disk cache (see ContextOptions::diskCache): misses it served, misses it could not serve
  // (the kernel was then compiled), entries written, and the time spent making the kernels it
  // served. Kernels this process already held, for another context, touch no disk.
  uint64_t diskHits = 0;
  uint64_t diskMisses = 0;
  uint64_t diskWrites = 0;
  double diskLoadSeconds = 0;
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
  /// Runs on `args` into caller-provided outputs (shapes and dtypes are checked; outputs must
  /// hold data and may not overlap the arguments or each other).
  void run(const std::vector<Arg> &args, std::vector<Tensor> &outputs) const;
  /// The output shapes for these arguments.
  std::vector<std::vector<int64_t>> outputShapes(const std::vector<Arg> &args) const;
  /// "32x4096xf32, 4096xf32, f32" ('?' for the dims that stay runtime values: all of them in
  /// generic kernels).
  std::string signature() const;
  Mode mode() const;
  /// Seconds it took to make this kernel: to compile it, or to load it from the disk cache.
  double compileSeconds() const;
  bool loadedFromDisk() const;
  /// Lines saying which dims and values were baked in.
  const std::vector<std::string> &explanation() const;

private:
  friend struct detail::Access;
  std::shared_ptr<const detail::KernelImpl> impl_;
};

/// A dim that specialized kernels keep as a runtime value (partial specialization): dim `dim` of
/// the argument named `argument` in the source ("key" or "%key") or at that position ("1" or
/// "#1"). Only dims the signature declares dynamic (`?`) can be runtime dims.
struct RuntimeDim {
  std::string argument;
  int64_t dim = 0;
};
/// Parses runtime dims as the command line takes them: "key:1,value:1".
std::vector<RuntimeDim> parseRuntimeDims(const std::string &text);

class Function {
public:
  /// The same function, whose specialized kernels keep these dims as runtime values and bake in
  /// every other: one kernel then serves every size of them (the KV length of a decode loop, the
  /// token count), at the price of loops whose trip counts are not constants. Checked now.
  /// They replace the runtime dims this function had: `withRuntimeDims({})` bakes in every dim.
  Function withRuntimeDims(const std::vector<RuntimeDim> &dims) const;

  /// Specializes (or finds the cached kernel) for these arguments, then runs it.
  std::vector<Tensor> operator()(const std::vector<Arg> &args, Mode mode = Mode::Specialized) const;
  /// The kernel for arguments like these: their shapes, dtypes and integer values.
  Kernel specialize(const std::vector<Arg> &args, Mode mode = Mode::Specialized) const;
  /// The same from type strings as the command line takes them: "32x4096xf32", "f32",
  /// "index=4", "i1=true". A `?` dim ("?x4096xf32") stays a runtime value, as a runtime dim does.
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
  std::vector<std::pair<int, int64_t>> runtimeDims_; // (argument, dim)
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
/// files indexed by their module symbol. frank-jit's own component library is one more such
/// directory unless `componentLibrary` is false; a module that two files of the directories
/// define is an error (an explicit file's wins over theirs).
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
  /// comma-separated `pipeline=loops|contraction.outer|contraction.dot|contraction.gather|...`,
  /// `tile=MxN` (register tile), `k-block=K` (0: none), `key-chunks=N` (attention's keys in N
  /// chunks, 1: one piece), `blocks-outside=0|1` (the contraction tiles' blocks outside the
  /// parallel dims B is read more closely along), `n-group=G` (contraction.outer's n blocks in
  /// groups of G, k blocks outside each; 0: none). Empty: the strategy selection decides.
  /// Checked when the context is made. Generic kernels, plain loops, take no strategy.
  std::string loweringConfig;
  /// What errors about `loweringConfig` call it: a choice that does not parse, or that does not
  /// fit the op it reaches (`error: --config: tile 9x9 does not fit ...`).
  std::string loweringConfigName = "--config";
  /// Keep each compiled kernel's machine code on disk, and load it from there in later
  /// processes instead of compiling again. Unset: on, unless FRANK_CACHE=off.
  std::optional<bool> diskCache;
  /// The disk cache's directory. Empty: $FRANK_CACHE_DIR, else $XDG_CACHE_HOME/frank-jit, else
  /// $HOME/.cache/frank-jit. It is created with mode 0700, and not used unless it belongs to the
  /// user and nobody else may write to it: it holds code the process runs.
  std::string cacheDir;
  /// The CPU kernels are generated for: LLVM's name of a CPU of the host's architecture
  /// (skylake-avx512, znver3, x86-64-v3). Empty: $FRANK_CPU, else the host. Kernels for a CPU
  /// whose features the host lacks can be printed (`Function::emit`) but not run: calling them
  /// is an Error. Checked when the context is made.
  std::string cpu;
  /// The disk cache's size cap: after a write, least recently used entries go until the
  /// directory fits. 0: $FRANK_CACHE_MAX_BYTES (bytes, or 512K, 64M, 1G), else 512 MiB.
  uint64_t cacheMaxBytes = 0;
};

/// Owns the kernel cache. Kernels are keyed by the module's content hash, the function, the
/// argument signature, the mode, the options and the host CPU; concurrent first calls compile
/// once. Kernels missing from memory are looked up in the disk cache before compiling.
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

/// The disk cache that contexts made with these options use, for tools.
struct DiskCacheEntry {
  std::string path;
  uint64_t bytes = 0;
  int64_t lastUsed = 0;    // seconds since the epoch
  std::string description; // "@rms_norm_linalg (specialized, 32x4096xf32, 4096xf32, f32)"
  std::string problem;     // why it would be discarded on load; empty if it is valid
};
struct DiskCacheInfo {
  std::string directory; // empty if none could be determined
  bool enabled = false;
  std::string status; // "enabled", or why not
  uint64_t maxBytes = 0;
  uint64_t totalBytes = 0;
  std::vector<DiskCacheEntry> entries; // least recently used first
};
DiskCacheInfo diskCacheInfo(const ContextOptions &options = {});
/// Removes every entry of that disk cache, enabled or not; returns how many.
size_t clearDiskCache(const ContextOptions &options = {});

/// Threads that kernels' parallel loops use, the caller included. The default is
/// FRANK_NUM_THREADS, or else the number of hardware threads; 1 runs every kernel serially, and
/// 256 is the most (a FRANK_NUM_THREADS that is not a count from 1 to 256 is warned about and
/// not used).
int numThreads();
void setNumThreads(int threads);

/// Parses a command-line style type: "32x4096xf32" (tensor), "f32", "index=4", "i1=true".
/// Returns the element type, the shape (empty and `isTensor` false for scalars; -1 for a `?`
/// dim) and the value.
struct TypeSpec {
  bool isTensor = false;
  DType dtype = DType::F32;
  bool isIndex = false;
  std::vector<int64_t> shape;
  std::string value; // the text after '=', if any
};
TypeSpec parseTypeSpec(const std::string &text);

} // namespace frank
