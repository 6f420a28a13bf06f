// Splitting a kernel's module into parts that compile on threads of their own: every function
// defined exactly once, each loop body beside the chunk that inlines it, and what one part
// refers to in another made a symbol the linker can resolve.
#include "codegen/SplitKernel.h"
#include "TestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <map>
#include <set>
#include <string>

namespace frank::test {
namespace {

std::unique_ptr<llvm::Module> parseIr(const std::string &text, llvm::LLVMContext &ir) {
  llvm::SMDiagnostic error;
  auto module = llvm::parseAssemblyString(text, error, ir);
  if (!module) {
    std::string message;
    llvm::raw_string_ostream os(message);
    error.print("kernel", os);
    ADD_FAILURE() << message;
  }
  return module;
}

// moe_ffn_block at 32 tokens: the entry, and parallel loops for the routing, the three expert
// projections' tiles, swiglu and the read-backs, each a chunk that inlines its body.
std::string moeBlockIr() {
  return context()
      .load(componentPath("moe/moe_ffn_block.mlir"))
      .function("moe_ffn_block")
      .emit(Stage::LLVM, {"32x32xf32", "8x32xf32", "64x32x8xf32", "64x32x8xf32", "32x64x8xf32",
                          "index=8", "index=2", "index=32", "index=64", "i1=1"});
}

std::set<std::string> definedFunctions(const llvm::Module &m) {
  std::set<std::string> names;
  for (const llvm::Function &f : m)
    if (!f.isDeclaration())
      names.insert(f.getName().str());
  return names;
}

TEST(SplitKernel, PartsDefineEachFunctionOnceWithBodiesBesideTheirChunks) {
  llvm::LLVMContext ir;
  auto module = parseIr(moeBlockIr(), ir);
  ASSERT_TRUE(module);
  const std::set<std::string> original = definedFunctions(*module);
  for (unsigned maxParts : {2u, 4u}) {
    auto copy = parseIr(moeBlockIr(), ir);
    KernelParts parts = splitKernel(*copy, maxParts, 100);
    ASSERT_GE(parts.size(), 2u);
    ASSERT_LE(parts.size(), maxParts);
    std::map<std::string, size_t> partOf;
    std::vector<std::unique_ptr<llvm::Module>> modules;
    for (size_t i = 0; i < parts.size(); ++i) {
      std::unique_ptr<llvm::Module> part = readPart(parts, i, ir);
      std::string problems;
      llvm::raw_string_ostream os(problems);
      EXPECT_FALSE(llvm::verifyModule(*part, &os)) << problems;
      for (const std::string &name : definedFunctions(*part))
        EXPECT_TRUE(partOf.emplace(name, i).second) << name << " is defined twice";
      modules.push_back(std::move(part));
    }
    std::set<std::string> defined;
    for (const auto &[name, part] : partOf)
      defined.insert(name);
    EXPECT_EQ(defined, original) << "maxParts " << maxParts;
    for (const auto &[name, part] : partOf)
      if (name.ends_with(".body") && name != "frank_kernel.body") {
        std::string chunk = name.substr(0, name.size() - 5) + ".chunk";
        EXPECT_EQ(partOf.at(chunk), part) << name;
      }
    EXPECT_EQ(partOf.at("frank_kernel"), partOf.at("frank_kernel.body"));
    // A function that a part uses but does not define is an external symbol there, and hidden
    // where it is defined (the kernel's own entry stays visible).
    int crossPart = 0;
    for (const auto &m : modules)
      for (const llvm::Function &f : *m) {
        if (!f.isDeclaration() || f.use_empty() || !partOf.count(f.getName().str()))
          continue;
        ++crossPart;
        EXPECT_TRUE(f.hasExternalLinkage()) << f.getName().str();
        const llvm::Function *definition =
            modules[partOf.at(f.getName().str())]->getFunction(f.getName());
        EXPECT_TRUE(definition->hasExternalLinkage()) << f.getName().str();
        if (f.getName() != "frank_kernel") {
          EXPECT_TRUE(definition->hasHiddenVisibility()) << f.getName().str();
        }
      }
    // The entry passes the loops' chunks to the runtime by address; some are in other parts.
    EXPECT_GE(crossPart, 1);
  }
}

// Heavier parts come first (the threads take them in order), and no part falls below the
// minimum: with a minimum near a third of the kernel, at most three parts.
TEST(SplitKernel, HeaviestFirstAndNoPartBelowTheMinimum) {
  llvm::LLVMContext ir;
  auto module = parseIr(moeBlockIr(), ir);
  ASSERT_TRUE(module);
  size_t total = compileCost(*module);
  EXPECT_GT(total, module->getInstructionCount()); // the scalar loops count several times
  KernelParts parts = splitKernel(*module, 8, total / 3);
  ASSERT_GE(parts.size(), 2u);
  EXPECT_LE(parts.size(), 3u);
  std::vector<size_t> sizes;
  for (size_t i = 0; i < parts.size(); ++i) {
    sizes.push_back(compileCost(*readPart(parts, i, ir)));
    EXPECT_GE(sizes.back(), total / 3);
  }
  EXPECT_TRUE(std::is_sorted(sizes.rbegin(), sizes.rend())) << testing::PrintToString(sizes);
}

// A part read back defines the functions its list names and no other: the bitcode holds the
// whole kernel, and each part reads only its own bodies. A kernel left whole has no parts.
TEST(SplitKernel, APartReadBackDefinesTheFunctionsItsListNames) {
  llvm::LLVMContext ir;
  auto module = parseIr(moeBlockIr(), ir);
  ASSERT_TRUE(module);
  const KernelParts parts = splitKernel(*module, 4, 100);
  ASSERT_GE(parts.size(), 2u);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::set<std::string> listed(parts.functions[i].begin(), parts.functions[i].end());
    EXPECT_EQ(definedFunctions(*readPart(parts, i, ir)), listed) << "part " << i;
  }

  auto whole = parseIr(moeBlockIr(), ir);
  ASSERT_TRUE(whole);
  const KernelParts none = splitKernel(*whole, 1, 100);
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none.bitcode.empty());
}

TEST(SplitKernel, SmallKernelsAndOneThreadStayWhole) {
  llvm::LLVMContext ir;
  auto rmsNorm = parseIr(context()
                             .load(componentPath("normalization/rms_norm.mlir"))
                             .function("rms_norm_fused")
                             .emit(Stage::LLVM, {"32x4096xf32", "4096xf32", "f32"}),
                         ir);
  ASSERT_TRUE(rmsNorm);
  EXPECT_TRUE(splitKernel(*rmsNorm, 2, 400).empty());
  auto moeBlock = parseIr(moeBlockIr(), ir);
  ASSERT_TRUE(moeBlock);
  EXPECT_TRUE(splitKernel(*moeBlock, 1, 100).empty());
  // Nothing changed in a kernel left whole: its loop bodies stay internal.
  for (const llvm::Function &f : *moeBlock) {
    if (!f.isDeclaration() && f.getName() != "frank_kernel") {
      EXPECT_TRUE(f.hasLocalLinkage()) << f.getName().str();
    }
  }
}

// Attention at 128 queries and keys: its two products and its softmax are nests outlined from the
// heads' loop, each called once. Where a nest stays with its caller, in a kernel left whole or
// in its caller's part, it becomes always-inline: optimized once, after inlining, as if it had
// never been outlined. A loop's chunk, whose address the entry passes on, does not.
TEST(SplitKernel, NestsInlineWhereTheyStayWithTheirCaller) {
  llvm::LLVMContext ir;
  auto attention = [&] {
    return parseIr(context()
                       .load(componentPath("attention/attention_gqa.mlir"))
                       .function("attention_gqa")
                       .emit(Stage::LLVM, {"1x128x8x128xf32", "1x128x2x128xf32",
                                           "1x128x2x128xf32", "f32"}),
                   ir);
  };
  auto nestsOf = [](const llvm::Module &m) {
    std::vector<const llvm::Function *> nests;
    for (const llvm::Function &f : m)
      if (!f.isDeclaration() && f.getName().ends_with(".nest"))
        nests.push_back(&f);
    return nests;
  };
  auto whole = attention();
  ASSERT_TRUE(whole);
  ASSERT_GE(nestsOf(*whole).size(), 3u);
  for (const llvm::Function *nest : nestsOf(*whole)) {
    EXPECT_EQ(nest->getNumUses(), 1u) << nest->getName().str();
    EXPECT_FALSE(nest->hasFnAttribute(llvm::Attribute::AlwaysInline)) << nest->getName().str();
  }
  inlineLocalNests(*whole);
  for (const llvm::Function *nest : nestsOf(*whole))
    EXPECT_TRUE(nest->hasFnAttribute(llvm::Attribute::AlwaysInline)) << nest->getName().str();
  for (const llvm::Function &f : *whole)
    if (f.getName().ends_with(".chunk")) {
      EXPECT_FALSE(f.hasFnAttribute(llvm::Attribute::AlwaysInline)) << f.getName().str();
    }

  auto split = attention();
  KernelParts parts = splitKernel(*split, 8, 100);
  ASSERT_GE(parts.size(), 3u);
  int apart = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::unique_ptr<llvm::Module> part = readPart(parts, i, ir);
    for (const llvm::Function *nest : nestsOf(*part)) {
      const bool withCaller = nest->hasLocalLinkage();
      apart += !withCaller;
      EXPECT_EQ(nest->hasFnAttribute(llvm::Attribute::AlwaysInline), withCaller)
          << nest->getName().str();
    }
  }
  EXPECT_GE(apart, 2); // the products at least go to parts of their own
}

} // namespace
} // namespace frank::test
