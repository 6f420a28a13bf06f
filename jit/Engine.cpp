// LLJIT, target machine and O3 pipeline.
#include "Engine.h"
#include "Pipeline.h"
#include "codegen/MathFunctions.h"
#include "ir/Diagnostics.h"
#include "runtime/Parallel.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace frank::jit {

namespace {
template <class T> T unwrap(llvm::Expected<T> value, const char *what) {
  if (!value)
    internalError(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

// Sets one of LLVM's own options, unless the command line (frank-jit passes unknown flags to
// LLVM) has set it already.
void setLlvmFlag(llvm::StringRef name, bool value) {
  auto &options = llvm::cl::getRegisteredOptions();
  auto it = options.find(name);
  if (it == options.end())
    internalError(("LLVM has no option -" + name).str());
  auto *flag = static_cast<llvm::cl::opt<bool> *>(it->second);
  if (flag->getNumOccurrences() == 0)
    flag->setValue(value);
}

std::string printModule(const llvm::Module &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return text;
}
} // namespace

// Scalar math the loop vectorizer may replace by glibc's libmvec: 8-lane AVX2 ('d') and 16-lane
// AVX-512 ('e') variants. LLVM 19's own libmvec table stops at 8 lanes and lacks tanh, erf and
// exp2, so the mappings are listed here and offered only where the host and library have them.
struct VectorMathFunction {
  const char *scalar;    // the libm name codegen calls
  const char *intrinsic; // the LLVM intrinsic codegen emits instead, if any
  int arity;
};
constexpr VectorMathFunction kVectorMath[] = {
    {"sinf", "llvm.sin.f32", 1},   {"cosf", "llvm.cos.f32", 1}, {"logf", "llvm.log.f32", 1},
    {"exp2f", "llvm.exp2.f32", 1}, {"expf", "llvm.exp.f32", 1}, {"powf", "llvm.pow.f32", 2},
    {"tanhf", nullptr, 1},         {"erff", nullptr, 1},
};

// Keeps a copy of each object the JIT compiles, by module name, for the disk cache. It never
// answers a lookup: reloading goes through `Engine::load`, which skips building the IR at all.
class ObjectCapture : public llvm::ObjectCache {
public:
  void notifyObjectCompiled(const llvm::Module *module, llvm::MemoryBufferRef object) override {
    std::lock_guard<std::mutex> lock(mutex_);
    objects_[module->getModuleIdentifier()] = object.getBuffer().str();
  }
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *) override { return nullptr; }
  std::string take(const std::string &name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = objects_.find(name);
    if (it == objects_.end())
      return "";
    std::string object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::string> objects_;
};

struct Engine::Impl {
  std::mutex mutex; // guards the target machine and the JIT's symbol table
  std::unique_ptr<llvm::TargetMachine> machine;
  ObjectCapture capture; // before the JIT, which holds it
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::string cpu, features;
  bool avx512 = false;
  bool avx512Math = false; // AVX-512 F and DQ, which frank's 16-lane exp uses
  // Kernel names hash the whole cache key, so a name seen before is the same code: contexts
  // that compile the same kernel share it.
  std::unordered_map<std::string, EntryFn> compiled;
  std::deque<std::string> names; // storage behind the VecDesc string references
  std::vector<llvm::VecDesc> vectorMath;
  std::string fingerprint; // the vector math functions found

  Impl() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // Loop strength reduction took 40% of machine code generation (20 ms of S5's 48) and made
    // S5 slower (1.77-1.81 against 1.54-1.55 ms): the kernels' loops already step by constants
    // over addresses the optimizer has simplified, and LSR's rewrites only add live registers.
    setLlvmFlag("disable-lsr", true);
    auto builder = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    cpu = builder.getCPU();
    features = builder.getFeatures().getString();
    avx512 = features.find("+avx512f") != std::string::npos;
    avx512Math = avx512 && features.find("+avx512dq") != std::string::npos;
    // Hardware gathers are microcoded on every x86 we target, and slow where a mitigation
    // (Intel's for Gather Data Sampling) or a VM makes them so: 7.7 cycles per element on the
    // Zen 4 VMs here, where mul_mat_id's strided expert loads took 3x the DRAM time. Loads
    // built one lane at a time cost about one cycle per element everywhere.
    features += ",+prefer-no-gather,+prefer-no-scatter";
    machine = unwrap(builder.createTargetMachine(), "creating the target machine");
    // The JIT's own compiler (its target machine prepared by LLJIT for its linker), with the
    // capture attached: the disk cache stores exactly the object the JIT linked.
    lljit = unwrap(
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(builder)
            .setCompileFunctionCreator(
                [this](llvm::orc::JITTargetMachineBuilder jtmb)
                    -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                  auto tm = jtmb.createTargetMachine();
                  if (!tm)
                    return tm.takeError();
                  return std::make_unique<llvm::orc::TMOwningSimpleCompiler>(std::move(*tm),
                                                                             &capture);
                })
            .create(),
        "creating the JIT");
    // Kernels may call libm (generic mode, tanh, erf).
    lljit->getMainJITDylib().addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                   lljit->getDataLayout().getGlobalPrefix()),
               "opening the process's symbols"));
    findVectorMath();
    // The parallel runtime, by name, so that kernels (and cached objects) hold no host address.
    llvm::orc::SymbolMap runtime;
    runtime[lljit->mangleAndIntern("frank_parallel_for")] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(&frank_parallel_for), llvm::JITSymbolFlags::Exported);
    if (auto error = lljit->getMainJITDylib().define(llvm::orc::absoluteSymbols(runtime)))
      internalError("defining the runtime's symbols: " + llvm::toString(std::move(error)));
  }

  void findVectorMath() {
    std::string error;
    auto library = llvm::sys::DynamicLibrary::getPermanentLibrary("libmvec.so.1", &error);
    if (!library.isValid())
      return; // no libmvec: math stays scalar
    auto generator = llvm::orc::DynamicLibrarySearchGenerator::Load(
        "libmvec.so.1", lljit->getDataLayout().getGlobalPrefix());
    if (!generator) {
      llvm::consumeError(generator.takeError());
      return;
    }
    lljit->getMainJITDylib().addGenerator(std::move(*generator));
    struct Width {
      const char *isa;
      unsigned lanes;
      const char *feature;
    };
    for (Width w : {Width{"d", 8, "+avx2"}, Width{"e", 16, "+avx512f"}}) {
      if (features.find(w.feature) == std::string::npos)
        continue;
      for (const VectorMathFunction &f : kVectorMath) {
        std::string params(f.arity, 'v');
        std::string base(f.scalar);
        const std::string &vector =
            names.emplace_back(fmt::format("_ZGV{}N{}{}_{}", w.isa, w.lanes, params, base));
        if (!library.getAddressOfSymbol(vector.c_str()))
          continue;
        const std::string &abi =
            names.emplace_back(fmt::format("_ZGV_LLVM_N{}{}", w.lanes, params));
        auto count = llvm::ElementCount::getFixed(w.lanes);
        vectorMath.emplace_back(f.scalar, vector, count, false, abi);
        fingerprint += vector + ",";
        if (f.intrinsic)
          vectorMath.emplace_back(f.intrinsic, vector, count, false, abi);
      }
    }
  }

  std::unique_ptr<llvm::Module> build(const loops::Program &program, llvm::LLVMContext &context,
                                      const CodegenOptions &options) {
    auto module = codegen(program, context, options);
    module->setDataLayout(machine->createDataLayout());
    module->setTargetTriple(machine->getTargetTriple().str());
    for (llvm::Function &f : *module) {
      if (f.isDeclaration())
        continue;
      f.addFnAttr("target-cpu", cpu);
      f.addFnAttr("target-features", features);
      // Other CPU names default to 256-bit vectors; use the full register where there is one.
      f.addFnAttr("prefer-vector-width", avx512 ? "512" : "256");
    }
    return module;
  }

  void optimize(llvm::Module &module, bool useVectorMath) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::TargetLibraryInfoImpl libraryInfo(machine->getTargetTriple());
    if (useVectorMath) {
      libraryInfo.addVectorizableFunctions(vectorMath);
      libraryInfo.addVectorizableFunctions(mathVectorMappings());
    }
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(libraryInfo); });
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    // Constant trip counts invite LLVM to unroll whole small nests: a 2x4x2x8x64 transpose took
    // 1.4 s to optimize into 3244 lines. Without unrolling it takes 25 ms; rms_norm and swiglu
    // at S1/S2 run as fast (the vectorizer still interleaves) and their cold compile drops from
    // 15 to 9 ms.
    tuning.LoopUnrolling = false;
    llvm::PassBuilder builder(machine.get(), tuning);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
    defineMathFunctions(module, avx512Math);
  }
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

Engine &Engine::instance() {
  static Engine engine;
  return engine;
}

const std::string &Engine::cpuName() const { return impl_->cpu; }
const std::string &Engine::hostFingerprint() const { return impl_->fingerprint; }
const std::string &Engine::cpuFeatures() const { return impl_->features; }
loops::Target Engine::target() const {
  return impl_->avx512 ? loops::Target::avx512() : loops::Target::avx2();
}

EntryFn
Engine::compile(const loops::Program &program, const CodegenOptions &options,
                const std::function<void(const std::string &, const std::string &)> &printAfter,
                std::string *object) {
  auto context = std::make_unique<llvm::LLVMContext>();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->compiled.find(program.name); it != impl_->compiled.end())
    return it->second;
  auto module = impl_->build(program, *context, options);
  module->setModuleIdentifier(program.name); // the capture files the object under it
  if (printAfter)
    printAfter("codegen", printModule(*module));
  auto start = std::chrono::steady_clock::now();
  auto lap = [&](const char *what) {
    auto now = std::chrono::steady_clock::now();
    if (debugLevel() >= 1)
      fmt::print(stderr, "frank: {:<20} {:8.3f} ms\n", what,
                 std::chrono::duration<double, std::milli>(now - start).count());
    start = now;
  };
  impl_->optimize(*module, options.vectorMath);
  lap("optimize-O3");
  if (printAfter)
    printAfter("optimize-O3", printModule(*module));
  llvm::orc::ThreadSafeModule tsm(std::move(module), std::move(context));
  if (auto error = impl_->lljit->addIRModule(std::move(tsm)))
    internalError("adding a kernel to the JIT: " + llvm::toString(std::move(error)));
  auto address = unwrap(impl_->lljit->lookup(program.name), "looking up a compiled kernel");
  lap("machine-code");
  std::string compiledObject = impl_->capture.take(program.name);
  if (object)
    *object = std::move(compiledObject);
  return impl_->compiled[program.name] = address.toPtr<EntryFn>();
}

EntryFn Engine::find(const std::string &name) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->compiled.find(name);
  return it == impl_->compiled.end() ? nullptr : it->second;
}

EntryFn Engine::load(const std::string &name, std::string_view object, std::string &error) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->compiled.find(name); it != impl_->compiled.end())
    return it->second;
  // A tracker of its own, so that an object that fails to link can be taken out again and the
  // kernel compiled under the same name.
  auto tracker = impl_->lljit->getMainJITDylib().createResourceTracker();
  auto buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), name);
  if (auto e = impl_->lljit->addObjectFile(tracker, std::move(buffer))) {
    error = llvm::toString(std::move(e));
    return nullptr;
  }
  auto address = impl_->lljit->lookup(name);
  if (!address) {
    error = llvm::toString(address.takeError());
    if (auto e = tracker->remove())
      internalError(
          fmt::format("removing a kernel that failed to link: {}", llvm::toString(std::move(e))));
    return nullptr;
  }
  return impl_->compiled[name] = address->toPtr<EntryFn>();
}

std::string Engine::emit(const loops::Program &program, const CodegenOptions &options,
                         Output output) {
  llvm::LLVMContext context;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto module = impl_->build(program, context, options);
  if (output == Output::LLVM)
    return printModule(*module);
  impl_->optimize(*module, options.vectorMath);
  if (output == Output::OptimizedLLVM)
    return printModule(*module);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (impl_->machine->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    internalError("the target cannot emit assembly");
  pm.run(*module);
  return std::string(text);
}

} // namespace frank::jit
