// LLJIT, target machine and O3 pipeline.
#include "Engine.h"
#include "ir/Diagnostics.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <mutex>
#include <unordered_map>

namespace frank::jit {

namespace {
template <class T> T unwrap(llvm::Expected<T> value, const char *what) {
  if (!value)
    internalError(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

std::string printModule(const llvm::Module &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return text;
}
} // namespace

struct Engine::Impl {
  std::mutex mutex; // guards the target machine and the JIT's symbol table
  std::unique_ptr<llvm::TargetMachine> machine;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::string cpu, features;
  bool avx512 = false;
  // Kernel names hash the whole cache key, so a name seen before is the same code: contexts
  // that compile the same kernel share it.
  std::unordered_map<std::string, EntryFn> compiled;

  Impl() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto builder = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    cpu = builder.getCPU();
    features = builder.getFeatures().getString();
    avx512 = features.find("+avx512f") != std::string::npos;
    machine = unwrap(builder.createTargetMachine(), "creating the target machine");
    lljit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(builder).create(),
                   "creating the JIT");
    // Kernels may call libm (generic mode, tanh, erf).
    lljit->getMainJITDylib().addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                   lljit->getDataLayout().getGlobalPrefix()),
               "opening the process's symbols"));
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

  void optimize(llvm::Module &module) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    llvm::PassBuilder builder(machine.get(), tuning);
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
  }
};

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

Engine &Engine::instance() {
  static Engine engine;
  return engine;
}

const std::string &Engine::cpuName() const { return impl_->cpu; }
const std::string &Engine::cpuFeatures() const { return impl_->features; }

EntryFn
Engine::compile(const loops::Program &program, const CodegenOptions &options,
                const std::function<void(const std::string &, const std::string &)> &printAfter) {
  auto context = std::make_unique<llvm::LLVMContext>();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->compiled.find(program.name); it != impl_->compiled.end())
    return it->second;
  auto module = impl_->build(program, *context, options);
  if (printAfter)
    printAfter("codegen", printModule(*module));
  impl_->optimize(*module);
  if (printAfter)
    printAfter("optimize-O3", printModule(*module));
  llvm::orc::ThreadSafeModule tsm(std::move(module), std::move(context));
  if (auto error = impl_->lljit->addIRModule(std::move(tsm)))
    internalError("adding a kernel to the JIT: " + llvm::toString(std::move(error)));
  auto address = unwrap(impl_->lljit->lookup(program.name), "looking up a compiled kernel");
  return impl_->compiled[program.name] = address.toPtr<EntryFn>();
}

std::string Engine::emit(const loops::Program &program, const CodegenOptions &options,
                         Output output) {
  llvm::LLVMContext context;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto module = impl_->build(program, context, options);
  if (output == Output::LLVM)
    return printModule(*module);
  impl_->optimize(*module);
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
