// LLJIT, target machine and the kernel optimization pipeline.
#include "Engine.h"
#include "Pipeline.h"
#include "codegen/ColdCode.h"
#include "codegen/MathFunctions.h"
#include "codegen/MaximumReductions.h"
#include "codegen/SixteenBitFloatBits.h"
#include "codegen/SplitKernel.h"
#include "ir/Diagnostics.h"
#include "runtime/Bfloat16.h"
#include "runtime/Parallel.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassTimingInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Pass.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Endian.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
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
  const char *scalar;    // the name codegen calls
  const char *intrinsic; // the LLVM intrinsic codegen emits instead, if any
  int arity;
  bool f64 = false;              // of doubles: half the lanes of a register
  const char *libmvec = nullptr; // libmvec's base name, if not `scalar`
};
// A 16- or 32-bit powf is frank.pow.f64 of the widened operands (codegen), rounded once: libmvec's
// double pow is within an ulp of a double, so the narrowed power is correctly rounded but in rare
// cases. f64 powf keeps libm's scalar pow (libmvec's is an ulp off at times).
constexpr VectorMathFunction kVectorMath[] = {
    {"sinf", "llvm.sin.f32", 1}, {"cosf", "llvm.cos.f32", 1},
    {"logf", "llvm.log.f32", 1}, {"exp2f", "llvm.exp2.f32", 1},
    {"expf", "llvm.exp.f32", 1}, {kWidenedPow, nullptr, 2, true, "pow"},
    {"tanhf", nullptr, 1},       {"erff", nullptr, 1},
};

// A kernel's objects as one payload, the disk cache's: their count (u32), then each object's
// size (u64) and bytes.
std::string packObjects(const std::vector<std::string> &objects) {
  std::string payload(4, '\0');
  llvm::support::endian::write32le(payload.data(), uint32_t(objects.size()));
  for (const std::string &object : objects) {
    char size[8];
    llvm::support::endian::write64le(size, object.size());
    payload.append(size, 8);
    payload += object;
  }
  return payload;
}

// The objects of a payload, or an empty list if it is not one.
std::vector<std::string_view> unpackObjects(std::string_view payload) {
  if (payload.size() < 4)
    return {};
  uint32_t count = llvm::support::endian::read32le(payload.data());
  std::vector<std::string_view> objects;
  size_t at = 4;
  for (uint32_t i = 0; i < count; ++i) {
    if (payload.size() - at < 8)
      return {};
    uint64_t size = llvm::support::endian::read64le(payload.data() + at);
    at += 8;
    if (payload.size() - at < size)
      return {};
    objects.push_back(payload.substr(at, size));
    at += size;
  }
  if (at != payload.size())
    return {};
  return objects;
}

// The optimizer's passes for a kernel module, in LLVM's pipeline syntax: what O3 does that the
// kernels need, at half its cost. Codegen's IR already holds its register tiles, unrolling,
// vectors and prefetches, and every loop counts up to a constant or a dim, so
// what remains is to promote codegen's locals to registers, fold and share the index arithmetic,
// hoist what loops do not change, widen the loops marked vectorized (with the vector math
// mappings), and tidy up. Codegen emits its loops tested at the bottom, the form the vectorizer
// takes, so loop rotation only checks them (0.2 ms instead of 9 of the MoE block's 72 at 32
// tokens, Zen 3, when it had to copy every loop's test before it). O3's inliner, IPO,
// jump threading, unswitching, idiom recognition, induction variable rewriting, SLP
// vectorization and dead store elimination added half of its optimization time to the MoE block
// (35 of 71 ms of CPU at 32 tokens) and nothing to any benchmark shape's run time.
constexpr const char *kKernelPasses =
    "always-inline,"
    "function("
    "sroa<modify-cfg>,early-cse<>,simplifycfg<keep-loops>,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,"
    "loop-mssa(licm<no-allowspeculation>,loop-rotate<header-duplication;no-prepare-for-lto>,"
    "licm<allowspeculation>,simple-loop-unswitch<no-nontrivial;trivial>),"
    "gvn<>,simplifycfg<keep-loops>,"
    "inject-tli-mappings,loop-vectorize,infer-alignment,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,simplifycfg,"
    "loop-mssa(licm<allowspeculation>),"
    "instcombine<max-iterations=1;no-verify-fixpoint>,simplifycfg),"
    "globaldce";

// The passes kernels go through: kKernelPasses, or FRANK_LLVM_PASSES (LLVM's syntax, as
// `opt -passes=` takes it: `default<O3>` is LLVM's O3) to compare others.
std::string kernelPasses() {
  const char *passes = std::getenv("FRANK_LLVM_PASSES");
  return passes && *passes ? passes : kKernelPasses;
}

// Parts of a kernel that cost less than this (compileCost: instructions before optimization, those
// of scalar innermost loops several times) compile faster with the rest than in a thread of their
// own.
constexpr size_t kMinPartCost = 200;

// With FRANK_PERF_MAP=1, names every function the JIT links in /tmp/perf-<pid>.map, the file
// `perf report` reads to symbolize code that no ELF file on disk describes.
class PerfMapWriter : public llvm::orc::ObjectLinkingLayer::Plugin {
public:
  void modifyPassConfig(llvm::orc::MaterializationResponsibility &, llvm::jitlink::LinkGraph &,
                        llvm::jitlink::PassConfiguration &config) override {
    // Relocations name local functions (the parallel bodies) through their section, so the
    // linker would prune those symbols as unreferenced: keep them, to name them.
    config.PrePrunePasses.push_back([](llvm::jitlink::LinkGraph &graph) {
      for (llvm::jitlink::Symbol *symbol : graph.defined_symbols())
        if (symbol->hasName() && symbol->isCallable())
          symbol->setLive(true);
      return llvm::Error::success();
    });
    config.PostFixupPasses.push_back([this](llvm::jitlink::LinkGraph &graph) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!file_)
        file_ = std::fopen(fmt::format("/tmp/perf-{}.map", ::getpid()).c_str(), "a");
      if (!file_)
        return llvm::Error::success(); // a profiling aid only: without the file, no names
      for (llvm::jitlink::Symbol *symbol : graph.defined_symbols())
        if (symbol->hasName() && symbol->isCallable() && symbol->getSize() > 0)
          fmt::print(file_, "{:x} {:x} {}\n", symbol->getAddress().getValue(), symbol->getSize(),
                     symbol->getName().str());
      std::fflush(file_);
      return llvm::Error::success();
    });
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility &) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey,
                                   llvm::orc::ResourceKey) override {}

private:
  std::mutex mutex_;
  std::FILE *file_ = nullptr;
};

struct Engine::Impl {
  std::mutex mutex; // guards the target machines and the JIT's symbol table
  llvm::orc::JITTargetMachineBuilder machineBuilder;
  // One per compiling thread: a target machine caches per-function state and serves one thread
  // at a time. machines[0] also prints assembly.
  std::vector<std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::string cpu, features;
  bool avx2 = false;
  bool avx512 = false;
  bool avx512Math = false;                // AVX-512 F and DQ, which frank's 16-lane exp uses
  std::vector<std::string> missingOnHost; // the features of another CPU that the host lacks
  // Kernel names hash the whole cache key, so a name seen before is the same code: contexts
  // that compile the same kernel share it.
  std::unordered_map<std::string, EntryFn> compiled;
  std::deque<std::string> names; // storage behind the VecDesc string references
  std::vector<llvm::VecDesc> vectorMath;
  std::string fingerprint; // the vector math functions found, and the optimizer's passes

  explicit Impl(const std::string &cpuName) : machineBuilder(machineBuilderFor(cpuName)) {
    llvm::InitializeNativeTargetAsmPrinter();
    machineBuilder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    cpu = machineBuilder.getCPU();
    features = machineBuilder.getFeatures().getString();
    machines.push_back(unwrap(machineBuilder.createTargetMachine(), "creating the target machine"));
    // A named CPU's features are those its name implies, which only the subtarget knows.
    const llvm::MCSubtargetInfo &subtarget = *machines[0]->getMCSubtargetInfo();
    auto has = [&](const char *feature) {
      return subtarget.checkFeatures(std::string("+") + feature);
    };
    avx2 = has("avx2");
    avx512 = has("avx512f");
    avx512Math = avx512 && has("avx512dq");
    if (!cpuName.empty())
      missingOnHost = featuresTheHostLacks(subtarget);
    // Loop strength reduction, with AVX-512's 32 vector registers, took 40% of machine code
    // generation (20 ms of S5's 48) and made S5 slower (1.77-1.81 against 1.54-1.55 ms): the
    // kernels' loops step by constants over simplified addresses, and LSR's rewrites only add
    // live registers. With AVX2's 16, the same loops without it recompute their addresses and
    // shuffle vector registers every iteration (swiglu's exp: 62 instructions for 8 lanes
    // against 39), and S7 runs 49 ms against 42, S9 at 32 tokens 14.3 against 13.4 (Zen 3).
    // The option is LLVM's, one per process: the host's engine sets it, and another CPU's code
    // is generated with the host's setting.
    if (cpuName.empty())
      setLlvmFlag("disable-lsr", avx512);
    // Hardware gathers are microcoded on every x86 we target, and slow where a mitigation
    // (Intel's for Gather Data Sampling) or a VM makes them so: 7.7 cycles per element on the
    // Zen 4 VMs here, where mul_mat_id's strided expert loads took 3x the DRAM time. Loads
    // built one lane at a time cost about one cycle per element everywhere.
    features += std::string(features.empty() ? "" : ",") + "+prefer-no-gather,+prefer-no-scatter";
    // AVX512-BF16's and AVX-NE-CONVERT's f32 to bf16 conversions flush subnormal results to 0.
    // Codegen rounds to bf16 in integer arithmetic, but LLVM's optimizer narrows some f32 ops
    // on widened bf16 values back to bf16 ops, which the code generator widens again and
    // rounds back with those instructions: without them, it calls __truncsfbf2 (runtime).
    features += ",-avx512bf16,-avxneconvert";
    // The JIT links the objects that `compile` generates, or that the disk cache held.
    lljit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(machineBuilder).create(),
                   "creating the JIT");
    // Kernels may call libm (generic mode, tanh, erf).
    lljit->getMainJITDylib().addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                   lljit->getDataLayout().getGlobalPrefix()),
               "opening the process's symbols"));
    if (const char *perfMap = std::getenv("FRANK_PERF_MAP"); perfMap && std::string(perfMap) == "1")
      if (auto *linker =
              llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&lljit->getObjLinkingLayer()))
        linker->addPlugin(std::make_unique<PerfMapWriter>());
    findVectorMath();
    fingerprint += "passes=" + kernelPasses();
    // The parallel runtime, by name, so that kernels (and cached objects) hold no host address,
    // and the conversions to bfloat16 LLVM calls where the CPU has no instruction for them.
    llvm::orc::SymbolMap runtime;
    auto define = [&](const char *name, auto *function) {
      runtime[lljit->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
          llvm::orc::ExecutorAddr::fromPtr(function), llvm::JITSymbolFlags::Exported);
    };
    define("frank_parallel_for", &frank_parallel_for);
    define("__truncsfbf2", &frank_truncsfbf2);
    define("__truncdfbf2", &frank_truncdfbf2);
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
      if (!machines[0]->getMCSubtargetInfo()->checkFeatures(w.feature))
        continue;
      for (const VectorMathFunction &f : kVectorMath) {
        std::string params(f.arity, 'v');
        std::string base(f.libmvec ? f.libmvec : f.scalar);
        const unsigned lanes = f.f64 ? w.lanes / 2 : w.lanes;
        const std::string &vector =
            names.emplace_back(fmt::format("_ZGV{}N{}{}_{}", w.isa, lanes, params, base));
        if (!library.getAddressOfSymbol(vector.c_str()))
          continue;
        const std::string &abi = names.emplace_back(fmt::format("_ZGV_LLVM_N{}{}", lanes, params));
        auto count = llvm::ElementCount::getFixed(lanes);
        vectorMath.emplace_back(f.scalar, vector, count, false, abi);
        fingerprint += vector + ",";
        if (f.intrinsic)
          vectorMath.emplace_back(f.intrinsic, vector, count, false, abi);
      }
    }
  }

  // The host, or the CPU LLVM calls `cpuName` on the host's architecture.
  static llvm::orc::JITTargetMachineBuilder machineBuilderFor(const std::string &cpuName) {
    llvm::InitializeNativeTarget();
    if (cpuName.empty())
      return unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    llvm::Triple triple(llvm::sys::getProcessTriple());
    std::string error;
    const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple.str(), error);
    if (!target)
      internalError("no LLVM target for the host: " + error);
    std::unique_ptr<llvm::MCSubtargetInfo> generic(
        target->createMCSubtargetInfo(triple.str(), "", ""));
    if (!generic->isCPUStringValid(cpuName)) {
      std::vector<std::string> known;
      for (const llvm::SubtargetSubTypeKV &kind : generic->getAllProcessorDescriptions())
        known.push_back(kind.Key);
      throw Error(fmt::format("error: unknown CPU '{}' for {} (LLVM knows: {})", cpuName,
                              triple.str(), fmt::join(known, ", ")));
    }
    llvm::orc::JITTargetMachineBuilder builder(triple);
    builder.setCPU(cpuName);
    return builder;
  }

  // The instruction set extensions kernels may compile to that `subtarget` has and the host
  // does not. Others a CPU name implies (system instructions such as mwaitx, which VMs hide;
  // tuning flags) are not in the kernels' code.
  static std::vector<std::string> featuresTheHostLacks(const llvm::MCSubtargetInfo &subtarget) {
    auto kernelsMayUse = [](llvm::StringRef f) {
      return f.starts_with("sse") || f.starts_with("ssse") || f.starts_with("avx") ||
             f.starts_with("fma") || f.starts_with("amx") || f.starts_with("bmi") || f == "f16c" ||
             f == "popcnt" || f == "lzcnt" || f == "movbe" || f == "cmov" || f == "cx16";
    };
    const llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> missing;
    for (const llvm::SubtargetFeatureKV &feature : subtarget.getAllProcessorFeatures()) {
      auto it = host.find(feature.Key);
      if (kernelsMayUse(feature.Key) && it != host.end() && !it->second &&
          subtarget.checkFeatures(std::string("+") + feature.Key))
        missing.push_back(feature.Key);
    }
    return missing;
  }

  llvm::TargetMachine &machineFor(size_t thread) {
    while (machines.size() <= thread)
      machines.push_back(
          unwrap(machineBuilder.createTargetMachine(), "creating the target machine"));
    return *machines[thread];
  }

  std::unique_ptr<llvm::Module> build(const loops::Program &program, llvm::LLVMContext &context,
                                      CodegenOptions options) {
    if (options.permuteBits < 0)
      options.permuteBits = avx512 ? 512 : avx2 ? 256 : 0;
    if (options.vectorBits < 0)
      options.vectorBits = avx512 ? 512 : 256; // prefer-vector-width, below
    // With 16 registers the vectorizer widens an exp loop one vector an iteration, and the
    // iterations' long chains fill the out-of-order window: swiglu at S2 on a Zen 3 runs
    // 0.200 ms so and 0.158 ms four vectors an iteration (0.279 with two, 0.182 with eight;
    // medians of 15 to 21 alternating rounds). Attention's exp rows run as fast either way, and
    // those of at most 128 keys take one vector an iteration (Codegen.cpp).
    if (options.expInterleave < 0)
      options.expInterleave = avx512 ? 0 : 4;
    auto module = codegen(program, context, options);
    module->setDataLayout(machines[0]->createDataLayout());
    module->setTargetTriple(machines[0]->getTargetTriple().str());
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

  // The kernel passes with `machine`'s cost model, the vectorizer's horizontal maxima through
  // integers, then the math functions' bodies. Cold functions are optimized as the rest, then
  // left to the code generator's quick path.
  void optimize(llvm::Module &module, llvm::TargetMachine &machine, bool useVectorMath) {
    settleColdFunctions(module);
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::TargetLibraryInfoImpl libraryInfo(machine.getTargetTriple());
    if (useVectorMath) {
      libraryInfo.addVectorizableFunctions(vectorMath);
      libraryInfo.addVectorizableFunctions(mathVectorMappings());
    }
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(libraryInfo); });
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    // Constant trip counts invite LLVM to unroll whole small nests (where a pipeline has the
    // unroller, as O3 does): a 2x4x2x8x64 transpose took 1.4 s to optimize into 3244 lines.
    tuning.LoopUnrolling = false;
    // LLVM's --time-passes: the report of the optimizer's passes, printed (to stderr) when the
    // handler goes out of scope.
    llvm::PassInstrumentationCallbacks instrumentation;
    std::optional<llvm::TimePassesHandler> timePasses;
    if (llvm::TimePassesIsEnabled) {
      timePasses.emplace(true);
      timePasses->registerCallbacks(instrumentation);
    }
    llvm::PassBuilder builder(&machine, tuning, std::nullopt, &instrumentation);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager passes;
    if (auto error = builder.parsePassPipeline(passes, kernelPasses()))
      throw Error("error: FRANK_LLVM_PASSES: " + llvm::toString(std::move(error)));
    passes.run(module, mam);
    lowerMaximumReductions(module);
    lowerSixteenBitFloatBits(module);
    compileColdFunctionsQuickly(module);
    defineMathFunctions(module, {avx2, avx512Math});
  }

  static std::string emitObject(llvm::Module &module, llvm::TargetMachine &machine) {
    return emitFile(module, machine, llvm::CodeGenFileType::ObjectFile);
  }

  // The code generator's output for `module`; with --time-passes, then the report of its passes.
  static std::string emitFile(llvm::Module &module, llvm::TargetMachine &machine,
                              llvm::CodeGenFileType type) {
    llvm::SmallString<0> text;
    llvm::raw_svector_ostream os(text);
    llvm::legacy::PassManager pm;
    if (machine.addPassesToEmitFile(pm, os, nullptr, type))
      internalError("the target cannot emit this kind of file");
    pm.run(module);
    if (llvm::TimePassesIsEnabled)
      llvm::reportAndResetTimings();
    return std::string(text);
  }

  // A kernel part as FRANK_DEBUG=2 names it: its size, the parallel loops and the nests it holds.
  static std::string describePart(const llvm::Module &part) {
    std::vector<std::string> loops, nests;
    for (const llvm::Function &f : part) {
      if (f.isDeclaration())
        continue;
      if (f.getName().ends_with(".chunk"))
        loops.push_back(f.getName().drop_back(6).rsplit('.').second.str());
      if (f.getName().ends_with(".nest"))
        nests.push_back(f.getName().drop_back(5).rsplit('.').second.str());
    }
    std::string text = fmt::format("{} instructions", part.getInstructionCount());
    if (!loops.empty())
      text += fmt::format("; loops {}", fmt::join(loops, " "));
    if (!nests.empty())
      text += fmt::format("; nests {}", fmt::join(nests, " "));
    return text;
  }

  // Optimizes `module` and generates its objects: one, or one per part on threads of their own
  // when the kernel splits (see codegen/SplitKernel.h), at most as many as the kernels' threads.
  // `optimized` receives the optimized IR; `lap` marks the end of each stage.
  std::vector<std::string> compileObjects(llvm::Module &module, bool useVectorMath,
                                          std::string *optimized,
                                          const std::function<void(const char *)> &lap) {
    const unsigned threads = unsigned(std::min(2, runtime::numThreads()));
    // Twice the parts of the threads, for the second thread to take one when the first part
    // alone takes longer than the others.
    // LLVM's pass timers are the process's: with --time-passes, one module on this thread.
    KernelParts parts;
    if (threads >= 2 && !llvm::TimePassesIsEnabled)
      parts = splitKernel(module, 2 * threads, kMinPartCost);
    if (parts.empty()) {
      inlineLocalNests(module);
      optimize(module, machineFor(0), useVectorMath);
      lap("optimize");
      if (optimized)
        *optimized = printModule(module);
      std::vector<std::string> whole = {emitObject(module, machineFor(0))};
      lap("machine-code");
      return whole;
    }
    lap("split-in-parts");
    std::vector<std::string> objects(parts.size()), printed(parts.size());
    std::vector<std::exception_ptr> failures(threads);
    std::atomic<size_t> next = 0;
    auto compileParts = [&](unsigned thread) {
      try {
        for (size_t i = next++; i < parts.size(); i = next++) {
          llvm::LLVMContext context;
          std::unique_ptr<llvm::Module> part = readPart(parts, i, context);
          const std::string described = debugLevel() >= 2 ? describePart(*part) : "";
          auto begin = std::chrono::steady_clock::now();
          optimize(*part, *machines[thread], useVectorMath);
          auto middle = std::chrono::steady_clock::now();
          if (optimized)
            printed[i] = printModule(*part);
          objects[i] = emitObject(*part, *machines[thread]);
          if (debugLevel() >= 2) {
            using ms = std::chrono::duration<double, std::milli>;
            auto end = std::chrono::steady_clock::now();
            fmt::print(
                stderr,
                "frank:   part {} ({}) on thread {}: optimize {:.3f} ms, machine code {:.3f} ms\n",
                i, described, thread, ms(middle - begin).count(), ms(end - middle).count());
          }
        }
      } catch (...) {
        failures[thread] = std::current_exception();
      }
    };
    for (unsigned t = 1; t < threads; ++t)
      machineFor(t); // before any helper reads `machines`
    std::vector<std::thread> helpers;
    for (unsigned t = 1; t < threads; ++t)
      helpers.emplace_back(compileParts, t);
    compileParts(0);
    for (std::thread &helper : helpers)
      helper.join();
    for (const std::exception_ptr &failure : failures)
      if (failure)
        std::rethrow_exception(failure);
    lap("optimize+machine-code");
    if (optimized)
      for (const std::string &text : printed)
        *optimized += text;
    return objects;
  }

  // Links a kernel's objects under a tracker of their own, so that objects that fail to link
  // can be taken out again and the kernel compiled under the same name.
  EntryFn link(const std::string &name, const std::vector<std::string_view> &objects,
               std::string &error) {
    auto tracker = lljit->getMainJITDylib().createResourceTracker();
    auto fail = [&](llvm::Error why) -> EntryFn {
      error = llvm::toString(std::move(why));
      if (auto e = tracker->remove())
        internalError(
            fmt::format("removing a kernel that failed to link: {}", llvm::toString(std::move(e))));
      return nullptr;
    };
    for (std::string_view object : objects)
      if (llvm::Error e = lljit->addObjectFile(
              tracker, llvm::MemoryBuffer::getMemBufferCopy(
                           llvm::StringRef(object.data(), object.size()), name)))
        return fail(std::move(e));
    llvm::Expected<llvm::orc::ExecutorAddr> address = lljit->lookup(name);
    if (!address)
      return fail(address.takeError());
    return compiled[name] = address->toPtr<EntryFn>();
  }
};

Engine::Engine(const std::string &cpu) : impl_(std::make_unique<Impl>(cpu)) {}
Engine::~Engine() = default;

Engine &Engine::instance() { return forCpu(""); }

Engine &Engine::forCpu(const std::string &cpu) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<Engine>> engines;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Engine> &engine = engines[cpu];
  if (!engine) {
    try {
      engine.reset(new Engine(cpu));
    } catch (...) {
      engines.erase(cpu);
      throw;
    }
  }
  return *engine;
}

void Engine::checkRunsOnHost() const {
  if (!impl_->missingOnHost.empty())
    throw Error(fmt::format("error: kernels for CPU '{}' cannot run on this host, which lacks {}; "
                            "they can only be printed",
                            impl_->cpu, fmt::join(impl_->missingOnHost, ", ")));
}

const std::string &Engine::cpuName() const { return impl_->cpu; }
const std::string &Engine::hostFingerprint() const { return impl_->fingerprint; }
const std::string &Engine::cpuFeatures() const { return impl_->features; }
bool Engine::hasAvx2() const { return impl_->avx2; }

loops::Target Engine::target() const {
  loops::Target target = impl_->avx512 ? loops::Target::avx512() : loops::Target::avx2();
  target.prefetchRowsAhead =
      !llvm::StringRef(impl_->cpu).starts_with("znver") || impl_->cpu == "znver4";
  if (impl_->cpu == "znver5") {
    target.blockKPanelBytes *= 2;
    target.blockKSliceBytes *= 2;
  }
  return target;
}

EntryFn
Engine::compile(const loops::Program &program, const CodegenOptions &options,
                const std::function<void(const std::string &, const std::string &)> &printAfter,
                std::string *object) {
  checkRunsOnHost();
  llvm::LLVMContext context;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->compiled.find(program.name); it != impl_->compiled.end())
    return it->second;
  auto start = std::chrono::steady_clock::now();
  auto lap = [&](const char *what) {
    auto now = std::chrono::steady_clock::now();
    if (debugLevel() >= 1)
      fmt::print(stderr, "frank: {:<20} {:8.3f} ms\n", what,
                 std::chrono::duration<double, std::milli>(now - start).count());
    start = now;
  };
  auto module = impl_->build(program, context, options);
  module->setModuleIdentifier(program.name);
  lap("codegen");
  if (printAfter)
    printAfter("codegen", printModule(*module));
  std::string optimized;
  std::vector<std::string> objects =
      impl_->compileObjects(*module, options.vectorMath, printAfter ? &optimized : nullptr, lap);
  if (printAfter)
    printAfter("optimize", optimized);
  std::string error;
  EntryFn entry = impl_->link(program.name,
                              std::vector<std::string_view>(objects.begin(), objects.end()), error);
  if (const char *custom = std::getenv("FRANK_LLVM_PASSES"); !entry && custom && *custom)
    // The user's pipeline may drop or rename the kernel's functions (internalize, say).
    throw Error(fmt::format("error: FRANK_LLVM_PASSES='{}': the kernel does not link after it: {}",
                            custom, error));
  if (!entry)
    internalError("linking a compiled kernel: " + error);
  lap("link");
  if (object)
    *object = packObjects(objects);
  return entry;
}

EntryFn Engine::find(const std::string &name) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->compiled.find(name);
  return it == impl_->compiled.end() ? nullptr : it->second;
}

EntryFn Engine::load(const std::string &name, std::string_view object, std::string &error) {
  checkRunsOnHost();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->compiled.find(name); it != impl_->compiled.end())
    return it->second;
  std::vector<std::string_view> objects = unpackObjects(object);
  if (objects.empty()) {
    error = "the cached kernel is not a list of objects";
    return nullptr;
  }
  return impl_->link(name, objects, error);
}

std::string Engine::emit(const loops::Program &program, const CodegenOptions &options,
                         Output output) {
  llvm::LLVMContext context;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto module = impl_->build(program, context, options);
  if (output == Output::LLVM)
    return printModule(*module);
  inlineLocalNests(*module);
  impl_->optimize(*module, impl_->machineFor(0), options.vectorMath);
  if (output == Output::OptimizedLLVM)
    return printModule(*module);
  return Impl::emitFile(*module, impl_->machineFor(0), llvm::CodeGenFileType::AssemblyFile);
}

} // namespace frank::jit
