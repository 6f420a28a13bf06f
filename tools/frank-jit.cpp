// The frank-jit command line tool: compile a component and show any stage, run it on inputs,
// benchmark it against generic mode, inspect the disk kernel cache.
#include "Inputs.h"
#include "MedianReporter.h"
#include "frank/Frank.h"
#include "frank/Npy.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <llvm/Pass.h>
#include <llvm/Support/CommandLine.h>

#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>

namespace cl = llvm::cl;
using namespace frank;

namespace {

cl::OptionCategory category("frank-jit options");
cl::SubCommand compileCmd("compile", "Compile a function for given input types and print a stage");
cl::SubCommand runCmd("run", "Run a function on inputs and print or save its results");
cl::SubCommand benchCmd("bench", "Benchmark a function, specialized and generic "
                                 "(takes Google Benchmark's --benchmark_* flags too)");
cl::SubCommand linkCmd("link",
                       "Link a component with the modules it declares and print the result");
cl::SubCommand cacheCmd("cache", "Show or clear the disk kernel cache: stats, ls or clear");

cl::opt<std::string> cacheAction(cl::Positional, cl::desc("<stats|ls|clear>"), cl::sub(cacheCmd),
                                 cl::cat(category));

cl::opt<std::string> file(cl::Positional, cl::desc("<component.mlir>"), cl::Required,
                          cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd), cl::sub(linkCmd),
                          cl::cat(category));
cl::list<std::string> linkFiles("link",
                                cl::desc("A module to link against (repeatable; it wins over a "
                                         "module of its symbol on the search path)"),
                                cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
                                cl::sub(linkCmd), cl::cat(category));
cl::list<std::string> linkPaths("link-path",
                                cl::desc("A directory searched for modules by symbol (repeatable; "
                                         "the component library is always on the path, and a "
                                         "symbol that two of its files define is an error)"),
                                cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
                                cl::sub(linkCmd), cl::cat(category));
cl::opt<std::string> linkOutput("o",
                                cl::desc("Where `link` writes the merged module (default: stdout)"),
                                cl::value_desc("file"), cl::sub(linkCmd), cl::cat(category));
cl::opt<std::string> function("function",
                              cl::desc("The function to compile (default: the only public one)"),
                              cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
                              cl::cat(category));
cl::list<std::string>
    inputs("input",
           cl::desc("An argument: 32x4096xf32 (compile), 32x4096xf32=@x.npy, @x.npy, "
                    "32x4096xf32=random, 2x32xi32=random:0:8, 2xf32=1,2, f32=1e-6, index=2, "
                    "i1=true"),
           cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd), cl::cat(category));
cl::opt<Mode>
    mode("mode", cl::desc("Compilation mode"), cl::init(Mode::Specialized),
         cl::values(clEnumValN(Mode::Specialized, "specialized", "bake every shape in (default)"),
                    clEnumValN(Mode::Generic, "generic", "keep dims as runtime values")),
         cl::sub(compileCmd), cl::sub(runCmd), cl::cat(category));
cl::opt<Stage>
    emit("emit", cl::desc("The stage to print"), cl::init(Stage::Assembly),
         cl::values(clEnumValN(Stage::Mlir, "mlir", "the parsed module"),
                    clEnumValN(Stage::Specialized, "specialized",
                               "tensor IR after specialization and fusion"),
                    clEnumValN(Stage::Loops, "loops", "the loop IR"),
                    clEnumValN(Stage::LLVM, "llvm", "LLVM IR as generated"),
                    clEnumValN(Stage::OptimizedLLVM, "llvm-opt", "LLVM IR after optimization"),
                    clEnumValN(Stage::Assembly, "asm", "host assembly (default)")),
         cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> printAfterAll("print-ir-after-all", cl::desc("Print the IR after every pass"),
                            cl::sub(compileCmd), cl::cat(category));
// LLVM's pass timers, which the engine reads (llvm::TimePassesIsEnabled).
cl::opt<bool> timePasses("time-passes",
                         cl::desc("Print to stderr how long each LLVM pass took, optimizer and "
                                  "code generator, for each kernel compiled (on one thread)"),
                         cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
                         cl::cat(category));
cl::opt<bool> explain("explain", cl::desc("Say which dims and values were baked in"),
                      cl::sub(compileCmd), cl::sub(runCmd), cl::cat(category));
cl::list<std::string> outputs("output", cl::desc("Write result N to @file.npy (repeat per result)"),
                              cl::sub(runCmd), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed for =random inputs"), cl::init(0), cl::sub(runCmd),
                       cl::sub(benchCmd), cl::cat(category));
cl::opt<bool> boundsChecks("bounds-checks",
                           cl::desc("Check data-dependent indices (gathers) at run time (default "
                                    "true; =false is faster)"),
                           cl::init(true), cl::sub(runCmd), cl::sub(benchCmd), cl::cat(category));
cl::opt<std::string> loweringConfig(
    "config",
    cl::desc(
        "Override the strategy of every contraction of specialized kernels (generic ones are "
        "plain loops): comma-separated pipeline=loops|"
        "contraction.outer|contraction.dot|contraction.gather|contraction.choices|"
        "contraction.ranks|contraction.stream, tile=MxN, k-block=K, pack=0|1, prefetch=N "
        "(contraction.dot: n blocks ahead), key-chunks=N (attention's keys in N chunks, "
        "1: one piece), query-blocks=N (attention's queries in N blocks, 1: one piece), "
        "blocks-outside=0|1 (the contraction tiles' blocks outside the "
        "parallel dims B is read more closely along), n-group=G (contraction.outer's n blocks in "
        "groups of G, k blocks outside each; 0: none), ranks=by-choice|in-order "
        "(contraction.ranks' slots), k-blocks=in-tile|outside (contraction.ranks' k blocks inside "
        "each tile or outside the m blocks)"),
    cl::value_desc("choices"), cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
    cl::cat(category));

cl::opt<std::string> versusConfig(
    "versus",
    cl::desc("Also time the fully specialized kernel under these strategy choices (the --config "
             "syntax; empty: the default strategy) as `versus`, in the same process; with "
             "--benchmark_enable_random_interleaving=true the two kernels' repetitions "
             "alternate, so that a shared machine's drift affects both alike"),
    cl::value_desc("choices"), cl::sub(benchCmd), cl::cat(category));

cl::list<std::string> runtimeDims(
    "runtime-dims",
    cl::desc("Dims that specialized kernels keep as runtime values, as ARGUMENT:DIM pairs "
             "(key:1,value:1; repeatable); `bench` then also times this partly specialized "
             "kernel"),
    cl::value_desc("dims"), cl::CommaSeparated, cl::sub(compileCmd), cl::sub(runCmd),
    cl::sub(benchCmd), cl::cat(category));

// The --runtime-dims of every occurrence, as one list.
std::string runtimeDimsText() { return fmt::format("{}", fmt::join(runtimeDims, ",")); }

cl::opt<bool> noDiskCache("no-disk-cache",
                          cl::desc("Neither load kernels from the disk cache nor store them there"),
                          cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
                          cl::cat(category));

cl::opt<std::string>
    cpu("cpu",
        cl::desc("Generate code for this CPU, by LLVM's name (skylake-avx512, znver3, "
                 "x86-64-v3; default: $FRANK_CPU, else the host). Kernels that need features the "
                 "host lacks can "
                 "be printed but not run"),
        cl::value_desc("name"), cl::sub(compileCmd), cl::sub(runCmd), cl::sub(benchCmd),
        cl::cat(category));

ContextOptions contextOptions() {
  ContextOptions options;
  options.boundsChecks = boundsChecks;
  options.loweringConfig = loweringConfig;
  options.cpu = cpu;
  if (noDiskCache)
    options.diskCache = false;
  return options;
}

cl::opt<int64_t> printMax("print-max-elements", cl::desc("Elements printed per result"),
                          cl::init(1024), cl::sub(runCmd), cl::cat(category));

Module loadModule(Context &ctx) {
  LinkOptions link;
  link.files.assign(linkFiles.begin(), linkFiles.end());
  link.searchPaths.assign(linkPaths.begin(), linkPaths.end());
  return ctx.load(file, link);
}

// The chosen function, with no runtime dims.
Function lookupFully(Module &module) {
  if (!function.empty())
    return module.function(function);
  auto names = module.functionNames();
  if (names.size() != 1)
    throw Error(
        fmt::format("error: {} defines {} public functions ({}); choose one with "
                    "--function=NAME",
                    file.getValue(), names.size(),
                    names.empty() ? "none" : "@" + fmt::format("{}", fmt::join(names, ", @"))));
  return module.function(names.front());
}

// The chosen function, keeping the --runtime-dims.
Function lookup(Module &module) {
  Function fn = lookupFully(module);
  return runtimeDims.empty() ? fn : fn.withRuntimeDims(parseRuntimeDims(runtimeDimsText()));
}

void checkInputCount(const Function &fn) {
  auto declared = fn.argumentTypes();
  if (inputs.size() != declared.size())
    throw Error(fmt::format("error: '@{}' takes {} arguments ({}) but {} --input{} given",
                            fn.name(), declared.size(), fmt::join(declared, ", "), inputs.size(),
                            inputs.size() == 1 ? " was" : "s were"));
}

std::vector<Arg> parseInputs(const Function &fn) {
  checkInputCount(fn);
  auto declared = fn.argumentTypes();
  std::vector<Arg> args;
  for (size_t i = 0; i < inputs.size(); ++i)
    args.push_back(cli::parseInput(inputs[i], declared[i], seed, i));
  return args;
}

int compileCommand() {
  Context ctx(contextOptions());
  Module module = loadModule(ctx);
  Function fn = lookup(module);
  checkInputCount(fn);
  // A type is all that compiling needs, but an input that gives data (values, random or a
  // .npy file) must be good data: it is read, and its type taken from it.
  std::vector<std::string> types;
  auto declared = fn.argumentTypes();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string &input = inputs[i];
    const bool givesData = input.rfind('@', 0) == 0 || input.find('=') != std::string::npos;
    if (!givesData)
      cli::checkScalarType(input, declared[i], i);
    types.push_back(givesData ? cli::inputType(cli::parseInput(input, declared[i], seed, i))
                              : input);
  }
  if (explain) {
    Kernel k = fn.specialize(types, mode);
    for (const std::string &line : k.explanation())
      fmt::print(stderr, "{}\n", line);
  }
  std::cout << fn.emit(emit, types, mode, printAfterAll);
  return 0;
}

int linkCommand() {
  Context ctx;
  std::string text = loadModule(ctx).print();
  if (linkOutput.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(linkOutput);
  if (!(out << text))
    throw Error(fmt::format("{}: error: cannot write the linked module", linkOutput.getValue()));
  return 0;
}

int runCommand() {
  if (printMax < 0)
    throw Error(fmt::format("error: --print-max-elements={} is not a count", printMax.getValue()));
  for (const std::string &path : outputs)
    if (path.size() < 2 || path[0] != '@')
      throw Error(fmt::format("error: --output '{}' must name a file as @file.npy", path));
  Context ctx(contextOptions());
  Module module = loadModule(ctx);
  Function fn = lookup(module);
  std::vector<Arg> args = parseInputs(fn);
  Kernel kernel = fn.specialize(args, mode);
  if (explain)
    for (const std::string &line : kernel.explanation())
      fmt::print(stderr, "{}\n", line);
  std::vector<Tensor> results = kernel(args);
  if (!outputs.empty() && outputs.size() != results.size())
    throw Error(fmt::format("error: '@{}' has {} result{} but {} --output{} given", fn.name(),
                            results.size(), results.size() == 1 ? "" : "s", outputs.size(),
                            outputs.size() == 1 ? " was" : "s were"));
  for (size_t i = 0; i < results.size(); ++i) {
    if (!outputs.empty()) {
      writeNpy(outputs[i].substr(1), results[i]);
      continue;
    }
    fmt::print("result[{}]: {}\n", i, cli::formatTensor(results[i], printMax));
  }
  return 0;
}

int64_t argumentBytes(const std::vector<Arg> &args, const std::vector<Tensor> &results) {
  int64_t bytes = 0;
  for (const Arg &a : args)
    if (const Tensor *t = std::get_if<Tensor>(&a))
      bytes += static_cast<int64_t>(t->byteSize());
  for (const Tensor &t : results)
    bytes += static_cast<int64_t>(t.byteSize());
  return bytes;
}

int benchCommand(int benchArgc, char **benchArgv) {
  Context ctx(contextOptions());
  Module module = loadModule(ctx);
  Function fn = lookup(module);
  std::vector<Arg> args = parseInputs(fn);
  std::string format = "console";
  // Whether --benchmark_filter keeps benchmark `name` (a regular expression it contains; a
  // leading '-' negates it).
  std::function<bool(const std::string &)> kept = [](const std::string &) { return true; };
  // Values Google Benchmark takes without a word and then fails on, or ignores.
  for (int i = 1; i < benchArgc; ++i) {
    const std::string flag = benchArgv[i];
    const std::string value = flag.substr(flag.find('=') + 1);
    if (flag.rfind("--benchmark_format=", 0) == 0) {
      format = value;
      if (format != "console" && format != "json" && format != "csv")
        throw Error(fmt::format("error: {}: the format is console, json or csv", flag));
    }
    if (flag.rfind("--benchmark_repetitions=", 0) == 0) {
      char *end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 1000000)
        throw Error(fmt::format("error: {}: repetitions are a count from 1", flag));
    }
    if (flag.rfind("--benchmark_filter=", 0) == 0) {
      const bool negated = value.rfind('-', 0) == 0;
      try {
        kept = [negated, filter = std::regex(negated ? value.substr(1) : value)](
                   const std::string &name) { return std::regex_search(name, filter) != negated; };
      } catch (const std::regex_error &e) {
        throw Error(fmt::format("error: {}: not a regular expression: {}", flag, e.what()));
      }
    }
  }
  benchmark::Initialize(&benchArgc, benchArgv);
  if (benchArgc > 1)
    throw Error(fmt::format("error: Google Benchmark did not take '{}': an unknown flag or a "
                            "bad value",
                            benchArgv[1]));
  // Fully specialized, under the --versus choices, partly specialized (with --runtime-dims),
  // generic. The specialized kernel compiles and runs now, so that bad inputs fail before any
  // benchmark, and so does the one under the --versus choices, unless the filter leaves it out;
  // the others when their benchmark first runs, so that a --benchmark_filter that leaves them
  // out costs nothing (the generic MoE block at 32 tokens gathers 940 MB of weights on its
  // first call).
  struct Prepared {
    Kernel kernel;
    std::vector<Tensor> results;
    int64_t bytes;
  };
  auto prepare = [args](Kernel kernel) {
    std::vector<Tensor> results = kernel(args);
    int64_t bytes = argumentBytes(args, results);
    return Prepared{std::move(kernel), std::move(results), bytes};
  };
  std::vector<std::pair<std::string, std::function<Kernel()>>> kinds;
  kinds.emplace_back("specialized", [&] { return lookupFully(module).specialize(args); });
  // The same kernel under other choices: a context of its own, whose options name them (and
  // whose errors name the flag that set them).
  std::optional<Context> versusCtx;
  if (versusConfig.getNumOccurrences()) {
    ContextOptions options = contextOptions();
    options.loweringConfig = versusConfig;
    options.loweringConfigName = "--versus";
    versusCtx.emplace(options);
    auto versus = std::make_shared<Module>(loadModule(*versusCtx));
    kinds.emplace_back("versus", [versus, args] { return lookupFully(*versus).specialize(args); });
  }
  if (!runtimeDims.empty())
    kinds.emplace_back("partial", [fn, args] { return fn.specialize(args); });
  kinds.emplace_back("generic", [fn, args] { return fn.specialize(args, Mode::Generic); });
  // A failure inside a benchmark skips it; the first is the command's error.
  std::exception_ptr failure;
  for (auto &[kind, make] : kinds) {
    auto prepared = std::make_shared<std::optional<Prepared>>();
    std::string name = fmt::format("{}/{}", fn.name(), kind);
    if (kind == "specialized" || (kind == "versus" && kept(name + "/real_time")))
      prepared->emplace(prepare(make()));
    benchmark::RegisterBenchmark(name.c_str(), [make, args, prepared, prepare,
                                                &failure](benchmark::State &state) {
      try {
        if (!*prepared)
          prepared->emplace(prepare(make()));
      } catch (...) {
        if (!failure)
          failure = std::current_exception();
        state.SkipWithError("failed to compile or run");
        return;
      }
      Prepared &p = **prepared;
      for (auto _ : state) {
        p.kernel.run(args, p.results);
        benchmark::ClobberMemory();
      }
      // Every argument's and result's bytes once a call: what an elementwise kernel moves, but
      // not what a gather reads of its table (an embedding lookup reads 128 of 32000 rows), so
      // named for what it counts rather than Google Benchmark's bytes_per_second.
      state.counters["argument_bytes/s"] = benchmark::Counter(
          static_cast<double>(state.iterations() * p.bytes), benchmark::Counter::kIsRate);
      state.counters["compile_ms"] = p.kernel.compileSeconds() * 1e3;
    })->UseRealTime();
  }
  auto reporter = bench::MedianReporter::forFormat(format);
  benchmark::RunSpecifiedBenchmarks(reporter.get());
  if (failure) {
    benchmark::Shutdown();
    std::rethrow_exception(failure);
  }
  double specialized = reporter->seconds(fn.name() + "/specialized");
  double generic = reporter->seconds(fn.name() + "/generic");
  if (specialized > 0 && generic > 0)
    fmt::print(stderr, "{}: specialized is {:.2f}x {} than generic\n", fn.name(),
               std::max(generic, specialized) / std::min(generic, specialized),
               generic >= specialized ? "faster" : "slower");
  double versus = reporter->seconds(fn.name() + "/versus");
  if (specialized > 0 && versus > 0)
    fmt::print(stderr, "{}: specialized under --versus='{}' takes {:.3f}x the time of {}\n",
               fn.name(), versusConfig.getValue(), versus / specialized,
               loweringConfig.empty() ? std::string("the default strategy")
                                      : fmt::format("--config='{}'", loweringConfig.getValue()));
  double partial = reporter->seconds(fn.name() + "/partial");
  if (specialized > 0 && partial > 0)
    fmt::print(stderr, "{}: partly specialized ({}) takes {:.2f}x the fully specialized time\n",
               fn.name(), runtimeDimsText(), partial / specialized);
  benchmark::Shutdown();
  return 0;
}

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1024)
    return fmt::format("{} B", bytes);
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string formatTime(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

int cacheCommand() {
  if (cacheAction.empty())
    throw Error("error: choose a cache command: stats, ls or clear");
  if (cacheAction == "stats") {
    DiskCacheInfo info = diskCacheInfo();
    fmt::print("directory: {}\n", info.directory.empty() ? "(none)" : info.directory);
    fmt::print("status:    {}\n", info.status);
    fmt::print("entries:   {}\n", info.entries.size());
    fmt::print("size:      {} ({} bytes)\n", formatBytes(info.totalBytes), info.totalBytes);
    fmt::print("cap:       {} ({} bytes)\n", formatBytes(info.maxBytes), info.maxBytes);
    return 0;
  }
  // ls and clear work on a refused directory too, and say that kernels do not load from it.
  auto warnIfRefused = [](const DiskCacheInfo &info) {
    if (info.status.rfind("refused: ", 0) == 0)
      fmt::print(stderr,
                 "frank-jit: warning: kernels are neither loaded from nor stored in {}: {}\n",
                 info.directory, info.status.substr(9));
  };
  if (cacheAction == "ls") {
    // Most recently used first, as `ls -t` lists.
    DiskCacheInfo info = diskCacheInfo();
    warnIfRefused(info);
    for (auto it = info.entries.rbegin(); it != info.entries.rend(); ++it)
      fmt::print("{:>10}  {}  {}\n", formatBytes(it->bytes), formatTime(it->lastUsed),
                 it->problem.empty() ? it->description
                                     : fmt::format("(corrupt: {}) {}", it->problem, it->path));
    return 0;
  }
  if (cacheAction == "clear") {
    DiskCacheInfo info = diskCacheInfo();
    warnIfRefused(info);
    size_t removed = clearDiskCache();
    fmt::print("removed {} entr{} from {}\n", removed, removed == 1 ? "y" : "ies",
               info.directory.empty() ? "(none)" : info.directory);
    return 0;
  }
  throw Error(fmt::format("error: unknown cache command '{}' (expected stats, ls or clear)",
                          cacheAction.getValue()));
}

} // namespace

int main(int argc, char **argv) {
  // Google Benchmark's flags go to the benchmark library, not to the option parser.
  std::vector<char *> ours{argv[0]}, theirs{argv[0]};
  for (int i = 1; i < argc; ++i)
    (std::strncmp(argv[i], "--benchmark_", 12) == 0 ? theirs : ours).push_back(argv[i]);
  cl::HideUnrelatedOptions(category);
  cl::SetVersionPrinter(
      [](llvm::raw_ostream &os) { os << "frank-jit " FRANK_VERSION " (LLVM 19)\n"; });
  if (!cl::ParseCommandLineOptions(
          static_cast<int>(ours.size()), ours.data(),
          "frank-jit: shape-specializing JIT for MLIR components\n\n"
          "  frank-jit compile FILE.mlir --function=F --input=32x4096xf32 ... "
          "[--emit=mlir|specialized|loops|llvm|llvm-opt|asm]\n"
          "  frank-jit run FILE.mlir --function=F --input=32x4096xf32=@x.npy ... "
          "[--output=@y.npy]\n"
          "  frank-jit bench FILE.mlir --function=F --input=... [--benchmark_*]\n"
          "  frank-jit cache stats|ls|clear\n",
          &llvm::errs()))
    return 1;
  llvm::TimePassesIsEnabled = timePasses;
  try {
    // LLVM's options keep the last of several occurrences; of these a second is a mistake (the
    // first would be dropped without a word).
    for (const cl::Option *option : std::initializer_list<const cl::Option *>{
             &function, &mode, &emit, &loweringConfig, &versusConfig, &cpu, &seed, &linkOutput,
             &printMax})
      if (option->getNumOccurrences() > 1)
        throw Error(fmt::format("error: --{} is given {} times; give it once", option->ArgStr.str(),
                                option->getNumOccurrences()));
    if (!benchCmd && theirs.size() > 1)
      throw Error(fmt::format("error: '{}' is a flag of `bench` only", theirs[1]));
    // Generic kernels are plain loops: no strategy to override.
    if ((compileCmd || runCmd) && mode == Mode::Generic && loweringConfig.getNumOccurrences())
      throw Error("error: --config sets the strategies of specialized kernels, and "
                  "--mode=generic lowers every op to plain loops");
    if (compileCmd)
      return compileCommand();
    if (runCmd)
      return runCommand();
    if (linkCmd)
      return linkCommand();
    if (cacheCmd)
      return cacheCommand();
    if (benchCmd) {
      int n = static_cast<int>(theirs.size());
      return benchCommand(n, theirs.data());
    }
    llvm::errs()
        << "frank-jit: error: choose a command: compile, run, bench, link or cache (see --help)\n";
    return 1;
  } catch (const InternalError &e) {
    // A bug, not the user's input: a distinct status so that scripts can tell the two apart.
    fmt::print(stderr, "frank-jit: {}\n", e.what());
    return 2;
  } catch (const Error &e) {
    std::string message = e.what();
    // Messages from source text already say "file:line:col: error:"; the rest get a prefix.
    if (message.rfind("error:", 0) == 0)
      fmt::print(stderr, "frank-jit: {}\n", message);
    else
      fmt::print(stderr, "{}\n", message);
    return 1;
  } catch (const std::exception &e) {
    fmt::print(stderr, "frank-jit: internal error (a bug in frank-jit, please report it): {}\n",
               e.what());
    return 2;
  }
}
