// Cold code (codegen/ColdCode.h): which functions of a kernel codegen marks cold by their
// estimated work, how inlining a function that is not cold makes its caller not cold either,
// and that the marked ones reach the code generator as `optnone` and the rest do not. Also the
// kernel pass pipeline's one choice a benchmark found missing: a copy whose row index is checked
// still vectorizes.
#include "codegen/ColdCode.h"
#include "TestSupport.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <map>
#include <regex>
#include <set>
#include <string>

namespace frank::test {
namespace {

// The functions an LLVM IR text defines, by whether their attributes hold `attribute`.
std::map<std::string, bool> functionsWith(const std::string &ir, const std::string &attribute) {
  std::set<std::string> groups;
  const auto lines = std::regex::ECMAScript | std::regex::multiline;
  const std::regex group(R"(^attributes #(\d+) = \{([^\n]*)\})", lines);
  for (auto it = std::sregex_iterator(ir.begin(), ir.end(), group); it != std::sregex_iterator();
       ++it)
    if ((*it)[2].str().find(attribute) != std::string::npos)
      groups.insert((*it)[1].str());
  std::map<std::string, bool> functions;
  const std::regex define(R"(^define [^@\n]*@([\w.]+)\([^\n]*\) #(\d+) \{)", lines);
  for (auto it = std::sregex_iterator(ir.begin(), ir.end(), define); it != std::sregex_iterator();
       ++it)
    functions[(*it)[1].str()] = groups.count((*it)[2].str()) > 0;
  return functions;
}

// The AVX-512 kernel, on any host.
std::string moeBlock(Stage stage, int tokens) {
  return avx512Context()
      .load(componentPath("moe/moe_ffn_block.mlir"))
      .function("moe_ffn_block")
      .emit(stage,
            {fmt::format("{}x1024xf32", tokens), "8x1024xf32", "3584x1024x8xf32", "3584x1024x8xf32",
             "1024x3584x8xf32", "index=8", "index=2", "index=1024", "index=3584", "i1=1"});
}

// The names of the functions whose name ends with `suffix` and whose coldness is `cold`.
std::set<std::string> named(const std::map<std::string, bool> &functions, const std::string &suffix,
                            bool cold) {
  std::set<std::string> names;
  for (const auto &[name, isCold] : functions)
    if (isCold == cold && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.insert(name);
  return names;
}

// The MoE block at 32 tokens spends nearly all its work in the expert projections' ranks tiles
// (one body that gate and up share, and the down projection's in k blocks). The router,
// softmax, top-k and the other serial nests are cold; the tiles are not.
TEST(ColdCode, TheMoeBlocksRoutingIsColdAndItsProjectionTileIsNot) {
  std::map<std::string, bool> cold = functionsWith(moeBlock(Stage::LLVM, 32), "\"frank-cold\"");
  ASSERT_FALSE(cold.empty());
  EXPECT_EQ(named(cold, ".nest", false), std::set<std::string>{}) << "every serial nest is cold";
  EXPECT_GE(named(cold, ".nest", true).size(), 5u);
  EXPECT_EQ(named(cold, ".body", false),
            (std::set<std::string>{"frank_kernel.m_block_1.body", "frank_kernel.m_part.body"}));
}

// After optimization the cold functions are optnone, for the code generator's quick path. A
// chunk that inlined the ranks tile is not, and neither is the tile's code.
TEST(ColdCode, OnlyColdFunctionsReachTheCodeGeneratorAsOptnone) {
  const std::string ir = moeBlock(Stage::OptimizedLLVM, 32);
  std::map<std::string, bool> optnone = functionsWith(ir, "optnone");
  ASSERT_FALSE(optnone.empty());
  EXPECT_FALSE(optnone.at("frank_kernel.m_part.chunk"));
  EXPECT_TRUE(optnone.at("frank_kernel"));
  EXPECT_GE(named(optnone, ".chunk", true).size(), 2u) << "swiglu's, the broadcast's";
  // Everything optnone was marked cold before: optnone only ever comes from the marking.
  for (const auto &[name, isOptnone] : functionsWith(ir, "\"frank-cold\""))
    EXPECT_EQ(optnone.at(name), isOptnone) << name;
}

// With 16 registers mul_mat_id at 32 tokens takes its ranks by choice, in k blocks of each
// tile: in every k block, the two rank blocks by choice and then the permuted ranks of the
// pairs past them, whose count is known only at run time. That loop is bounded by the ranks
// every pair would take, so that the estimate does not count it as a runtime loop of many
// trips: the tiles by choice, which do most of the work, would then be the lightest functions
// and compile as optnone (without fused multiply-adds; S9 at 32 tokens took 13.5-15.5 ms
// against 7.8). The rows left over (3584 = 3 x 1194 + 2) take no tiles of their own: the last
// tile runs past the rows (LowerToLoops' tileRowsToRead).
TEST(ColdCode, TheTilesByChoiceAreNotColdBesideTheirPermutedRanks) {
  static Context avx2(forCpu(kAvx2Cpu));
  Function fn = avx2.load(componentPath("moe/mul_mat_id.mlir")).function("mul_mat_id");
  const std::vector<std::string> types = {"3584x1024x8xf32", "1024x2x32xf32", "2x32xi32"};
  EXPECT_THAT(fn.emit(Stage::Loops, types),
              testing::HasSubstr("for rank_block in 0..minsi(permuted_vectors, 8) {"));
  std::map<std::string, bool> cold = functionsWith(fn.emit(Stage::LLVM, types), "\"frank-cold\"");
  // The tiles by choice and the permuted ones, and no other.
  ASSERT_EQ(cold.count("frank_kernel.rank_block.nest.1"), 1u);
  EXPECT_EQ(cold.count("frank_kernel.rank_block.nest.2"), 0u);
  EXPECT_FALSE(cold.at("frank_kernel.rank_block.nest"));
  EXPECT_FALSE(cold.at("frank_kernel.rank_block.nest.1"));
}

// A kernel whose work is one nest keeps that nest, and what inlines it, hot.
TEST(ColdCode, AKernelThatIsOneNestIsNotCold) {
  const std::string ir = context()
                             .load(componentPath("normalization/rms_norm.mlir"))
                             .function("rms_norm_linalg")
                             .emit(Stage::OptimizedLLVM, {"1x4096xf32", "4096xf32", "f32"});
  std::map<std::string, bool> optnone = functionsWith(ir, "optnone");
  ASSERT_FALSE(optnone.empty());
  for (const auto &[name, isOptnone] : optnone)
    EXPECT_FALSE(isOptnone) << name;
}

// Functions with `work` statements each, for the marking and settling rules.
struct Kernel {
  llvm::LLVMContext context;
  llvm::Module module{"kernel", context};
  std::map<llvm::Function *, double> work;

  llvm::Function *function(const std::string &name, double statements) {
    auto *f = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(context), false),
                                     llvm::Function::InternalLinkage, name, module);
    llvm::IRBuilder<>(llvm::BasicBlock::Create(context, "entry", f)).CreateRetVoid();
    work[f] = statements;
    return f;
  }
  // `caller` calls `callee`, which it inlines.
  void inlines(llvm::Function *caller, llvm::Function *callee) {
    callee->addFnAttr(llvm::Attribute::AlwaysInline);
    llvm::IRBuilder<> b(&caller->getEntryBlock(), caller->getEntryBlock().begin());
    b.CreateCall(callee);
  }
};

// The lightest functions are cold while they add up to at most kColdShare of the work.
TEST(ColdCode, TheLightestFunctionsUpToOnePercentOfTheWorkAreCold) {
  Kernel k;
  llvm::Function *empty = k.function("empty", 0), *light = k.function("light", 300),
                 *lighter = k.function("lighter", 200), *heavy = k.function("heavy", 49500);
  markColdFunctions(k.work); // 1% of 50000 is 500: 0 + 200 + 300
  EXPECT_TRUE(isCold(*empty));
  EXPECT_TRUE(isCold(*lighter));
  EXPECT_TRUE(isCold(*light));
  EXPECT_FALSE(isCold(*heavy));

  Kernel more;
  llvm::Function *a = more.function("a", 300), *b = more.function("b", 201),
                 *c = more.function("c", 49499);
  markColdFunctions(more.work); // 201 + 300 is past 500: only b
  EXPECT_TRUE(isCold(*b));
  EXPECT_FALSE(isCold(*a));
  EXPECT_FALSE(isCold(*c));
}

// A function that inlines one that is not cold is not cold, through any depth of inlining; one
// that inlines only cold functions stays cold.
TEST(ColdCode, InliningAFunctionThatIsNotColdMakesTheCallerNotCold) {
  Kernel k;
  llvm::Function *entry = k.function("entry", 0), *chunk = k.function("chunk", 0),
                 *body = k.function("body", 100000), *router = k.function("router", 10),
                 *softmax = k.function("softmax", 10);
  k.inlines(entry, chunk);
  k.inlines(chunk, body);
  k.inlines(router, softmax);
  markColdFunctions(k.work);
  ASSERT_TRUE(isCold(*entry) && isCold(*chunk) && isCold(*router) && isCold(*softmax));
  settleColdFunctions(k.module);
  EXPECT_FALSE(isCold(*chunk));
  EXPECT_FALSE(isCold(*entry));
  EXPECT_TRUE(isCold(*router));
  EXPECT_TRUE(isCold(*softmax));

  compileColdFunctionsQuickly(k.module);
  EXPECT_TRUE(router->hasFnAttribute(llvm::Attribute::OptimizeNone));
  EXPECT_TRUE(router->hasFnAttribute(llvm::Attribute::NoInline));
  EXPECT_FALSE(softmax->hasFnAttribute(llvm::Attribute::AlwaysInline))
      << "optnone and alwaysinline do not go together";
  EXPECT_FALSE(chunk->hasFnAttribute(llvm::Attribute::OptimizeNone));
}

// The embedding lookup checks each row's id inside the copy of the row. The check does not
// change along the row, so the pipeline moves it out (trivial unswitching) and the copy
// vectorizes; without that it stayed scalar and S3 took 75 us instead of 12.
TEST(KernelPasses, ACopyWhoseRowIndexIsCheckedVectorizes) {
  const std::string ir = context()
                             .load(componentPath("embedding/embedding_lookup.mlir"))
                             .function("embedding_lookup")
                             .emit(Stage::OptimizedLLVM, {"64x2048xf32", "1x8xi64"});
  EXPECT_TRUE(std::regex_search(ir, std::regex("load <" + floatVectorWidths() + " x float>")))
      << ir;
}

} // namespace
} // namespace frank::test
