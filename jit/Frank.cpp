// The public API: modules, functions, kernels and the kernel cache.
#include "frank/Frank.h"
#include "DiskCache.h"
#include "Engine.h"
#include "Pipeline.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "link/Linker.h"
#include "parse/FloatLiterals.h"
#include "parse/Parser.h"
#include "runtime/Memory.h"
#include "runtime/Parallel.h"
#include "transforms/Inline.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/ADT/Hashing.h>
#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/xxhash.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <unordered_map>

namespace frank {

// ---- Type conversions ----------------------------------------------------------------------

static ElemKind elemOf(DType t) {
  switch (t) {
  case DType::F32: return ElemKind::F32;
  case DType::F16: return ElemKind::F16;
  case DType::BF16: return ElemKind::BF16;
  case DType::F64: return ElemKind::F64;
  case DType::I1: return ElemKind::I1;
  case DType::I8: return ElemKind::I8;
  case DType::I16: return ElemKind::I16;
  case DType::I32: return ElemKind::I32;
  case DType::I64: return ElemKind::I64;
  }
  return ElemKind::F32;
}

static DType dtypeOf(ElemKind k) {
  switch (k) {
  case ElemKind::F32: return DType::F32;
  case ElemKind::F16: return DType::F16;
  case ElemKind::BF16: return DType::BF16;
  case ElemKind::F64: return DType::F64;
  case ElemKind::I1: return DType::I1;
  case ElemKind::I8: return DType::I8;
  case ElemKind::I16: return DType::I16;
  case ElemKind::I32: return DType::I32;
  case ElemKind::I64:
  case ElemKind::Index: return DType::I64;
  }
  return DType::F32;
}

int numThreads() { return runtime::numThreads(); }
void setNumThreads(int threads) { runtime::setNumThreads(threads); }

TypeSpec parseTypeSpec(const std::string &text) {
  TypeSpec spec;
  std::string type = text;
  size_t eq = text.find('=');
  if (eq != std::string::npos) {
    type = text.substr(0, eq);
    spec.value = text.substr(eq + 1);
  }
  // The element type follows the last 'x' of the dims; "index" has an 'x' of its own.
  size_t x = type.size() > 6 && type.ends_with("xindex") ? type.size() - 6 : type.rfind('x');
  std::string elem = type;
  if (x != std::string::npos && type != "index") {
    elem = type.substr(x + 1);
    std::string dims = type.substr(0, x);
    spec.isTensor = true;
    size_t start = 0;
    while (true) {
      size_t next = dims.find('x', start);
      std::string d =
          dims.substr(start, next == std::string::npos ? std::string::npos : next - start);
      if (d.empty() || (d != "?" && d.find_first_not_of("0123456789") != std::string::npos))
        throw Error(fmt::format("error: bad type '{}': dims must be non-negative integers or ? "
                                "separated by 'x', as in 32x4096xf32",
                                text));
      if (d.size() > 15)
        throw Error(fmt::format("error: bad type '{}': dim '{}' is too large", text, d));
      spec.shape.push_back(d == "?" ? -1 : std::stoll(d));
      if (next == std::string::npos)
        break;
      start = next + 1;
    }
  }
  if (elem == "index") {
    if (spec.isTensor)
      throw Error(fmt::format("error: bad type '{}': tensors of index are not supported", text));
    spec.isIndex = true;
    spec.dtype = DType::I64;
    return spec;
  }
  auto dtype = parseDType(elem);
  if (!dtype)
    throw Error(fmt::format("error: bad type '{}': unknown element type '{}' (expected f32, f16, "
                            "bf16, f64, i1, i8, i16, i32, i64 or index)",
                            text, elem));
  spec.dtype = *dtype;
  if (stridesOverflow(int64_t(dtypeSize(spec.dtype)), spec.shape))
    throw Error(fmt::format("error: bad type '{}': more than 2^63 bytes", text));
  return spec;
}

namespace detail {

// What a call's dims and scalars make of a kernel's shape expressions, its constraints met.
struct CallShapes {
  std::vector<std::vector<int64_t>> outputs;
  int64_t workspaceBytes = 0;
};

struct KernelImpl {
  jit::EntryFn entry = nullptr;
  LoweredKernel meta;
  Mode mode = Mode::Specialized;
  std::vector<ArgSpec> specs;
  std::vector<std::string> explain;
  double compileSeconds = 0;
  bool fromDisk = false;
  std::string functionName;
  // The shapes of the last call, and the dims and scalars they were evaluated for: a decode
  // loop calls each kernel with the same values again and again, and walking the expressions
  // took a fifth of a partly specialized rms_norm at one token (0.2 of 0.95 us).
  mutable std::mutex lastMutex;
  mutable llvm::SmallVector<int64_t, 8> lastDims;
  mutable llvm::SmallVector<uint64_t, 8> lastScalars;
  mutable std::shared_ptr<const CallShapes> last;
};

struct ContextImpl {
  ContextOptions options;
  loops::ConfigOverride config; // options.loweringConfig, parsed
  std::string configText;       // config as parsed, in one spelling (kernel keys, descriptions)
  // What every kernel key of this context ends with: its options and CPU (getKernel).
  std::string keySuffix;
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const KernelImpl>>> kernels;
  CacheStats stats;
  std::unique_ptr<jit::DiskCache> disk; // null when the disk cache is off
  jit::Engine *engine = nullptr;        // for options.cpu
};

struct ModuleImpl {
  std::shared_ptr<ModuleOp> ir;
  std::string contentHash;
  std::shared_ptr<ContextImpl> context;
};

struct Access {
  static Kernel makeKernel(std::shared_ptr<const KernelImpl> impl) {
    Kernel k;
    k.impl_ = std::move(impl);
    return k;
  }
  static frank::Module makeModule(std::shared_ptr<const ModuleImpl> impl) {
    frank::Module m;
    m.impl_ = std::move(impl);
    return m;
  }
};

} // namespace detail

// ---- Arguments -----------------------------------------------------------------------------

namespace {

// The name of an argument in an error message ("in call to '@f': argument #2 (%eps)"), made
// only when there is an error. Every call checks every argument: formatting their names up
// front, and converting f32 scalars through APFloat, took a held rms_norm kernel of 8 elements
// 545-702 ns a call against 90-115 without (frank-bench's call/.../kernel_run, Emerald Rapids).
using ArgumentName = llvm::function_ref<std::string()>;

// Whether converting `x` to float type `elem` (rounding to nearest) overflows to an infinity.
bool overflowsFloat(double x, ElemKind elem) {
  if (elem == ElemKind::F64 || !std::isfinite(x))
    return false;
  // Past the midpoint between the largest float and 2^128, a float rounds to infinity (at it,
  // to the even one: 2^128): APFloat's answer, without its arithmetic.
  if (elem == ElemKind::F32)
    return std::fabs(x) >= 0x1.ffffffp127;
  llvm::APFloat value(x);
  bool losesInfo = false;
  return value.convert(floatSemantics(elem), llvm::APFloat::rmNearestTiesToEven, &losesInfo) &
         llvm::APFloat::opOverflow;
}

// Converts a scalar to the type the signature declares, checking that its value fits. `arg`
// names the call and the argument.
Scalar coerceScalar(const Scalar &s, const Type &declared, ArgumentName arg) {
  Scalar out = s;
  if (isFloatElem(declared.elem)) {
    // An integer where a float belongs is most likely an argument out of place (an index
    // before an epsilon), so it is an error, as a float for an integer is.
    if (!isFloat(s.type))
      throw Error(
          fmt::format("error: {} is {} but was given an integer ({})", arg(), declared.str(), s.i));
    if (overflowsFloat(s.f, declared.elem))
      throw Error(fmt::format("error: {} is {} but {} does not fit", arg(), declared.str(), s.f));
    out.type = dtypeOf(declared.elem);
    out.isIndex = false;
    return out;
  }
  if (isFloat(s.type))
    throw Error(fmt::format("error: {} is {} but was given a float", arg(), declared.str()));
  int bits = elemBits(declared.elem);
  if (declared.elem == ElemKind::I1 && s.i != 0 && s.i != 1)
    throw Error(fmt::format("error: {} is i1 but was given {}", arg(), s.i));
  if (bits < 64 && declared.elem != ElemKind::I1) {
    int64_t lo = -(int64_t{1} << (bits - 1)), hi = (int64_t{1} << (bits - 1)) - 1;
    if (s.i < lo || s.i > hi)
      throw Error(fmt::format("error: {} is {} but {} does not fit", arg(), declared.str(), s.i));
  }
  out.type = dtypeOf(declared.elem);
  out.isIndex = declared.elem == ElemKind::Index;
  return out;
}

using RuntimeDims = std::vector<std::pair<int, int64_t>>;

// Partial specialization: these dims of the specs become runtime values.
void keepRuntimeDims(std::vector<ArgSpec> &specs, const RuntimeDims &dims) {
  for (auto [arg, dim] : dims)
    if (static_cast<size_t>(arg) < specs.size() && specs[arg].type.isTensor() &&
        dim < specs[arg].type.rank())
      specs[arg].type.shape[dim] = kDynamic;
}

// A tensor argument's dims are sizes, and its bytes fit in 2^63: a dim of -1 had read as a
// runtime dim (zeros came back), and a byte count that wrapped to 0 let the kernel read past the
// tensor's memory.
void checkArgumentShape(const Tensor &t, ArgumentName what) {
  bool empty = false;
  for (size_t d = 0; d < t.shape().size(); ++d) {
    if (t.shape()[d] < 0)
      throw Error(fmt::format("error: {} dim {} has negative size {}", what(), d, t.shape()[d]));
    empty |= t.shape()[d] == 0;
  }
  int64_t bytes = int64_t(dtypeSize(t.dtype()));
  for (int64_t dim : t.shape())
    if (!empty && __builtin_mul_overflow(bytes, dim, &bytes))
      throw Error(fmt::format("error: {} ('{}') has more than 2^63 bytes", what(), t.typeString()));
}

std::vector<ArgSpec> specsFor(const FuncOp &fn, const std::vector<Arg> &args, Mode mode,
                              const RuntimeDims &runtimeDims) {
  if (args.size() != fn.argTypes.size())
    throw Error(fmt::format("error: in call to '@{}': expected {} arguments, got {}", fn.name,
                            fn.argTypes.size(), args.size()));
  std::vector<ArgSpec> specs;
  for (size_t i = 0; i < args.size(); ++i) {
    ArgSpec spec;
    auto name = [&] { return fmt::format("in call to '@{}': {}", fn.name, argumentName(fn, i)); };
    if (const Tensor *t = std::get_if<Tensor>(&args[i])) {
      checkArgumentShape(*t, name);
      spec.type = Type::tensor(elemOf(t->dtype()), t->shape());
    } else {
      const Type &declared = fn.argTypes[i];
      if (!declared.isScalar())
        throw Error(fmt::format("error: in call to '@{}': {} is '{}' but was given a scalar",
                                fn.name, argumentName(fn, i), declared.str()));
      Scalar s = coerceScalar(std::get<Scalar>(args[i]), declared, name);
      spec.type = declared;
      // Flags are specialization keys in both modes; other integers only when specialized.
      if ((mode == Mode::Specialized && declared.isInteger()) || declared.elem == ElemKind::I1)
        spec.intValue = s.i;
    }
    specs.push_back(spec);
  }
  if (mode == Mode::Specialized)
    keepRuntimeDims(specs, runtimeDims);
  return specs;
}

std::vector<ArgSpec> specsFromStrings(const FuncOp &fn, const std::vector<std::string> &types,
                                      Mode mode, RuntimeDims runtimeDims) {
  std::vector<Arg> args;
  for (const std::string &text : types) {
    TypeSpec t = parseTypeSpec(text);
    if (t.isTensor) {
      // Shape only: a borrowed tensor with no data describes the argument; a `?` dim is a
      // runtime dim.
      for (size_t d = 0; d < t.shape.size(); ++d)
        if (t.shape[d] < 0) {
          t.shape[d] = 0;
          runtimeDims.push_back({static_cast<int>(args.size()), static_cast<int64_t>(d)});
        }
      args.push_back(Tensor::borrow(nullptr, t.dtype, t.shape));
      continue;
    }
    // A type, not a value, so exactly the declared one ("f16" had passed for an f32).
    const size_t i = args.size();
    const ElemKind given = t.isIndex ? ElemKind::Index : elemOf(t.dtype);
    if (i < fn.argTypes.size() && fn.argTypes[i].isScalar() && fn.argTypes[i].elem != given)
      throw Error(fmt::format("error: in call to '@{}': {} is {} but was given '{}'", fn.name,
                              argumentName(fn, i), fn.argTypes[i].str(), text));
    Scalar s;
    s.type = t.dtype;
    s.isIndex = t.isIndex;
    if (!t.value.empty()) {
      if (t.value == "true" || t.value == "false")
        s.i = t.value == "true";
      else {
        char *end = nullptr;
        errno = 0;
        if (isFloat(t.dtype))
          s.f = std::strtod(t.value.c_str(), &end);
        else
          s.i = std::strtoll(t.value.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE)
          throw Error(fmt::format("error: bad scalar '{}': '{}' is not a valid {}", text, t.value,
                                  t.isIndex ? "index" : dtypeName(t.dtype)));
      }
    }
    args.push_back(s);
  }
  std::vector<ArgSpec> specs = specsFor(fn, args, mode, runtimeDims);
  // Integer scalars given without a value stay runtime values; flags need one.
  for (size_t i = 0; i < types.size() && i < specs.size(); ++i)
    if (types[i].find('=') == std::string::npos && !specs[i].type.isTensor()) {
      if (specs[i].type.elem == ElemKind::I1)
        throw Error(fmt::format("error: in call to '@{}': {} is an i1 flag, a specialization "
                                "key: give its value as i1=true or i1=false",
                                fn.name, argumentName(fn, i)));
      specs[i].intValue.reset();
    }
  return specs;
}

std::string signatureOf(const std::vector<ArgSpec> &specs, Mode mode) {
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i)
      s += ", ";
    if (mode == Mode::Generic && specs[i].type.isTensor()) {
      for (size_t d = 0; d < specs[i].type.shape.size(); ++d)
        s += "?x";
      s += elemName(specs[i].type.elem);
    } else {
      s += specs[i].str();
    }
  }
  return s;
}

std::string kernelName(const std::string &key) {
  return fmt::format("frank_{:016x}", llvm::xxh3_64bits(llvm::StringRef(key)));
}

CodegenOptions codegenOptionsFor(Mode mode) {
  // Generic mode is the straightforward baseline: source order, libm calls.
  if (mode == Mode::Generic)
    return {false, false};
  return {true, true};
}

thread_local std::unique_ptr<char, decltype(&std::free)> tlsWorkspace(nullptr, &std::free);
thread_local size_t tlsWorkspaceSize = 0;

void *workspace(size_t bytes) {
  if (bytes > tlsWorkspaceSize) {
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    tlsWorkspace.reset(static_cast<char *>(runtime::allocate(rounded)));
    tlsWorkspaceSize = rounded;
  }
  return tlsWorkspace.get();
}

struct CallFrame {
  llvm::SmallVector<int64_t, 8> dims;
  llvm::SmallVector<uint64_t, 8> scalars;
};

CallFrame prepare(const detail::KernelImpl &k, const std::vector<Arg> &args) {
  if (args.size() != k.specs.size())
    throw Error(fmt::format("error: kernel for '@{}' takes {} arguments, got {}", k.functionName,
                            k.specs.size(), args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgSpec &spec = k.specs[i];
    const Tensor *t = std::get_if<Tensor>(&args[i]);
    auto name = [&] { return fmt::format("kernel for '@{}': argument #{}", k.functionName, i); };
    if (spec.type.isTensor() != (t != nullptr))
      throw Error(fmt::format("error: kernel for '@{}': argument #{} must be {}", k.functionName, i,
                              spec.type.isTensor() ? "a tensor" : "a scalar"));
    if (!t) {
      // Checked as a call of the function checks it (an integer for an f32 had run as a float).
      // A value baked into the kernel (an index or integer when specialized, a flag always)
      // must be the one it was compiled for: the kernel never reads the argument.
      const Scalar coerced = coerceScalar(std::get<Scalar>(args[i]), spec.type, name);
      if (spec.intValue) {
        ArgSpec given = spec;
        given.intValue = coerced.i;
        if (given.intValue != spec.intValue)
          throw Error(fmt::format("error: kernel for '@{}' was compiled for argument #{} as {} but "
                                  "was given {}",
                                  k.functionName, i, spec.str(), given.str()));
      }
      continue;
    }
    checkArgumentShape(*t, name);
    bool ok = elemOf(t->dtype()) == spec.type.elem && t->rank() == spec.type.rank();
    for (int64_t d = 0; ok && k.mode == Mode::Specialized && d < t->rank(); ++d)
      ok = spec.type.shape[d] == kDynamic || spec.type.shape[d] == t->shape()[d];
    if (!ok)
      throw Error(fmt::format(
          "error: kernel for '@{}' was compiled for argument #{} as {} but was given {}",
          k.functionName, i,
          k.mode == Mode::Generic
              ? fmt::format("rank {} {}", spec.type.rank(), elemName(spec.type.elem))
              : spec.str(),
          t->typeString()));
    if (!t->data() && t->numel() > 0)
      throw Error(fmt::format("error: argument #{} of '@{}' has no data", i, k.functionName));
  }
  CallFrame frame;
  for (auto [arg, dim] : k.meta.dimParamSources)
    frame.dims.push_back(std::get<Tensor>(args[arg]).shape()[dim]);
  for (int arg : k.meta.scalarParamArgs) {
    const Scalar &s = std::get<Scalar>(args[arg]);
    uint64_t bits = 0;
    ElemKind kind = k.specs[arg].type.elem;
    // Its type was checked (prepare's coerceScalar).
    if (kind == ElemKind::F32) {
      float f = static_cast<float>(s.f);
      std::memcpy(&bits, &f, 4);
    } else if (kind == ElemKind::F64) {
      std::memcpy(&bits, &s.f, 8);
    } else if (isFloatElem(kind)) {
      throw Error(fmt::format("error: {} scalar arguments are not supported", elemName(kind)));
    } else {
      bits = static_cast<uint64_t>(s.i);
    }
    frame.scalars.push_back(bits);
  }
  return frame;
}

// Checks the kernel's constraints on the call's dims and scalars, and evaluates its output shapes
// and workspace size; throws on a constraint the call breaks.
std::shared_ptr<const detail::CallShapes> evaluateCall(const detail::KernelImpl &k,
                                                       const CallFrame &f) {
  for (const auto &c : k.meta.constraints) {
    int64_t a = loops::evaluate(c.a, f.dims.data(), f.scalars.data());
    int64_t b = loops::evaluate(c.b, f.dims.data(), f.scalars.data());
    const bool broken = c.holds ? loops::evaluate(c.holds, f.dims.data(), f.scalars.data()) == 0
                        : c.lessOrEqual ? a > b
                                        : a != b;
    if (broken)
      throw Error(formatDiagnostic(c.loc, "error", fmt::format(fmt::runtime(c.message), a, b)));
  }
  auto shapes = std::make_shared<detail::CallShapes>();
  for (const auto &dims : k.meta.outputShapes) {
    std::vector<int64_t> &shape = shapes->outputs.emplace_back();
    for (const auto &d : dims) {
      int64_t v = loops::evaluate(d, f.dims.data(), f.scalars.data());
      if (v < 0)
        throw Error(
            fmt::format("error: '@{}' computes a negative output dim ({})", k.functionName, v));
      shape.push_back(v);
    }
  }
  shapes->workspaceBytes =
      loops::evaluate(k.meta.program.workspaceBytes, f.dims.data(), f.scalars.data());
  return shapes;
}

// evaluateCall's result, taken from the last call when it had the same dims and scalars.
std::shared_ptr<const detail::CallShapes> callShapes(const detail::KernelImpl &k,
                                                     const CallFrame &f) {
  {
    std::lock_guard<std::mutex> lock(k.lastMutex);
    if (k.last && k.lastDims == f.dims && k.lastScalars == f.scalars)
      return k.last;
  }
  std::shared_ptr<const detail::CallShapes> shapes = evaluateCall(k, f);
  std::lock_guard<std::mutex> lock(k.lastMutex);
  k.lastDims = f.dims;
  k.lastScalars = f.scalars;
  k.last = shapes;
  return shapes;
}

void execute(const detail::KernelImpl &k, const std::vector<Arg> &args, const CallFrame &frame,
             int64_t workspaceBytes, std::vector<Tensor> &outputs) {
  llvm::SmallVector<void *, 16> buffers;
  for (int arg : k.meta.inputArgs)
    buffers.push_back(const_cast<void *>(std::get<Tensor>(args[arg]).data()));
  for (Tensor &t : outputs)
    buffers.push_back(t.data());
  void *ws = workspaceBytes > 0 ? workspace(static_cast<size_t>(workspaceBytes)) : nullptr;
  int64_t status[3] = {0, 0, 0};
  k.entry(buffers.data(), frame.dims.data(), frame.scalars.data(), ws, status);
  if (status[0] != 0) {
    const loops::CheckInfo &check = k.meta.program.checks.at(static_cast<size_t>(status[0] - 1));
    throw Error(formatDiagnostic(check.loc, "error",
                                 fmt::format(fmt::runtime(check.message), status[1], status[2])));
  }
}

} // namespace

// ---- Kernel --------------------------------------------------------------------------------

// A Kernel, Function or Module that holds nothing (default-constructed or moved from)
// refuses to be used.
template <class Impl> const Impl &held(const std::shared_ptr<const Impl> &impl, const char *what) {
  if (!impl)
    throw Error(fmt::format("error: this {} holds nothing (it was default-constructed or moved "
                            "from)",
                            what));
  return *impl;
}

std::vector<Tensor> Kernel::operator()(const std::vector<Arg> &args) const {
  const detail::KernelImpl &k = held(impl_, "Kernel");
  CallFrame frame = prepare(k, args);
  std::vector<Tensor> outputs;
  auto shapes = callShapes(k, frame);
  for (size_t i = 0; i < shapes->outputs.size(); ++i)
    outputs.push_back(Tensor::zeros(dtypeOf(k.meta.outputTypes[i]), shapes->outputs[i]));
  execute(k, args, frame, shapes->workspaceBytes, outputs);
  return outputs;
}

void Kernel::run(const std::vector<Arg> &args, std::vector<Tensor> &outputs) const {
  const detail::KernelImpl &k = held(impl_, "Kernel");
  CallFrame frame = prepare(k, args);
  std::shared_ptr<const detail::CallShapes> evaluated = callShapes(k, frame);
  const std::vector<std::vector<int64_t>> &shapes = evaluated->outputs;
  if (outputs.size() != shapes.size())
    throw Error(fmt::format("error: '@{}' has {} results but {} output tensors were given",
                            k.functionName, shapes.size(), outputs.size()));
  for (size_t i = 0; i < shapes.size(); ++i) {
    DType want = dtypeOf(k.meta.outputTypes[i]);
    if (outputs[i].shape() != shapes[i] || outputs[i].dtype() != want)
      throw Error(fmt::format("error: output #{} of '@{}' must be {} but was given {}", i,
                              k.functionName, Tensor::borrow(nullptr, want, shapes[i]).typeString(),
                              outputs[i].typeString()));
  }
  // Kernels assume their outputs alias nothing they read or write (noalias): check, never
  // miscompute.
  auto overlap = [](const Tensor &x, const Tensor &y) {
    auto *a = static_cast<const char *>(x.data()), *b = static_cast<const char *>(y.data());
    return x.byteSize() > 0 && y.byteSize() > 0 && a < b + y.byteSize() && b < a + x.byteSize();
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].data() && outputs[i].numel() > 0)
      throw Error(fmt::format("error: output #{} of '@{}' has no data", i, k.functionName));
    for (size_t a = 0; a < args.size(); ++a)
      if (const Tensor *t = std::get_if<Tensor>(&args[a]); t && overlap(outputs[i], *t))
        throw Error(fmt::format("error: output #{} of '@{}' overlaps argument #{}; outputs must "
                                "not share memory with the arguments",
                                i, k.functionName, a));
    for (size_t j = 0; j < i; ++j)
      if (overlap(outputs[i], outputs[j]))
        throw Error(fmt::format("error: output #{} of '@{}' overlaps output #{}; outputs must not "
                                "share memory",
                                i, k.functionName, j));
  }
  execute(k, args, frame, evaluated->workspaceBytes, outputs);
}

std::vector<std::vector<int64_t>> Kernel::outputShapes(const std::vector<Arg> &args) const {
  const detail::KernelImpl &k = held(impl_, "Kernel");
  return callShapes(k, prepare(k, args))->outputs;
}

std::string Kernel::signature() const {
  const detail::KernelImpl &k = held(impl_, "Kernel");
  return signatureOf(k.specs, k.mode);
}
Mode Kernel::mode() const { return held(impl_, "Kernel").mode; }
double Kernel::compileSeconds() const { return held(impl_, "Kernel").compileSeconds; }
bool Kernel::loadedFromDisk() const { return held(impl_, "Kernel").fromDisk; }
const std::vector<std::string> &Kernel::explanation() const {
  return held(impl_, "Kernel").explain;
}

// ---- Function ------------------------------------------------------------------------------

static PipelineOptions pipelineOptions(const detail::ContextImpl &ctx, Mode mode) {
  PipelineOptions options;
  options.mode = mode;
  options.lowering.boundsChecks = ctx.options.boundsChecks;
  options.lowering.target = ctx.engine->target();
  options.lowering.config = ctx.config;
  return options;
}

// What `cache ls` and FRANK_DEBUG show of a kernel: which function of which file, for which
// arguments, CPU and hand-set strategy, since entries differ by each.
static std::string describeKernel(const detail::ModuleImpl &module, const std::string &name,
                                  const std::vector<ArgSpec> &specs, Mode mode) {
  const detail::ContextImpl &ctx = *module.context;
  std::string text =
      fmt::format("@{} ({}, {})", name, mode == Mode::Generic ? "generic" : "specialized",
                  signatureOf(specs, mode));
  const FuncOp *function = module.ir->lookup(name);
  if (function && function->loc.file)
    text += fmt::format(" of {}", llvm::sys::path::filename(function->loc.file->name).str());
  text += fmt::format(" for {}", ctx.engine->cpuName());
  if (!ctx.config.empty())
    text += fmt::format(", {}={}", ctx.options.loweringConfigName, ctx.configText);
  return text;
}

static Kernel getKernel(const std::shared_ptr<const detail::ModuleImpl> &module,
                        const std::string &name, const std::vector<ArgSpec> &specs, Mode mode) {
  detail::ContextImpl &ctx = *module->context;
  jit::Engine &engine = *ctx.engine;
  engine.checkRunsOnHost();
  // The context's kernels differ by source, function, mode and signature; the key that names
  // the kernel and its disk entry adds the context's options and CPU (its features alone are
  // hundreds of bytes), made only when the kernel is not held yet.
  std::string contextKey = module->contentHash;
  contextKey.append("|").append(name).append("|");
  contextKey.append(mode == Mode::Generic ? "generic" : "specialized").append("|");
  contextKey.append(signatureOf(specs, mode));
  std::promise<std::shared_ptr<const detail::KernelImpl>> promise;
  std::shared_future<std::shared_ptr<const detail::KernelImpl>> future;
  bool compileHere = false;
  {
    std::lock_guard<std::mutex> lock(ctx.mutex);
    auto it = ctx.kernels.find(contextKey);
    if (it != ctx.kernels.end()) {
      future = it->second;
      ++ctx.stats.hits;
    } else {
      future = promise.get_future().share();
      ctx.kernels.emplace(contextKey, future);
      ++ctx.stats.misses;
      compileHere = true;
    }
  }
  if (compileHere) {
    try {
      auto start = std::chrono::steady_clock::now();
      const std::string key = contextKey + "|" + ctx.keySuffix;
      auto impl = std::make_shared<detail::KernelImpl>();
      impl->mode = mode;
      impl->functionName = name;
      std::vector<ArgSpec> kernelSpecs = specs;
      PipelineOptions options = pipelineOptions(ctx, mode);
      options.explain = &impl->explain;
      if (debugLevel() >= 2)
        options.printAfter = [](const std::string &pass, const std::string &ir) {
          fmt::print(stderr, "// -----// IR Dump After {} //----- //\n{}\n", pass, ir);
        };
      // The front end always runs: it is cheap, and it yields the kernel's metadata (output
      // shapes, parameters, checks), so the disk cache need only hold the object.
      PipelineResult result = runPipeline(*module->ir, name, specs, kernelName(key), options);
      const loops::Program &program = result.kernel.program;
      CodegenOptions codegenOptions = codegenOptionsFor(mode);
      std::string description = describeKernel(*module, name, specs, mode);
      // A kernel this process already has (for another context) needs neither disk nor LLVM.
      impl->entry = engine.find(program.name);
      std::optional<jit::DiskCacheKey> diskKey;
      bool diskWrite = false;
      // FRANK_DEBUG=2 prints the LLVM IR of every kernel: it compiles even what disk holds.
      bool diskRead = debugLevel() < 2;
      if (!impl->entry && ctx.disk) {
        // Everything that decides the object: the key above (source, function, signature,
        // mode, options, CPU), the loop IR the front end made of it, the code generation
        // options and the host's vector math library.
        std::string loopIR = loops::print(program);
        std::string codegenText = fmt::format("fast-math={} vector-math={}",
                                              codegenOptions.fastMath, codegenOptions.vectorMath);
        diskKey = jit::diskCacheKey({key, loopIR, codegenText, engine.hostFingerprint()});
        if (std::optional<std::string> object =
                diskRead ? ctx.disk->load(*diskKey) : std::nullopt) {
          std::string error;
          impl->entry = engine.load(program.name, *object, error);
          if (!impl->entry)
            ctx.disk->discard(*diskKey, fmt::format("the JIT cannot link it: {}", error));
        }
        impl->fromDisk = impl->entry != nullptr;
      }
      if (!impl->entry) {
        std::string object;
        impl->entry = engine.compile(program, codegenOptions, options.printAfter,
                                     diskKey ? &object : nullptr);
        if (diskKey && !object.empty())
          diskWrite = ctx.disk->store(*diskKey, description, object);
      }
      impl->meta = std::move(result.kernel);
      impl->specs = std::move(kernelSpecs);
      impl->compileSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (debugLevel() >= 1) {
        if (impl->fromDisk)
          fmt::print(stderr, "frank: loaded {} from the disk cache in {:.2f} ms\n", description,
                     impl->compileSeconds * 1e3);
        else
          fmt::print(stderr, "frank: compiled {} in {:.2f} ms{}\n", description,
                     impl->compileSeconds * 1e3,
                     diskWrite ? fmt::format(", stored in {}", ctx.disk->pathOf(*diskKey)) : "");
      }
      {
        std::lock_guard<std::mutex> lock(ctx.mutex);
        if (impl->fromDisk) {
          ++ctx.stats.diskHits;
          ctx.stats.diskLoadSeconds += impl->compileSeconds;
        } else {
          ctx.stats.diskMisses += diskKey.has_value();
          ctx.stats.compileSeconds += impl->compileSeconds;
        }
        ctx.stats.diskWrites += diskWrite;
        ++ctx.stats.kernels;
      }
      promise.set_value(impl);
    } catch (...) {
      // Failed compilations are not cached: the error is reported to every waiter.
      {
        std::lock_guard<std::mutex> lock(ctx.mutex);
        ctx.kernels.erase(contextKey);
      }
      promise.set_exception(std::current_exception());
    }
  }
  return detail::Access::makeKernel(future.get());
}

std::vector<RuntimeDim> parseRuntimeDims(const std::string &text) {
  std::vector<RuntimeDim> dims;
  for (llvm::StringRef item : llvm::split(llvm::StringRef(text), ',')) {
    auto [argument, dim] = item.trim().rsplit(':');
    RuntimeDim d{argument.trim().str(), 0};
    if (argument.trim().empty() || dim.trim().getAsInteger(10, d.dim) || d.dim < 0)
      throw Error(fmt::format("error: bad runtime dim '{}': expected ARGUMENT:DIM, as in key:1",
                              item.trim().str()));
    dims.push_back(d);
  }
  return dims;
}

Function Function::withRuntimeDims(const std::vector<RuntimeDim> &dims) const {
  const FuncOp &fn = lookupFunction(*held(module_, "Function").ir, name_);
  Function f = *this;
  f.runtimeDims_.clear(); // these dims, not those of an earlier call
  for (const RuntimeDim &d : dims) {
    llvm::StringRef name(d.argument);
    name.consume_front("%");
    std::optional<size_t> index;
    for (size_t i = 0; i < fn.argTypes.size() && !index; ++i)
      if (fn.body->arguments[i]->name == name)
        index = i;
    size_t position = 0;
    name.consume_front("#");
    if (!index && !name.getAsInteger(10, position) && position < fn.argTypes.size())
      index = position;
    if (!index) {
      std::vector<std::string> names;
      for (size_t i = 0; i < fn.argTypes.size(); ++i)
        names.push_back(fn.body->arguments[i]->name.empty() ? fmt::format("#{}", i)
                                                            : fn.body->arguments[i]->name);
      throw Error(fmt::format("error: runtime dim {}:{}: '@{}' has no argument '{}' (it has {})",
                              d.argument, d.dim, name_, d.argument, fmt::join(names, ", ")));
    }
    const Type &type = fn.argTypes[*index];
    std::string arg = argumentName(fn, *index);
    if (!type.isTensor() || d.dim < 0 || d.dim >= type.rank())
      throw Error(fmt::format("error: runtime dim {}:{}: {} of '@{}' is '{}', which has no dim {}",
                              d.argument, d.dim, arg, name_, type.str(), d.dim));
    if (type.shape[d.dim] != kDynamic)
      throw Error(fmt::format("error: runtime dim {}:{}: dim {} of {} of '@{}' is {} in the "
                              "signature ('{}'); only a dynamic dim can stay a runtime value",
                              d.argument, d.dim, d.dim, arg, name_, type.shape[d.dim], type.str()));
    const std::pair<int, int64_t> runtimeDim{static_cast<int>(*index), d.dim};
    if (std::find(f.runtimeDims_.begin(), f.runtimeDims_.end(), runtimeDim) != f.runtimeDims_.end())
      throw Error(fmt::format("error: runtime dim {}:{}: dim {} of {} is given twice", d.argument,
                              d.dim, d.dim, arg));
    f.runtimeDims_.push_back(runtimeDim);
  }
  return f;
}

Kernel Function::specialize(const std::vector<Arg> &args, Mode mode) const {
  const FuncOp &fn = lookupFunction(*held(module_, "Function").ir, name_);
  return getKernel(module_, name_, specsFor(fn, args, mode, runtimeDims_), mode);
}

Kernel Function::specialize(const std::vector<std::string> &argTypes, Mode mode) const {
  const FuncOp &fn = lookupFunction(*held(module_, "Function").ir, name_);
  return getKernel(module_, name_, specsFromStrings(fn, argTypes, mode, runtimeDims_), mode);
}

std::vector<Tensor> Function::operator()(const std::vector<Arg> &args, Mode mode) const {
  return specialize(args, mode)(args);
}

std::string Function::emit(Stage stage, const std::vector<std::string> &argTypes, Mode mode,
                           bool printAfterAll) const {
  const FuncOp &fn = lookupFunction(*held(module_, "Function").ir, name_);
  if (stage > Stage::Assembly)
    throw Error(fmt::format("error: no stage {} to emit", static_cast<int>(stage)));
  if (stage == Stage::Mlir)
    return printModule(*module_->ir);
  std::vector<ArgSpec> specs = specsFromStrings(fn, argTypes, mode, runtimeDims_);
  std::string log;
  PipelineOptions options = pipelineOptions(*module_->context, mode);
  auto dump = [&](const std::string &pass, const std::string &ir) {
    log += fmt::format("// -----// IR Dump After {} //----- //\n{}\n", pass, ir);
  };
  if (printAfterAll)
    options.printAfter = dump;
  PipelineResult result = runPipeline(*module_->ir, name_, specs, "frank_kernel", options);
  std::string text;
  switch (stage) {
  case Stage::Mlir: break;
  case Stage::Specialized: text = printFunction(*result.function); break;
  case Stage::Loops: text = loops::print(result.kernel.program); break;
  case Stage::LLVM:
  case Stage::OptimizedLLVM:
  case Stage::Assembly: {
    jit::Engine &engine = *module_->context->engine;
    jit::Output out = stage == Stage::LLVM            ? jit::Output::LLVM
                      : stage == Stage::OptimizedLLVM ? jit::Output::OptimizedLLVM
                                                      : jit::Output::Assembly;
    if (printAfterAll) {
      log += fmt::format(
          "// -----// IR Dump After codegen //----- //\n{}\n",
          engine.emit(result.kernel.program, codegenOptionsFor(mode), jit::Output::LLVM));
      if (stage != Stage::LLVM)
        log += fmt::format("// -----// IR Dump After optimize //----- //\n{}\n",
                           engine.emit(result.kernel.program, codegenOptionsFor(mode),
                                       jit::Output::OptimizedLLVM));
    }
    text = engine.emit(result.kernel.program, codegenOptionsFor(mode), out);
    break;
  }
  }
  return printAfterAll ? log + text : text;
}

std::vector<std::string> Function::argumentTypes() const {
  std::vector<std::string> types;
  for (const Type &t : lookupFunction(*held(module_, "Function").ir, name_).argTypes)
    types.push_back(t.str());
  return types;
}

std::vector<std::string> Function::resultTypes() const {
  std::vector<std::string> types;
  for (const Type &t : lookupFunction(*held(module_, "Function").ir, name_).resultTypes)
    types.push_back(t.str());
  return types;
}

// ---- Module and Context --------------------------------------------------------------------

Function Module::function(const std::string &name) const {
  const FuncOp &fn = lookupFunction(*held(impl_, "Module").ir, name);
  Function f;
  f.module_ = impl_;
  f.name_ = fn.name;
  return f;
}

std::vector<std::string> Module::functionNames() const {
  std::vector<std::string> names;
  for (auto &f : held(impl_, "Module").ir->functions)
    if (!f->isDeclaration() && f->isPublic)
      names.push_back(f->name);
  return names;
}

std::string Module::print() const { return printModule(*held(impl_, "Module").ir); }

Context::Context(ContextOptions options) : impl_(std::make_shared<detail::ContextImpl>()) {
  // The thread pool reads FRANK_NUM_THREADS as it is made (no threads start yet): a bad value is
  // warned about now, not first when a kernel runs a parallel loop or compiles in parts.
  (void)runtime::numThreads();
  impl_->options = options;
  impl_->config = loops::parseConfig(options.loweringConfig, options.loweringConfigName);
  impl_->configText = impl_->config.str();
  // $FRANK_CPU stands in for the host: a suite or a tool run generates code for another CPU.
  const char *envCpu = std::getenv("FRANK_CPU");
  impl_->engine = &jit::Engine::forCpu(!options.cpu.empty() ? options.cpu : envCpu ? envCpu : "");
  impl_->keySuffix =
      fmt::format("checks={}|config={}|{}|{}", options.boundsChecks, impl_->configText,
                  impl_->engine->cpuName(), impl_->engine->cpuFeatures());
  jit::DiskCacheSettings disk =
      jit::resolveDiskCacheSettings(options.diskCache, options.cacheDir, options.cacheMaxBytes);
  // The directory is created and checked on first use, not here: a context that compiles
  // nothing touches no disk.
  if (disk.enabled)
    impl_->disk = std::make_unique<jit::DiskCache>(disk.directory, disk.maxBytes);
}
Context::~Context() = default;

static Module makeModule(std::unique_ptr<ModuleOp> ir, const std::string &text,
                         const std::shared_ptr<detail::ContextImpl> &ctx) {
  verifyModule(*ir);
  auto impl = std::make_shared<detail::ModuleImpl>();
  impl->ir = std::move(ir);
  // The printed IR, and the source files its locations point into: a kernel's errors quote
  // its source (file, line and text), so a module from other text gets kernels of its own.
  std::string content = printModule(*impl->ir);
  std::set<const SourceFile *> files;
  auto noteFile = [&](const Location &loc) {
    if (loc.file && files.insert(loc.file.get()).second)
      content += fmt::format("\n// {}\n{}", loc.file->name, loc.file->text);
  };
  for (auto &fn : impl->ir->functions) {
    noteFile(fn->loc);
    if (fn->body)
      walk(*fn->body, [&](Op &op) { noteFile(op.loc); });
  }
  impl->contentHash = fmt::format("{:016x}", llvm::xxh3_64bits(llvm::StringRef(content)));
  (void)text;
  impl->context = ctx;
  return detail::Access::makeModule(impl);
}

static std::unique_ptr<ModuleOp> linked(std::unique_ptr<ModuleOp> module, const LinkOptions &link) {
  LinkSources sources{link.files, link.searchPaths};
  if (link.componentLibrary)
    sources.searchPaths.push_back(FRANK_COMPONENTS_DIR);
  linkModule(*module, sources);
  checkCalls(*module);
  return module;
}

Module Context::load(const std::string &path, const LinkOptions &link) {
  return makeModule(linked(parseFile(path), link), path, impl_);
}

Module Context::loadString(const std::string &text, const std::string &name,
                           const LinkOptions &link) {
  return makeModule(linked(parseString(text, name), link), text, impl_);
}

CacheStats Context::cacheStats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

DiskCacheInfo diskCacheInfo(const ContextOptions &options) {
  jit::DiskCacheSettings settings =
      jit::resolveDiskCacheSettings(options.diskCache, options.cacheDir, options.cacheMaxBytes);
  DiskCacheInfo info;
  info.directory = settings.directory;
  info.enabled = settings.enabled;
  info.status = settings.status;
  info.maxBytes = settings.maxBytes;
  if (settings.directory.empty())
    return info;
  std::string problem = jit::checkCacheDirectory(settings.directory);
  if (problem.empty() && info.enabled && !llvm::sys::fs::exists(settings.directory))
    info.status = "enabled (created on first use)";
  if (!problem.empty()) {
    info.enabled = false;
    info.status = fmt::format("refused: {}", problem);
  }
  for (const jit::DiskCacheEntry &e :
       jit::DiskCache(settings.directory, settings.maxBytes).list()) {
    info.entries.push_back({e.path, e.bytes, e.lastUsed, e.description, e.problem});
    info.totalBytes += e.bytes;
  }
  return info;
}

size_t clearDiskCache(const ContextOptions &options) {
  jit::DiskCacheSettings settings =
      jit::resolveDiskCacheSettings(options.diskCache, options.cacheDir, options.cacheMaxBytes);
  if (settings.directory.empty())
    return 0;
  return jit::DiskCache(settings.directory, settings.maxBytes).clear();
}

void Context::clearCache() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->kernels.clear();
  impl_->stats.kernels = 0;
}

} // namespace frank
