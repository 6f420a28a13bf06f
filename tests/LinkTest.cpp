// Linking with iree-link semantics: resolution by module symbol, transitive imports, signature
// checks, and the errors for missing, mismatched and duplicate definitions.
#include "TestSupport.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace frank::test {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing::ThrowsMessage;

// A scratch directory of .mlir files for one test.
class LinkTest : public testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("link_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "lib");
  }
  std::string write(const std::string &name, const std::string &text) {
    fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::string lib() const { return (dir_ / "lib").string(); }
  fs::path dir_;
};

const char *kLibA = R"(
module @lib_a {
  util.func private @times(%x: f32, %k: f32) -> f32 {
    %y = arith.mulf %x, %k : f32
    util.return %y : f32
  }
  util.func public @scale(%t: tensor<?xf32>, %k: f32) -> tensor<?xf32> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %t, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xf32>
    %k2 = util.call @times(%k, %k) : (f32, f32) -> f32
    %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
        ins(%t : tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%a: f32, %o: f32):
      %d = arith.mulf %a, %k2 : f32
      linalg.yield %d : f32
    } -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
  util.func public @never_called(%t: tensor<?xf32>) -> tensor<?xf32> {
    util.return %t : tensor<?xf32>
  }
}
)";

// lib_b calls lib_a twice: k^2 * k^2.
const char *kLibB = R"(
module @lib_b {
  util.func private @lib_a.scale(tensor<?xf32>, f32) -> tensor<?xf32>
  util.func public @scale_twice(%t: tensor<?xf32>, %k: f32) -> tensor<?xf32> {
    %a = util.call @lib_a.scale(%t, %k) : (tensor<?xf32>, f32) -> tensor<?xf32>
    %b = util.call @lib_a.scale(%a, %k) : (tensor<?xf32>, f32) -> tensor<?xf32>
    util.return %b : tensor<?xf32>
  }
}
)";

const char *kMain = R"(
module @app {
  util.func private @lib_b.scale_twice(tensor<?xf32>, f32) -> tensor<?xf32>
  util.func public @main(%t: tensor<?xf32>, %k: f32) -> tensor<?xf32> {
    %r = util.call @lib_b.scale_twice(%t, %k) : (tensor<?xf32>, f32) -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
}
)";

std::vector<float> runMain(Module &m, Mode mode) {
  std::vector<float> x{1, 2, 3};
  Tensor y =
      m.function("main")({Tensor::borrow(x.data(), DType::F32, {3}), Scalar::f32(2)}, mode)[0];
  return {y.as<float>(), y.as<float>() + 3};
}

TEST_F(LinkTest, ThreeLevelChainThroughFilesAndSearchPath) {
  write("lib/a.mlir", kLibA); // found by its module symbol, not its file name
  std::string b = write("b.mlir", kLibB);
  std::string main = write("main.mlir", kMain);
  Context ctx;
  Module m = ctx.load(main, {{b}, {lib()}});
  for (Mode mode : {Mode::Specialized, Mode::Generic})
    EXPECT_EQ(runMain(m, mode), (std::vector<float>{16, 32, 48}));
  std::string text = m.print();
  EXPECT_THAT(text, HasSubstr("util.func private @lib_b.scale_twice("));
  EXPECT_THAT(text, HasSubstr("util.func private @lib_a.scale("));
  EXPECT_THAT(text, HasSubstr("util.func private @lib_a.times(")) << "private helpers come along";
  EXPECT_THAT(text, HasSubstr("util.call @lib_a.times(")) << "and calls to them are qualified";
  EXPECT_THAT(text, testing::Not(HasSubstr("never_called"))) << "only reachable functions";
  // The linked module is self-contained: it loads and runs with no sources at all.
  Module again = ctx.loadString(text, "linked.mlir", {{}, {}, false});
  EXPECT_EQ(runMain(again, Mode::Specialized), (std::vector<float>{16, 32, 48}));
}

// A module whose symbol is quoted (`module @"lib mod"`) is found on the search path too: the
// scan for module symbols read only plain identifiers.
TEST_F(LinkTest, QuotedModuleSymbolsAreFoundOnTheSearchPath) {
  write("lib/q.mlir", R"(module @"lib mod" {
  util.func public @"double it"(%x: f32) -> f32 {
    %y = arith.addf %x, %x : f32
    util.return %y : f32
  }
})");
  std::string main = write("main.mlir", R"(module @app {
  util.func private @"lib mod.double it"(f32) -> f32
  util.func public @main(%x: f32) -> f32 {
    %y = util.call @"lib mod.double it"(%x) : (f32) -> f32
    util.return %y : f32
  }
})");
  Context ctx;
  Module m = ctx.load(main, {{}, {lib()}});
  EXPECT_EQ(m.function("main")({Scalar::f32(1.5f)})[0].as<float>()[0], 3.0f);
}

TEST_F(LinkTest, MissingModuleIsReportedAtTheDeclaration) {
  std::string main = write("main.mlir", kMain);
  Context ctx;
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{}, {lib()}, false});
      },
      ThrowsMessage<Error>(
          HasSubstr("main.mlir:3:21: error: unresolved external function '@lib_b.scale_twice': no "
                    "module @lib_b in the linked files or the search path")));
}

// A linked module may call back into the module being linked (it used to look for @app among
// the other files and report it missing); a cycle of calls is reported as recursion.
TEST_F(LinkTest, ALinkedModuleMayCallBackIntoTheMainOne) {
  std::string lib = write("lib.mlir", R"(module @lib {
  util.func private @app.square(tensor<?xf32>) -> tensor<?xf32>
  util.func public @square_twice(%t: tensor<?xf32>) -> tensor<?xf32> {
    %a = util.call @app.square(%t) : (tensor<?xf32>) -> tensor<?xf32>
    %b = util.call @app.square(%a) : (tensor<?xf32>) -> tensor<?xf32>
    util.return %b : tensor<?xf32>
  }
})");
  std::string main = write("main.mlir", R"(module @app {
  util.func private @lib.square_twice(tensor<?xf32>) -> tensor<?xf32>
  util.func public @square(%t: tensor<?xf32>) -> tensor<?xf32> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %t, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xf32>
    %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
        ins(%t : tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%a: f32, %o: f32):
      %d = arith.mulf %a, %a : f32
      linalg.yield %d : f32
    } -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
  util.func public @main(%t: tensor<?xf32>) -> tensor<?xf32> {
    %r = util.call @lib.square_twice(%t) : (tensor<?xf32>) -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
})");
  Context ctx;
  Module m = ctx.load(main, {{lib}, {}, false});
  std::vector<float> x{1, 2, 3};
  Tensor y = m.function("main")({Tensor::borrow(x.data(), DType::F32, {3})})[0];
  EXPECT_EQ(std::vector<float>(y.as<float>(), y.as<float>() + 3), (std::vector<float>{1, 16, 81}));

  std::string cycle = write("cycle.mlir", R"(module @lib {
  util.func private @app.main(tensor<?xf32>) -> tensor<?xf32>
  util.func public @square_twice(%t: tensor<?xf32>) -> tensor<?xf32> {
    %a = util.call @app.main(%t) : (tensor<?xf32>) -> tensor<?xf32>
    util.return %a : tensor<?xf32>
  }
})");
  // Reported as the module loads (frank-jit link printed it), at the call that closes it.
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{cycle}, {}, false});
      },
      ThrowsMessage<Error>(HasSubstr(
          "main.mlir:16:5: error: recursive call to '@lib.square_twice' is not supported")));
}

// Calls are checked across the linked module as it loads: one to a library function with the
// wrong arguments is an error even where nothing calls the function holding it (frank-jit link
// printed such a module).
TEST_F(LinkTest, CallsAreCheckedWhenTheModuleLoads) {
  std::string main = write("bad_call.mlir", R"(module @app {
  util.func private @activation_components.swiglu(tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  util.func public @unused(%a: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
    %r = util.call @activation_components.swiglu(%a) : (tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    util.return %r : tensor<?x?x?xf32>
  }
  util.func public @fine(%a: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
    util.return %a : tensor<?x?x?xf32>
  }
})");
  Context ctx;
  EXPECT_THAT([&] { ctx.load(main); },
              ThrowsMessage<Error>(HasSubstr(
                  "bad_call.mlir:4:5: error: call to '@activation_components.swiglu' passes 1 "
                  "arguments but it takes 2")));
}

TEST_F(LinkTest, MissingFunctionNamesTheModule) {
  write("lib/b.mlir", R"(module @lib_b {
  util.func public @other(%t: tensor<?xf32>) -> tensor<?xf32> {
    util.return %t : tensor<?xf32>
  }
})");
  std::string main = write("main.mlir", kMain);
  Context ctx;
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{}, {lib()}, false});
      },
      ThrowsMessage<Error>(testing::AllOf(
          HasSubstr("unresolved external function '@lib_b.scale_twice': module @lib_b"),
          HasSubstr("has no public function '@scale_twice'"))));
}

TEST_F(LinkTest, SignatureMismatchCitesBothSides) {
  write("lib/b.mlir", kLibB);
  write("lib/a.mlir", kLibA);
  std::string main = write("main.mlir", R"(
module @app {
  util.func private @lib_b.scale_twice(tensor<4xf32>, f32) -> tensor<?xf32>
  util.func public @main(%t: tensor<4xf32>, %k: f32) -> tensor<?xf32> {
    %r = util.call @lib_b.scale_twice(%t, %k) : (tensor<4xf32>, f32) -> tensor<?xf32>
    util.return %r : tensor<?xf32>
  }
})");
  Context ctx;
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{}, {lib()}, false});
      },
      ThrowsMessage<Error>(testing::AllOf(
          HasSubstr("main.mlir:3:21: error: declaration of '@lib_b.scale_twice' does not "
                    "match its definition: declared (tensor<4xf32>, f32) -> (tensor<?xf32>) "
                    "here, defined (tensor<?xf32>, f32) -> (tensor<?xf32>) at "),
          HasSubstr("b.mlir:4:"))));
}

TEST_F(LinkTest, DuplicateModuleSymbols) {
  std::string a1 = write("a1.mlir", kLibA), a2 = write("a2.mlir", kLibA);
  std::string main = write("main.mlir", kMain);
  Context ctx;
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{a1, a2}, {}, false});
      },
      ThrowsMessage<Error>(HasSubstr("error: module @lib_a is defined twice")));
  write("lib/a.mlir", kLibA);
  write("lib/a_copy.mlir", kLibA);
  write("lib/b.mlir", kLibB);
  EXPECT_THAT(
      [&] {
        ctx.load(main, {{}, {lib()}, false});
      },
      ThrowsMessage<Error>(HasSubstr("module @lib_a is defined twice on the search path")));
}

TEST_F(LinkTest, ComponentLibraryIsAlwaysOnThePath) {
  std::string main = write("main.mlir", R"(
module @uses_library {
  util.func private @activation_components.swiglu(tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  util.func public @main(%g: tensor<?x?x?xf32>, %u: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
    %r = util.call @activation_components.swiglu(%g, %u) : (tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    util.return %r : tensor<?x?x?xf32>
  }
})");
  Context ctx;
  std::vector<float> g{2}, u{0};
  Tensor y = ctx.load(main).function("main")({Tensor::borrow(g.data(), DType::F32, {1, 1, 1}),
                                              Tensor::borrow(u.data(), DType::F32, {1, 1, 1})})[0];
  EXPECT_EQ(y.as<float>()[0], 0.f); // 2 * silu(0)
}

TEST_F(LinkTest, UndottedDeclarationIsUnresolved) {
  std::string main = write("main.mlir", R"(
module @app {
  util.func private @helper(tensor<?xf32>) -> tensor<?xf32>
})");
  Context ctx;
  EXPECT_THAT([&] { ctx.load(main); },
              ThrowsMessage<Error>(HasSubstr("main.mlir:3:21: error: unresolved external function "
                                             "'@helper'")));
}

TEST_F(LinkTest, CommandLineLinkWritesAModuleThatRuns) {
  write("lib/a.mlir", kLibA);
  std::string b = write("b.mlir", kLibB);
  std::string main = write("main.mlir", kMain);
  std::string out = (dir_ / "linked.mlir").string();
  std::string link = fmt::format("{} link {} --link={} --link-path={} -o {}", FRANK_JIT_BINARY,
                                 main, b, lib(), out);
  ASSERT_EQ(std::system(link.c_str()), 0) << link;
  std::string run = fmt::format("{} run {} --function=main --input=3xf32=1,2,3 --input=f32=2 > {}",
                                FRANK_JIT_BINARY, out, (dir_ / "result.txt").string());
  ASSERT_EQ(std::system(run.c_str()), 0) << run;
  std::ifstream result(dir_ / "result.txt");
  std::string line;
  std::getline(result, line);
  EXPECT_EQ(line, "result[0]: 3xf32=[16 32 48]");
}

} // namespace
} // namespace frank::test
