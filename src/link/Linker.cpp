// The linker.
#include "link/Linker.h"
#include "ir/Clone.h"
#include "ir/Ops.h"
#include "ir/Printer.h"
#include "parse/Parser.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace frank {
namespace {

namespace fs = std::filesystem;

// The module symbol a file defines, read from its text without parsing it: the first
// `module @Name` outside a comment.
std::string moduleSymbolOf(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::string code = line.substr(0, line.find("//"));
    size_t at = code.find("module @");
    if (at == std::string::npos ||
        (at > 0 && !std::isspace(static_cast<unsigned char>(code[at - 1]))))
      continue;
    size_t start = at + 8, end = start;
    if (start < code.size() && code[start] == '"') { // a quoted symbol, `module @"lib mod"`
      end = code.find('"', start + 1);
      return end == std::string::npos ? std::string() : code.substr(start + 1, end - start - 1);
    }
    while (end < code.size() && (std::isalnum(static_cast<unsigned char>(code[end])) ||
                                 code[end] == '_' || code[end] == '$' || code[end] == '.'))
      ++end;
    return code.substr(start, end - start);
  }
  return {};
}

class Linker {
public:
  Linker(ModuleOp &main, const LinkSources &sources) : main_(main) {
    for (const std::string &file : sources.files) {
      auto module = parseFile(file);
      if (module->name.empty())
        throw Error(fmt::format("{}: error: a linked file must define a named module "
                                "('module @name {{ ... }}')",
                                file));
      // Reported at the second definition, with the source line, citing the first.
      if (module->name == main.name)
        fail(module->loc,
             fmt::format("module @{} is defined twice: here and in the main file at {}",
                         module->name, main.loc.str()));
      if (auto it = explicit_.find(module->name); it != explicit_.end())
        fail(module->loc, fmt::format("module @{} is defined twice: here and at {}", it->first,
                                      it->second->loc.str()));
      explicit_.emplace(module->name, std::move(module));
    }
    for (const std::string &dir : sources.searchPaths) {
      std::error_code ec;
      if (!fs::is_directory(dir, ec))
        throw Error(fmt::format("{}: error: link search path is not a directory", dir));
      for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
           it.increment(ec))
        if (it->is_regular_file() && it->path().extension() == ".mlir") {
          std::string symbol = moduleSymbolOf(it->path().string());
          if (!symbol.empty())
            candidates_[symbol].push_back(it->path().string());
        }
    }
  }

  void run() {
    // Resolve the main module's declarations; definitions are appended as they are imported.
    for (size_t i = 0; i < main_.functions.size(); ++i)
      if (main_.functions[i]->isDeclaration())
        resolve(*main_.functions[i]);
    std::erase_if(main_.functions,
                  [](const std::unique_ptr<FuncOp> &f) { return f->isDeclaration(); });
  }

private:
  // The definition `fn` declares, imported into the main module under its qualified name.
  void resolve(const FuncOp &decl) {
    const std::string &name = decl.name;
    size_t dot = name.find('.');
    if (dot == std::string::npos)
      fail(decl.loc, fmt::format("unresolved external function '@{}': an external declaration "
                                 "names its module, as '@module.{}'",
                                 name, name));
    if (imported_.count(name))
      return;
    std::string moduleName = name.substr(0, dot), fnName = name.substr(dot + 1);
    const ModuleOp *module = findModule(moduleName, decl);
    const FuncOp *def = module->lookup(fnName);
    if (!def || def->isDeclaration() || !def->isPublic)
      fail(decl.loc, fmt::format("unresolved external function '@{}': module @{} ({}) has no "
                                 "public function '@{}'",
                                 name, moduleName, module->loc.str(), fnName));
    checkSignature(decl, *def);
    importFunction(*module, *def, name);
  }

  void importFunction(const ModuleOp &module, const FuncOp &def, const std::string &qualified) {
    imported_.insert(qualified);
    auto copy = cloneFunction(def);
    copy->name = qualified;
    copy->isPublic = false;
    FuncOp *added = copy.get();
    main_.functions.push_back(std::move(copy));
    // What the imported body calls: helpers of its own module, or its module's declarations.
    walk(*added->body, [&](Op &op) {
      if (op.kind != OpKind::Call)
        return;
      std::string target = callee(op);
      const FuncOp *local = module.lookup(target);
      if (!local)
        fail(op.loc, fmt::format("call to undefined function '@{}'", target));
      if (local->isDeclaration()) {
        resolve(*local);
        return;
      }
      std::string qualifiedTarget = module.name + "." + target;
      op.attrs["callee"] = Attribute{qualifiedTarget};
      if (!imported_.count(qualifiedTarget))
        importFunction(module, *local, qualifiedTarget);
    });
  }

  void checkSignature(const FuncOp &decl, const FuncOp &def) {
    if (decl.argTypes == def.argTypes && decl.resultTypes == def.resultTypes)
      return;
    auto signature = [](const FuncOp &f) {
      std::vector<std::string> args, results;
      for (const Type &t : f.argTypes)
        args.push_back(t.str());
      for (const Type &t : f.resultTypes)
        results.push_back(t.str());
      return fmt::format("({}) -> ({})", fmt::join(args, ", "), fmt::join(results, ", "));
    };
    fail(decl.loc, fmt::format("declaration of '@{}' does not match its definition: declared "
                               "{} here, defined {} at {}",
                               decl.name, signature(decl), signature(def), def.loc.str()));
  }

  const ModuleOp *findModule(const std::string &symbol, const FuncOp &decl) {
    // A linked module may call back into the one being linked.
    if (!main_.name.empty() && symbol == main_.name)
      return &main_;
    if (auto it = explicit_.find(symbol); it != explicit_.end())
      return it->second.get();
    if (auto it = parsed_.find(symbol); it != parsed_.end())
      return it->second.get();
    auto it = candidates_.find(symbol);
    if (it == candidates_.end())
      fail(decl.loc, fmt::format("unresolved external function '@{}': no module @{} in the linked "
                                 "files or the search path",
                                 decl.name, symbol));
    if (it->second.size() > 1)
      fail(decl.loc, fmt::format("module @{} is defined twice on the search path: {} and {}",
                                 symbol, it->second[0], it->second[1]));
    auto module = parseFile(it->second[0]);
    const ModuleOp *raw = module.get();
    parsed_.emplace(symbol, std::move(module));
    return raw;
  }

  ModuleOp &main_;
  std::map<std::string, std::unique_ptr<ModuleOp>> explicit_, parsed_;
  std::map<std::string, std::vector<std::string>> candidates_;
  std::set<std::string> imported_;
};

} // namespace

void linkModule(ModuleOp &main, const LinkSources &sources) {
  bool needed = false;
  for (auto &f : main.functions)
    needed |= f->isDeclaration();
  // Sources given explicitly are checked even when nothing needs them: a missing or broken
  // --link file must not pass silently.
  if (!needed && sources.files.empty()) {
    for (const std::string &dir : sources.searchPaths) {
      std::error_code ec;
      if (!fs::is_directory(dir, ec))
        throw Error(fmt::format("{}: error: link search path is not a directory", dir));
    }
    return;
  }
  Linker(main, sources).run();
}

} // namespace frank
