// Tests for the MLIR front end: the exact location and wording of parser and verifier
// diagnostics, and print / re-parse round trips of the components and of inline snippets.
#include "parse/Parser.h"
#include "Isolation.h"
#include "TestSupport.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

namespace {

// MLIR-SUBSET.md promises "never a crash": each case runs in a forked child (Isolation.h), so a
// crash fails that case, not the whole binary.
using frank::test::Outcome;
using frank::test::runIsolated;
using frank::test::splitLines;

// ---- Diagnostics --------------------------------------------------------------------------

struct DiagCase {
  const char *name;    // a test name: [A-Za-z0-9_]
  const char *text;    // parsed as "t.mlir", then verified if it parses
  const char *where;   // the expected "line:col"
  const char *message; // the first line of the diagnostic, after "error: "
};

std::ostream &operator<<(std::ostream &os, const DiagCase &c) { return os << c.name; }

/// Parses and verifies `c.text` and checks the three-line diagnostic: the location prefix,
/// the message, the offending source line and a caret under the column.
void expectDiagnostic(const DiagCase &c) {
  Outcome out = runIsolated([&] {
    auto module = frank::parseString(c.text, "t.mlir");
    frank::verifyModule(*module);
    return std::string();
  });
  ASSERT_NE(out.kind, Outcome::Crashed) << "the front end crashed (" << out.text << ")";
  ASSERT_NE(out.kind, Outcome::Internal) << "a user error reported as a bug: " << out.text;
  ASSERT_NE(out.kind, Outcome::OtherException)
      << "threw an exception that is not a located frank::Error: " << out.text;
  ASSERT_EQ(out.kind, Outcome::Threw) << "accepted without any error";

  unsigned line = 0, col = 0;
  ASSERT_EQ(std::sscanf(c.where, "%u:%u", &line, &col), 2) << "bad 'where' in the table";
  std::vector<std::string> lines = splitLines(out.text);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], fmt::format("t.mlir:{}: error: {}", c.where, c.message))
      << "full diagnostic:\n"
      << out.text;

  std::vector<std::string> source = splitLines(c.text);
  std::string sourceLine = line >= 1 && line <= source.size() ? source[line - 1] : "";
  if (sourceLine.empty()) {
    // The formatter prints no context for an empty line (e.g. end of file after a newline).
    EXPECT_EQ(lines.size(), 1u) << out.text;
    return;
  }
  ASSERT_EQ(lines.size(), 3u) << "expected message, source line and caret:\n" << out.text;
  EXPECT_EQ(lines[1], sourceLine);
  EXPECT_EQ(lines[2], std::string(col - 1, ' ') + "^");
}

// A sum over the dims given of a 3x4 input into 3 elements.
#define REDUCE_OVER(dims)                                                                          \
  "util.func @f(%x: tensor<3x4xf32>, %i: tensor<3xf32>) -> tensor<3xf32> {\n"                      \
  "  %r = linalg.reduce ins(%x : tensor<3x4xf32>) outs(%i : tensor<3xf32>) dimensions = [" dims     \
  "]\n"                                                                                             \
  "    (%a: f32, %b: f32) {\n"                                                                     \
  "      %s = arith.addf %a, %b : f32\n"                                                           \
  "      linalg.yield %s : f32\n"                                                                  \
  "    }\n"                                                                                        \
  "  util.return %r : tensor<3xf32>\n"                                                             \
  "}\n"

// A one-dim elementwise generic, used by many cases below with one line changed. Its lines:
//   1 #id = ...   2 util.func   3 %r = linalg.generic {...}   4 ins(...) outs(...) {
//   5 ^bb0(...):  6 body        7 } -> T                       8 util.return   9 }
#define GENERIC_HEAD                                                                               \
  "#id = affine_map<(d0) -> (d0)>\n"                                                               \
  "util.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
#define GENERIC_ATTRS                                                                              \
  "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\"]}\n"
#define GENERIC_OPERANDS "      ins(%a : tensor<?xf32>) outs(%a : tensor<?xf32>) {\n"
#define GENERIC_BLOCK "  ^bb0(%x: f32, %o: f32):\n"
#define GENERIC_YIELD "    linalg.yield %x : f32\n"
#define GENERIC_TAIL                                                                               \
  "  } -> tensor<?xf32>\n"                                                                         \
  "  util.return %r : tensor<?xf32>\n"                                                             \
  "}\n"

// A two-dim generic over tensor<?x?xf32>, for the verifier's map rules.
#define GENERIC2_HEAD                                                                              \
  "#id2 = affine_map<(d0, d1) -> (d0, d1)>\n"                                                      \
  "util.func @f(%a: tensor<?x?xf32>, %v: tensor<?xf32>) -> tensor<?x?xf32> {\n"
#define GENERIC2_TAIL                                                                              \
  "  ^bb0(%x: f32, %o: f32):\n"                                                                    \
  "    linalg.yield %x : f32\n"                                                                    \
  "  } -> tensor<?x?xf32>\n"                                                                       \
  "  util.return %r : tensor<?x?xf32>\n"                                                           \
  "}\n"

#define MATMUL_HEAD                                                                                \
  "util.func @f(%a: tensor<?x?xf32>) -> tensor<?x?xf32> {\n  %c0 = arith.constant 0 : index\n"
#define MATMUL_TAIL                                                                                \
  "ins(%a, %a : tensor<?x?xf32>, tensor<?x?xf32>) outs(%a : tensor<?x?xf32>) -> tensor<?x?xf32>\n" \
  "  util.return %r : tensor<?x?xf32>\n"                                                           \
  "}\n"

const DiagCase kDiagCases[] = {
    // ---- Lexer: errors at the offending character, before any parsing of it.
    {"lex_unterminated_string",
     "util.func @f() {\n"
     "  %s = \"abc\n"
     "}\n",
     "2:8", "unterminated string"},
    {"lex_unexpected_character",
     "util.func @f() {\n"
     "  %x = arith.constant 1 : i32 ;\n"
     "}\n",
     "2:31", "unexpected character ';'"},
    {"lex_percent_without_name",
     "util.func @f(% a: f32) {\n"
     "  util.return\n"
     "}\n",
     "1:14", "expected an identifier after '%'"},

    // ---- File structure. End of file is reported where the file ends.
    {"eof_in_function_body",
     "util.func @f() {\n"
     "  util.return",
     "2:14", "expected '}' to close the block, found end of file"},
    // After a final newline, end of file is on an empty line: no source line, no caret.
    {"eof_after_final_newline",
     "util.func @f() {\n"
     "  util.return\n",
     "3:1", "expected '}' to close the block, found end of file"},
    {"eof_in_module_body",
     "module {\n"
     "  util.func @f() {\n"
     "    util.return\n"
     "  }",
     "4:4", "expected '}' to close the module body, found end of file"},
    {"nested_module",
     "module {\n"
     "  module {\n"
     "  }\n"
     "}\n",
     "2:3", "unsupported nested module"},
    {"module_after_bare_function",
     "util.func @f() {\n"
     "  util.return\n"
     "}\n"
     "module {\n"
     "}\n",
     "4:1", "a file holds one module, or functions outside any module, not both"},
    {"module_attributes",
     "module @m attributes {x} {\n"
     "}\n",
     "1:11", "unsupported module attributes"},
    {"duplicate_attribute_alias",
     "#m = affine_map<(d0) -> (d0)>\n"
     "#m = affine_map<(d0) -> (d0, d0)>\n",
     "2:1", "redefinition of attribute alias '#m'"},
    {"duplicate_type_alias",
     "!e = f32\n"
     "!e = f64\n",
     "2:1", "redefinition of type alias '!e'"},
    {"multiple_blocks",
     "util.func @f() {\n"
     "^bb1:\n"
     "  util.return\n"
     "}\n",
     "2:1", "unsupported: regions with more than one block"},

    // ---- Types.
    {"unsupported_vector_type",
     "util.func @f(%a: vector<4xf32>) {\n"
     "  util.return\n"
     "}\n",
     "1:18", "unsupported type 'vector'"},
    {"tensor_encoding",
     "util.func @f(%a: tensor<?xf32, #enc>) {\n"
     "  util.return\n"
     "}\n",
     "1:30", "unsupported tensor encoding"},
    {"unranked_tensor",
     "util.func @f(%a: tensor<*xf32>) {\n"
     "  util.return\n"
     "}\n",
     "1:25", "unsupported type: unranked tensors"},
    {"unknown_type_alias",
     "util.func @f(%a: !elem) {\n"
     "  util.return\n"
     "}\n",
     "1:18", "unknown type alias '!elem'"},

    // ---- Affine maps: each unsupported form is reported at its own token.
    {"map_undeclared_dim", "#m = affine_map<(d0) -> (d1)>\n", "1:26",
     "use of undeclared affine map dim 'd1'"},
    {"map_symbols", "#m = affine_map<(d0)[s0] -> (d0)>\n", "1:21",
     "unsupported affine map: symbols"},
    {"map_plus_constant", "#m = affine_map<(d0) -> (d0 + 1)>\n", "1:29",
     "unsupported affine expression: operator '+'"},
    {"map_floordiv", "#m = affine_map<(d0) -> (d0 floordiv 2)>\n", "1:29",
     "unsupported affine expression: operator 'floordiv'"},
    {"map_negative_constant", "#m = affine_map<(d0) -> (-1)>\n", "1:26",
     "unsupported affine expression: negative constants"},
    {"map_dim_declared_twice", "#m = affine_map<(d0, d0) -> (d0)>\n", "1:22",
     "affine map dim 'd0' is declared twice"},
    {"undefined_map_alias",
     GENERIC_HEAD "  %r = linalg.generic {indexing_maps = [#nomap, #id], iterator_types = "
                  "[\"parallel\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:41", "undefined attribute alias '#nomap'"},

    // ---- SSA values and scopes.
    {"undefined_value",
     "util.func @f() -> f32 {\n"
     "  util.return %x : f32\n"
     "}\n",
     "2:15", "use of undefined value '%x'"},
    {"redefinition_of_argument",
     "util.func @f(%a: f32) {\n"
     "  %a = arith.constant 1.0 : f32\n"
     "  util.return\n"
     "}\n",
     "2:3", "redefinition of SSA value '%a'"},
    {"redefinition_in_same_block",
     "util.func @f() {\n"
     "  %c = arith.constant 1 : i32\n"
     "  %c = arith.constant 2 : i32\n"
     "  util.return\n"
     "}\n",
     "3:3", "redefinition of SSA value '%c'"},
    // A region may use outer names but not shadow them (MLIR-SUBSET 1.3).
    {"block_argument_shadows_outer_value",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS "  ^bb0(%a: f32, %o: f32):\n"
                                                 "    linalg.yield %a : f32\n" GENERIC_TAIL,
     "5:8", "redefinition of SSA value '%a'"},
    // Packs: `%r:2` must be used as %r#0 / %r#1.
    {"pack_used_without_index",
     "util.func private @m.g() -> (f32, f32)\n"
     "util.func @f() -> f32 {\n"
     "  %r:2 = util.call @m.g() : () -> (f32, f32)\n"
     "  util.return %r : f32\n"
     "}\n",
     "4:15", "'%r' names 2 results; use '%r#0' to '%r#1'"},
    {"pack_index_out_of_range",
     "util.func private @m.g() -> (f32, f32)\n"
     "util.func @f() -> f32 {\n"
     "  %r:2 = util.call @m.g() : () -> (f32, f32)\n"
     "  util.return %r#5 : f32\n"
     "}\n",
     "4:15", "result number 5 is out of range: '%r' has 2 results"},
    {"hash_index_on_single_value",
     "util.func @f(%x: f32) -> f32 {\n"
     "  util.return %x#0 : f32\n"
     "}\n",
     "2:15", "'%x' is a single value; '#' selects results of a pack"},
    {"too_many_result_names",
     "util.func @f(%x: f32) {\n"
     "  %a, %b = arith.negf %x : f32\n"
     "  util.return\n"
     "}\n",
     "2:3", "'arith.negf' has 1 result but 2 names are given"},
    {"result_name_for_call_without_results",
     "util.func private @m.h()\n"
     "util.func @f() {\n"
     "  %a = util.call @m.h() : () -> ()\n"
     "  util.return\n"
     "}\n",
     "3:3", "'util.call' has 0 results but 1 name is given"},

    // ---- Type annotations must agree with the values' types, reported at the operand.
    {"return_annotation_mismatch",
     "util.func @f(%x: f32) -> f32 {\n"
     "  util.return %x : f64\n"
     "}\n",
     "2:15", "'%x' has type 'f32' but is annotated as 'f64'"},
    {"ins_annotation_mismatch",
     GENERIC_HEAD GENERIC_ATTRS
     "      ins(%a : tensor<?x?xf32>) outs(%a : tensor<?xf32>) {\n" GENERIC_BLOCK GENERIC_YIELD
         GENERIC_TAIL,
     "4:11", "'%a' has type 'tensor<?xf32>' but is annotated as 'tensor<?x?xf32>'"},
    {"binary_operand_type_mismatch",
     "util.func @f(%x: f32, %y: f64) {\n"
     "  %s = arith.addf %x, %y : f32\n"
     "  util.return\n"
     "}\n",
     "2:23", "'%y' has type 'f64' but is used as 'f32'"},
    // The op's type is wrong, so the caret belongs under the type, not under the ':'.
    {"addf_on_integer_type",
     "util.func @f(%i: i32) {\n"
     "  %s = arith.addf %i, %i : i32\n"
     "  util.return\n"
     "}\n",
     "2:28", "'arith.addf' needs a float type, found 'i32'"},
    {"call_argument_count",
     "util.func private @m.g(f32, f32) -> f32\n"
     "util.func @f(%x: f32) -> f32 {\n"
     "  %y = util.call @m.g(%x) : (f32, f32) -> f32\n"
     "  util.return %y : f32\n"
     "}\n",
     "3:18", "call passes 1 argument but its type lists 2"},

    // ---- tensor ops.
    {"tensor_empty_size_count",
     "util.func @f(%n: index) {\n"
     "  %e = tensor.empty(%n) : tensor<?x?xf32>\n"
     "  util.return\n"
     "}\n",
     "2:20", "'tensor.empty' needs one size per '?' in 'tensor<?x?xf32>' (2), found 1"},
    {"tensor_empty_size_not_index",
     "util.func @f(%x: f32) {\n"
     "  %e = tensor.empty(%x) : tensor<?xf32>\n"
     "  util.return\n"
     "}\n",
     "2:21", "'%x' has type 'f32' but is used as 'index'"},
    {"tensor_dim_literal_index",
     "util.func @f(%a: tensor<?xf32>) {\n"
     "  %d = tensor.dim %a, 0 : tensor<?xf32>\n"
     "  util.return\n"
     "}\n",
     "2:23", "'tensor.dim' takes its dim as an SSA index value ('%c0'), not a literal"},

    // ---- linalg.generic syntax.
    {"generic_block_argument_count",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS "  ^bb0(%x: f32):\n" GENERIC_YIELD GENERIC_TAIL,
     "4:56", "'linalg.generic' region needs 2 block arguments (one per operand), found 1"},
    {"generic_block_argument_type",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS
     "  ^bb0(%x: f64, %o: f32):\n" GENERIC_YIELD GENERIC_TAIL,
     "5:8", "block argument #0 has type 'f64' but operand #0 has element type 'f32'"},
    {"generic_missing_indexing_maps",
     GENERIC_HEAD
     "  %r = linalg.generic {iterator_types = [\"parallel\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK
         GENERIC_YIELD GENERIC_TAIL,
     "3:23", "'linalg.generic' needs 'indexing_maps'"},
    {"generic_unknown_iterator_type",
     GENERIC_HEAD "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = "
                  "[\"window\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:70", "unsupported iterator type 'window'"},
    {"generic_unknown_attribute",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\"], doc = "
     "\"x\"}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:83", "unsupported attribute 'doc' on 'linalg.generic'"},
    // The keys a causal mask hides are the compiler's finding, never the author's promise.
    {"generic_visible_keys",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\"], "
     "frank.visible_keys = [0, 0, 1, 0]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD
         GENERIC_TAIL,
     "3:83", "'frank.visible_keys' is derived from an attention's causal mask, not written"},
    // The lowering choices an op may carry are checked where they are written.
    {"generic_config_bad_value",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\"], "
     "frank.config = \"tile=3y2\"}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:98", "frank.config='tile=3y2': tile '3y2' is not MxN with 1 <= M, N <= 16"},
    {"generic_config_twice",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\"], "
     "frank.config = \"pack=0\", frank.config = \"pack=1\"}\n" GENERIC_OPERANDS GENERIC_BLOCK
         GENERIC_YIELD GENERIC_TAIL,
     "3:123", "'frank.config' is set twice"},
    {"matmul_config_unknown_key",
     MATMUL_HEAD "  %r = linalg.matmul {frank.config = \"tiles=4x2\"} " MATMUL_TAIL, "3:38",
     "frank.config='tiles=4x2': unknown key 'tiles' (pipeline, tile, k-block, pack, prefetch, "
     "key-chunks, query-blocks, blocks-outside, n-group, ranks, k-blocks)"},
    {"matmul_unknown_attribute", MATMUL_HEAD "  %r = linalg.matmul {doc = \"x\"} " MATMUL_TAIL,
     "3:23", "unsupported attribute 'doc' on 'linalg.matmul'"},
    {"topk_dimension_out_of_range",
     "util.func @f(%x: tensor<3x3xf32>, %v: tensor<3x3xf32>, %i: tensor<3x3xi32>) -> "
     "tensor<3x3xf32> {\n"
     "  %r:2 = iree_linalg_ext.topk dimension(7) ins(%x : tensor<3x3xf32>) outs(%v, %i : "
     "tensor<3x3xf32>, tensor<3x3xi32>) {\n"
     "  ^bb0(%a: f32, %b: f32):\n"
     "    %c = arith.cmpf ogt, %a, %b : f32\n"
     "    iree_linalg_ext.yield %c : i1\n"
     "  } -> tensor<3x3xf32>, tensor<3x3xi32>\n"
     "  util.return %r#0 : tensor<3x3xf32>\n}\n",
     "2:41", "topk dimension 7 is out of range for 'tensor<3x3xf32>'"},
    // A decimal literal the type cannot hold is an error, not an infinity.
    {"float_literal_out_of_range_f32",
     "util.func @f() -> f32 {\n  %x = arith.constant 1e39 : f32\n  util.return %x : f32\n}\n",
     "2:23", "float literal '1e39' is out of range for 'f32'"},
    {"float_literal_out_of_range_f64",
     "util.func @f() -> f64 {\n  %x = arith.constant -1e999 : f64\n  util.return %x : f64\n}\n",
     "2:24", "float literal '1e999' is out of range for 'f64'"},
    {"float_literal_out_of_range_f16",
     "util.func @f() -> f16 {\n  %x = arith.constant 65520.0 : f16\n  util.return %x : f16\n}\n",
     "2:23", "float literal '65520.0' is out of range for 'f16'"},
    // Attention's score region takes f32 scores whatever the element type (§4.6).
    {"attention_region_of_f16",
     "util.func @f(%q: tensor<1x2x4xf16>, %k: tensor<1x3x4xf16>, %v: tensor<1x3x4xf16>, %s: f32, "
     "%o: tensor<1x2x4xf16>) -> tensor<1x2x4xf16> {\n"
     "  %r = iree_linalg_ext.attention {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, "
     "d1, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3, d4) "
     "-> (d0, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) "
     "-> (d0, d1, d4)>]} ins(%q, %k, %v, %s : tensor<1x2x4xf16>, tensor<1x3x4xf16>, "
     "tensor<1x3x4xf16>, f32) outs(%o : tensor<1x2x4xf16>) {\n"
     "  ^bb0(%t: f16):\n"
     "    iree_linalg_ext.yield %t : f16\n"
     "  } -> tensor<1x2x4xf16>\n"
     "  util.return %r : tensor<1x2x4xf16>\n}\n",
     "3:8",
     "the score region's argument is an f32 score whatever the attention's element type, not "
     "'f16'"},
    // A matmul's explicit maps: three, projections, the output leaving out one dim both read.
    {"matmul_maps_count",
     "util.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> "
     "tensor<2x2xf32> {\n"
     "  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, "
     "affine_map<(d0, d1, d2) -> (d2, d1)>] ins(%a, %b : tensor<2x3xf32>, tensor<3x2xf32>) "
     "outs(%c : tensor<2x2xf32>) -> tensor<2x2xf32>\n"
     "  util.return %r : tensor<2x2xf32>\n}\n",
     "2:22", "'linalg.matmul' takes 3 indexing maps, found 2"},
    {"matmul_maps_two_reductions",
     "util.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2xf32>) -> "
     "tensor<2xf32> {\n"
     "  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, "
     "affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0)>] ins(%a, %b : "
     "tensor<2x3xf32>, tensor<3x2xf32>) outs(%c : tensor<2xf32>) -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n}\n",
     "2:22",
     "unsupported: the output map of 'linalg.matmul' leaves 2 dims out; a matmul reduces "
     "exactly one"},
    {"matmul_maps_rank",
     "util.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> "
     "tensor<2x2xf32> {\n"
     "  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2)>, "
     "affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : "
     "tensor<2x3xf32>, tensor<3x2xf32>) outs(%c : tensor<2x2xf32>) -> tensor<2x2xf32>\n"
     "  util.return %r : tensor<2x2xf32>\n}\n",
     "2:22", "indexing map #0 of 'linalg.matmul' has 1 results for 'tensor<2x3xf32>'"},
    {"matmul_maps_in_braces",
     "util.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> "
     "tensor<2x2xf32> {\n"
     "  %r = linalg.matmul {indexing_maps = []} ins(%a, %b : tensor<2x3xf32>, tensor<3x2xf32>) "
     "outs(%c : tensor<2x2xf32>) -> tensor<2x2xf32>\n"
     "  util.return %r : tensor<2x2xf32>\n}\n",
     "2:23",
     "'linalg.matmul' takes its indexing maps before 'ins', not in braces: linalg.matmul "
     "indexing_maps = [...] ins(...)"},
    // Contractions compute in one element type (matmul casts float operands to its output's,
    // not integers); gather's indices are integers.
    {"matmul_mixed_element_types",
     "util.func @f(%a: tensor<2x3xi32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> "
     "tensor<2x2xf32> {\n"
     "  %r = linalg.matmul ins(%a, %b : tensor<2x3xi32>, tensor<3x2xf32>) outs(%c : "
     "tensor<2x2xf32>) -> tensor<2x2xf32>\n"
     "  util.return %r : tensor<2x2xf32>\n}\n",
     "2:8",
     "'linalg.matmul' of 'tensor<2x3xi32>': unsupported element type i32 (float tensors only)"},
    {"attention_mixed_element_types",
     "util.func @f(%q: tensor<1x2x4xf32>, %k: tensor<1x3x4xf16>, %v: tensor<1x3x4xf32>, %s: f32, "
     "%o: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {\n"
     "  %r = iree_linalg_ext.attention {indexing_maps = [affine_map<(b, m, n, k1, k2) -> (b, m, "
     "k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, "
     "n)>, affine_map<(b, m, n, k1, k2) -> ()>, affine_map<(b, m, n, k1, k2) -> (b, m, n)>]} "
     "ins(%q, %k, %v, %s : tensor<1x2x4xf32>, tensor<1x3x4xf16>, tensor<1x3x4xf32>, f32) outs(%o "
     ": tensor<1x2x4xf32>) {\n"
     "  ^bb0(%x: f32):\n"
     "    iree_linalg_ext.yield %x : f32\n"
     "  } -> tensor<1x2x4xf32>\n"
     "  util.return %r : tensor<1x2x4xf32>\n}\n",
     "2:3",
     "unsupported: 'iree_linalg_ext.attention' with operand '%k' of type 'tensor<1x3x4xf16>' into "
     "'tensor<1x2x4xf32>': its operands and output must have one element type"},
    {"gather_float_indices",
     "util.func @f(%w: tensor<4x3xf32>, %i: tensor<2xf16>, %o: tensor<2x3xf32>) -> "
     "tensor<2x3xf32> {\n"
     "  %r = iree_linalg_ext.gather dimension_map = [0] ins(%w, %i : tensor<4x3xf32>, "
     "tensor<2xf16>) outs(%o : tensor<2x3xf32>) -> tensor<2x3xf32>\n"
     "  util.return %r : tensor<2x3xf32>\n}\n",
     "2:3", "'iree_linalg_ext.gather' takes integer indices, not 'tensor<2xf16>'"},
    {"matmul_config_not_a_string",
     MATMUL_HEAD "  %r = linalg.matmul {frank.config = 4} " MATMUL_TAIL, "3:38",
     "expected string as the value of 'frank.config', found '4'"},
    {"generic_missing_outs",
     GENERIC_HEAD GENERIC_ATTRS
     "      ins(%a : tensor<?xf32>) {\n" GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "4:31", "expected 'outs' in 'linalg.generic', found '{'"},

    // ---- Ops, attributes and literals.
    {"unsupported_op",
     "util.func @f(%a: tensor<?x?xf32>) {\n"
     "  %r = linalg.conv_2d ins(%a : tensor<?x?xf32>) outs(%a : tensor<?x?xf32>) -> "
     "tensor<?x?xf32>\n"
     "  util.return\n"
     "}\n",
     "2:8", "unsupported op 'linalg.conv_2d'"},
    {"quoted_generic_op_syntax",
     "util.func @f(%x: f32) {\n"
     "  %s = \"arith.addf\"(%x, %x) : (f32, f32) -> f32\n"
     "  util.return\n"
     "}\n",
     "2:8", "unsupported generic op syntax (quoted op name)"},
    {"overflow_flags",
     "util.func @f(%x: i32) {\n"
     "  %s = arith.addi %x, %x overflow<nsw> : i32\n"
     "  util.return\n"
     "}\n",
     "2:26", "unsupported attribute 'overflow'"},
    {"integer_matmul",
     "util.func @f(%a: tensor<4x4xi8>, %c: tensor<4x4xi8>) -> tensor<4x4xi8> {\n"
     "  %r = linalg.matmul ins(%a, %a : tensor<4x4xi8>, tensor<4x4xi8>) outs(%c : tensor<4x4xi8>) "
     "-> tensor<4x4xi8>\n"
     "  util.return %r : tensor<4x4xi8>\n"
     "}\n",
     "2:8",
     "'linalg.matmul' of 'tensor<4x4xi8>': unsupported element type i8 (float tensors only)"},
    {"fastmath_attribute",
     "util.func @f(%x: f32) {\n"
     "  %s = arith.addf %x, %x fastmath<fast> : f32\n"
     "  util.return\n"
     "}\n",
     "2:26", "unsupported attribute 'fastmath'"},
    {"float_literal_for_integer_type",
     "util.func @f() {\n"
     "  %c = arith.constant 1.5 : i32\n"
     "  util.return\n"
     "}\n",
     "2:23", "float literal '1.5' for non-float type 'i32'"},
    {"integer_literal_out_of_range_i8",
     "util.func @f() {\n"
     "  %c = arith.constant 300 : i8\n"
     "  util.return\n"
     "}\n",
     "2:23", "integer literal '300' does not fit in i8"},
    // The message quotes '-200': the caret belongs under the '-', where that spelling starts.
    {"negative_integer_literal_out_of_range_i8",
     "util.func @f() {\n"
     "  %c = arith.constant -200 : i8\n"
     "  util.return\n"
     "}\n",
     "2:23", "integer literal '-200' does not fit in i8"},
    {"hex_float_wrong_digit_count",
     "util.func @f() {\n"
     "  %c = arith.constant 0xFF80 : f32\n"
     "  util.return\n"
     "}\n",
     "2:23", "hexadecimal float literal for f32 needs 8 hex digits, found 4"},
    {"boolean_literal_for_float",
     "util.func @f() {\n"
     "  %c = arith.constant true : f32\n"
     "  util.return\n"
     "}\n",
     "2:30", "boolean literal for type 'f32'"},
    {"cmpf_bad_predicate",
     "util.func @f(%x: f32) {\n"
     "  %b = arith.cmpf foo, %x, %x : f32\n"
     "  util.return\n"
     "}\n",
     "2:19", "unknown predicate 'foo' for 'arith.cmpf'"},
    // sitofp needs an integer source: the source type is the culprit, not the result type.
    {"sitofp_from_float",
     "util.func @f(%x: f32) {\n"
     "  %y = arith.sitofp %x : f32 to f32\n"
     "  util.return\n"
     "}\n",
     "2:26", "'arith.sitofp' cannot convert 'f32' to 'f32'"},
    // A literal too large for int64 must be a located error, not a stray std::out_of_range.
    {"linalg_index_literal_too_large",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS GENERIC_BLOCK
     "    %i = linalg.index 99999999999999999999 : index\n" GENERIC_YIELD GENERIC_TAIL,
     "6:23", "integer '99999999999999999999' is out of range (at most 1024)"},

    // ---- Functions.
    {"external_declaration_public", "util.func public @m.g(f32) -> f32\n", "1:18",
     "external declaration '@m.g' must be private"},
    {"body_with_unnamed_arguments",
     "util.func @f(f32) -> f32 {\n"
     "  util.return\n"
     "}\n",
     "1:26", "a function with a body needs named arguments ('%name: type')"},
    {"named_then_unnamed_argument",
     "util.func @f(%a: f32, f32) {\n"
     "  util.return\n"
     "}\n",
     "1:23", "expected SSA value as an argument name, found 'f32'"},
    {"function_attributes",
     "util.func @f() attributes {x} {\n"
     "  util.return\n"
     "}\n",
     "1:16", "unsupported function attributes"},
    // Location aliases may be defined after their uses, as MLIR prints them, but must be.
    {"undefined_location_alias",
     "util.func @f(%a: f32) -> f32 {\n"
     "  util.return %a : f32 loc(#loc9)\n"
     "}\n"
     "#loc1 = loc(\"m.py\":1:2)\n",
     "2:28", "undefined location alias '#loc9'"},
    // Aliases of attribute text: errors point into the alias, where the text is.
    {"alias_of_a_bad_iterator_type",
     "#iters = [\"parallel\", \"sideways\"]\n"
     "util.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = "
     "#iters} outs(%x : tensor<2xf32>) {\n"
     "  ^bb0(%o: f32):\n"
     "    linalg.yield %o : f32\n"
     "  } -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n"
     "}\n",
     "1:23", "unsupported iterator type 'sideways'"},
    {"alias_that_refers_to_itself",
     "#t = {indexing_maps = #t}\n"
     "util.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %r = linalg.generic #t outs(%x : tensor<2xf32>) {\n"
     "  ^bb0(%o: f32):\n"
     "    linalg.yield %o : f32\n"
     "  } -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n"
     "}\n",
     "1:23", "attribute alias '#t' refers to itself"},
    {"alias_of_a_list_used_as_a_map",
     "#iters = [\"parallel\"]\n"
     "util.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %r = linalg.generic {indexing_maps = [#iters], iterator_types = #iters} "
     "outs(%x : tensor<2xf32>) {\n"
     "  ^bb0(%o: f32):\n"
     "    linalg.yield %o : f32\n"
     "  } -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n"
     "}\n",
     "1:10", "expected an affine map, found '['"},
    {"undefined_alias_of_iterator_types",
     "util.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = "
     "#iters} outs(%x : tensor<2xf32>) {\n"
     "  ^bb0(%o: f32):\n"
     "    linalg.yield %o : f32\n"
     "  } -> tensor<2xf32>\n"
     "  util.return %r : tensor<2xf32>\n"
     "}\n",
     "2:85", "undefined attribute alias '#iters'"},
    // Attribute dictionaries that printers and importers add, on ops and results.
    {"attribute_dictionary_on_an_op",
     "util.func @f(%a: f32) -> f32 {\n"
     "  %x = arith.addf %a, %a {torch.debug_name = \"x\"} : f32\n"
     "  util.return %x : f32\n"
     "}\n",
     "2:26", "unsupported attribute dictionary on 'arith.addf'"},
    {"attribute_dictionary_after_an_op",
     "util.func @f(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {\n"
     "  %e = tensor.empty() : tensor<2x2xf32>\n"
     "  %r = linalg.transpose ins(%a : tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) "
     "permutation = [1, 0] {x = 1}\n"
     "  util.return %r : tensor<2x2xf32>\n"
     "}\n",
     "3:99", "unsupported attribute dictionary on 'linalg.transpose'"},
    {"result_attributes",
     "util.func @f(%a: f32) -> (f32 {res.attr = 1 : i64}) {\n"
     "  util.return %a : f32\n"
     "}\n",
     "1:31", "unsupported result attributes"},
    {"dense_resource_constant",
     "util.func @f() {\n"
     "  %c = arith.constant dense_resource<blob> : tensor<2xf32>\n"
     "  util.return\n"
     "}\n",
     "2:23", "unsupported constant 'dense_resource<...>'"},
    {"dialect_resources",
     "util.func @f() {\n"
     "  util.return\n"
     "}\n"
     "{-#\n"
     "#-}\n",
     "4:1", "unsupported: dialect resources ('{-#' ... '#-}')"},
    // Reported at the second definition.
    {"function_redefinition",
     "util.func @f() {\n"
     "  util.return\n"
     "}\n"
     "util.func @f() {\n"
     "  util.return\n"
     "}\n",
     "4:11", "redefinition of function '@f'"},

    // ---- Verifier: terminators.
    {"verify_return_type_mismatch",
     "util.func @f(%x: f32) -> f64 {\n"
     "  util.return %x : f32\n"
     "}\n",
     "2:3", "'util.return' operand #0 has type 'f32' but function '@f' expects 'f64'"},
    {"verify_return_count_mismatch",
     "util.func @f(%x: f32) -> f32 {\n"
     "  util.return\n"
     "}\n",
     "2:3", "'util.return' returns 0 values but function '@f' expects 1"},
    {"verify_function_without_terminator",
     "util.func @f() {\n"
     "}\n",
     "1:11", "function '@f' must end with 'util.return'"},
    {"verify_generic_body_without_yield",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS GENERIC_BLOCK
     "    %y = arith.negf %x : f32\n" GENERIC_TAIL,
     "6:5", "the 'linalg.generic' body must end with 'linalg.yield'"},
    {"verify_yield_ends_function",
     "util.func @f(%x: f32) -> f32 {\n"
     "  linalg.yield %x : f32\n"
     "}\n",
     "2:3", "'linalg.yield' may only end a 'linalg.generic' or 'linalg.reduce' body"},
    // The yield is illegal here wherever it stands: "must be the last op" would mislead.
    {"verify_yield_outside_generic",
     "util.func @f(%x: f32) -> f32 {\n"
     "  linalg.yield %x : f32\n"
     "  util.return %x : f32\n"
     "}\n",
     "2:3", "'linalg.yield' may only end a 'linalg.generic' or 'linalg.reduce' body"},
    // The root cause is the misplaced return, not a missing one.
    {"verify_op_after_terminator",
     "util.func @f(%x: f32) -> f32 {\n"
     "  util.return %x : f32\n"
     "  %c = arith.constant 1 : i32\n"
     "}\n",
     "2:3", "'util.return' must be the last op of its block"},
    // A '%name =' after a bare return starts the next op, misplaced after it. (MLIR's optional
    // operand list swallows the name, and reports it as an undefined value.)
    {"bare_return_then_result_name",
     "util.func @f() {\n"
     "  util.return\n"
     "  %c = arith.constant 1 : i32\n"
     "}\n",
     "2:3", "'util.return' must be the last op of its block"},
    {"bare_yield_then_result_pack",
     "util.func @f(%b: i1) {\n"
     "  scf.if %b {\n"
     "    scf.yield\n"
     "    %p:2, %q = arith.constant 1 : i32\n"
     "  }\n"
     "  util.return\n"
     "}\n",
     "4:5", "'arith.constant' has 1 result but 3 names are given"},
    // A '{' where an op with a region expects another part is named as that part.
    {"scf_for_without_step",
     "util.func @f(%n: index) {\n"
     "  %c0 = arith.constant 0 : index\n"
     "  scf.for %j = %c0 to %n {\n"
     "  }\n"
     "  util.return\n"
     "}\n",
     "3:26", "expected 'step' in 'scf.for', found '{'"},

    // ---- Verifier: generic maps, reported at the generic.
    {"verify_map_count",
     GENERIC_HEAD "  %r = linalg.generic {indexing_maps = [#id], iterator_types = "
                  "[\"parallel\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:3", "'linalg.generic' has 2 operands but 1 indexing map"},
    {"verify_map_rank",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0, d0)>, #id], "
     "iterator_types = [\"parallel\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:3", "indexing map #0 has 2 results but operand #0 ('tensor<?xf32>') has rank 1"},
    {"verify_map_dims_vs_iterators",
     GENERIC_HEAD
     "  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\", "
     "\"parallel\"]}\n" GENERIC_OPERANDS GENERIC_BLOCK GENERIC_YIELD GENERIC_TAIL,
     "3:3", "indexing map #0 has 1 dims but there are 2 iterator types"},
    {"verify_output_map_has_reduction_dim",
     GENERIC2_HEAD "  %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = "
                   "[\"parallel\", \"reduction\"]}\n"
                   "      ins(%a : tensor<?x?xf32>) outs(%a : tensor<?x?xf32>) {\n" GENERIC2_TAIL,
     "3:3", "reduction dim d1 appears in the output indexing map"},
    {"verify_output_map_missing_parallel_dim",
     "#id2 = affine_map<(d0, d1) -> (d0, d1)>\n"
     "util.func @f(%a: tensor<?x?xf32>, %v: tensor<?xf32>) -> tensor<?xf32> {\n"
     "  %r = linalg.generic {indexing_maps = [#id2, affine_map<(d0, d1) -> (d0)>], "
     "iterator_types = [\"parallel\", \"parallel\"]}\n"
     "      ins(%a : tensor<?x?xf32>) outs(%v : tensor<?xf32>) {\n"
     "  ^bb0(%x: f32, %o: f32):\n"
     "    linalg.yield %x : f32\n"
     "  } -> tensor<?xf32>\n"
     "  util.return %r : tensor<?xf32>\n"
     "}\n",
     "3:3", "parallel dim d1 is missing from the output indexing map"},
    {"verify_linalg_index_out_of_range",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS GENERIC_BLOCK
     "    %i = linalg.index 5 : index\n" GENERIC_YIELD GENERIC_TAIL,
     "6:5", "'linalg.index 5' is out of range: the generic has 1 loop dims"},
    {"verify_linalg_index_outside_generic",
     "util.func @f() {\n"
     "  %i = linalg.index 0 : index\n"
     "  util.return\n"
     "}\n",
     "2:3", "'linalg.index' may only appear in a 'linalg.generic' body"},
    {"verify_tensor_op_in_generic_body",
     GENERIC_HEAD GENERIC_ATTRS GENERIC_OPERANDS GENERIC_BLOCK
     "    %e = tensor.empty() : tensor<4xf32>\n" GENERIC_YIELD GENERIC_TAIL,
     "6:5", "'tensor.empty' may not appear in a 'linalg.generic' body"},

    // ---- Found by fuzzing: reads past a shape, overflowing products, the sign of a literal.
    {"reassociation_past_the_rank_collapse",
     "util.func @f(%x: tensor<1xf32>) {\n"
     "  %c = tensor.collapse_shape %x [[0, 1]] : tensor<1xf32> into tensor<1xf32>\n"
     "  util.return\n"
     "}\n",
     "2:33", "the reassociation lists dim 1 but 'tensor<1xf32>' has rank 1"},
    {"reassociation_past_the_rank_expand",
     "util.func @f(%x: tensor<6x4xf32>) {\n"
     "  %e = tensor.expand_shape %x [[0, 1], [2, 3]] output_shape [2, 3, 4] : tensor<6x4xf32> "
     "into tensor<2x3x4xf32>\n"
     "  util.return\n"
     "}\n",
     "2:31", "the reassociation lists dim 3 but 'tensor<2x3x4xf32>' has rank 3"},
    {"reassociation_product_overflows",
     "util.func @f(%x: tensor<1125899906842624x1125899906842624xf32>) {\n"
     "  %c = tensor.collapse_shape %x [[0, 1]] : tensor<1125899906842624x1125899906842624xf32> "
     "into tensor<?xf32>\n"
     "  util.return\n"
     "}\n",
     "2:33",
     "reassociation group #0 of 'tensor<1125899906842624x1125899906842624xf32>' has too many "
     "elements"},
    {"dense_element_count_overflows",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[1.0, 2.0]> : tensor<2x274177x67280421310721xf32>\n"
     "  util.return\n"
     "}\n",
     "2:43", "the dense literal's type tensor<2x274177x67280421310721xf32> has too many elements"},
    // Lists nest as the type's dims: a transposed, flat or ragged literal had been read flat.
    {"dense_list_transposed",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<2x3xf32>\n"
     "  util.return\n"
     "}\n",
     "2:23", "dense literal of shape [3, 2] does not match its type tensor<2x3xf32>"},
    {"dense_list_flat",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<2x2xf32>\n"
     "  util.return\n"
     "}\n",
     "2:23", "dense literal of shape [4] does not match its type tensor<2x2xf32>"},
    {"dense_list_ragged",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[[1.0, 2.0, 3.0], [4.0], 5.0]> : tensor<2x3xf32>\n"
     "  util.return\n"
     "}\n",
     "2:47", "dense list element of shape [1] where the first has [3]"},
    {"dense_list_for_rank_0",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[1.5]> : tensor<f32>\n"
     "  util.return\n"
     "}\n",
     "2:23", "dense literal of shape [1] does not match its type tensor<f32>"},
    {"dense_negative_i1",
     "util.func @f() {\n"
     "  %c = arith.constant dense<[true, -1]> : tensor<2xi1>\n"
     "  util.return\n"
     "}\n",
     "2:36", "integer literal '-1' does not fit in i1"},
    // A dimension the input lacks is named as such, not as a rank the result would then miss.
    {"reduce_dimension_out_of_range", REDUCE_OVER("2"), "2:73",
     "'linalg.reduce' dimension 2 is out of range for 'tensor<3x4xf32>'"},
    {"reduce_dimension_twice", REDUCE_OVER("1, 1"), "2:73",
     "'linalg.reduce' dimension 1 appears twice"},
    {"concat_operands_disagree",
     "util.func @f(%a: tensor<2x4xf32>, %b: tensor<3x5xf32>) -> tensor<5x4xf32> {\n"
     "  %r = tensor.concat dim(0) %a, %b : (tensor<2x4xf32>, tensor<3x5xf32>) -> tensor<5x4xf32>\n"
     "  util.return %r : tensor<5x4xf32>\n"
     "}\n",
     "2:3", "'tensor.concat' operand #1 (%b) has 5 along dim 1 where the others have 4"},
    {"concat_result_size",
     "util.func @f(%a: tensor<2x4xf32>, %b: tensor<1x4xf32>) -> tensor<4x4xf32> {\n"
     "  %r = tensor.concat dim(0) %a, %b : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<4x4xf32>\n"
     "  util.return %r : tensor<4x4xf32>\n"
     "}\n",
     "2:3", "dim 0 of 'tensor<4x4xf32>' is 4 but the operands give 3"},
    {"concat_dim_out_of_range",
     "util.func @f(%a: tensor<2x4xf32>, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {\n"
     "  %r = tensor.concat dim(2) %a, %b : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>\n"
     "  util.return %r : tensor<3x4xf32>\n"
     "}\n",
     "2:26", "concat dim 2 is out of range for 'tensor<3x4xf32>'"},
    {"concat_element_types",
     "util.func @f(%a: tensor<2x4xf32>, %b: tensor<1x4xi32>) -> tensor<3x4xf32> {\n"
     "  %r = tensor.concat dim(0) %a, %b : (tensor<2x4xf32>, tensor<1x4xi32>) -> tensor<3x4xf32>\n"
     "  util.return %r : tensor<3x4xf32>\n"
     "}\n",
     "2:76",
     "'tensor.concat' joins tensors of one rank and element type, not 'tensor<1x4xi32>' into "
     "'tensor<3x4xf32>'"},
    // It had reached the lowering, which stopped with an internal compiler error.
    {"select_of_tensors",
     "util.func @f(%c: i1, %a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {\n"
     "  %r = arith.select %c, %a, %b : tensor<3xf32>\n"
     "  util.return %r : tensor<3xf32>\n"
     "}\n",
     "2:34", "'arith.select' works on scalars, found 'tensor<3xf32>'"},
};

class Diagnostics : public ::testing::TestWithParam<DiagCase> {};

TEST_P(Diagnostics, ReportsLocationMessageAndCaret) { expectDiagnostic(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Parser, Diagnostics, ::testing::ValuesIn(kDiagCases),
                         [](const ::testing::TestParamInfo<DiagCase> &info) {
                           return std::string(info.param.name);
                         });

// A byte that does not print is named by its value: a NUL in the message used to end it there.
TEST(Diagnostics, UnprintableBytesAreNamedByValue) {
  for (char byte : {'\0', '\x01', '\x7f'}) {
    std::string text = "util.func @f() {\n  %x = arith.constant 1 : i32";
    text += byte;
    text += "\n}\n";
    try {
      frank::parseString(text, "t.mlir");
      ADD_FAILURE() << "accepted byte " << int(byte);
    } catch (const frank::Error &e) {
      EXPECT_THAT(e.what(),
                  testing::StartsWith(fmt::format("t.mlir:2:30: error: unexpected byte 0x{:02x}\n",
                                                  static_cast<unsigned char>(byte))));
    }
  }
}

// A file that does not end is read up to its first NUL byte, not until memory runs out; the
// line shown holds '?' for control characters.
TEST(Diagnostics, FilesAreReadUpToTheirFirstNulByte) {
  try {
    frank::parseFile("/dev/zero");
    ADD_FAILURE() << "accepted /dev/zero";
  } catch (const frank::Error &e) {
    EXPECT_THAT(e.what(), testing::StartsWith("/dev/zero:1:1: error: unexpected byte 0x00\n"
                                              "??????????"));
  }
}

// A C1 control character (U+009B, a terminal's CSI) is shown as '?' too.
TEST(Diagnostics, C1ControlCharactersAreNotEchoed) {
  try {
    frank::parseString("util.func @f() {\n  %x = \xc2\x9b[2J\n}\n", "t.mlir");
    ADD_FAILURE() << "accepted a C1 control character";
  } catch (const frank::Error &e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("\n  %x = ??[2J\n"));
    EXPECT_THAT(e.what(), testing::Not(testing::HasSubstr("\xc2\x9b")));
  }
}

TEST(Diagnostics, TableIsLargeAndNamesAreUnique) {
  std::set<std::string> names;
  for (const DiagCase &c : kDiagCases)
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
  EXPECT_GE(names.size(), 40u);
}

// ---- Round trips --------------------------------------------------------------------------

struct RoundTrip {
  std::string first;  // print(parse(text))
  std::string second; // print(parse(first))
};

/// Parses, verifies and prints `text`, then does the same to the printed text. Fails the test
/// (and returns empty prints) on any error or crash.
RoundTrip roundTrip(const std::string &text, const std::string &name = "t.mlir") {
  constexpr char kSeparator = '\x1e';
  Outcome out = runIsolated([&] {
    auto module = frank::parseString(text, name);
    frank::verifyModule(*module);
    std::string first = frank::printModule(*module);
    auto again = frank::parseString(first, "printed.mlir");
    frank::verifyModule(*again);
    return first + kSeparator + frank::printModule(*again);
  });
  if (out.kind != Outcome::Ok) {
    ADD_FAILURE() << (out.kind == Outcome::Crashed ? "crashed: " : "failed: ") << out.text;
    return {};
  }
  size_t split = out.text.find(kSeparator);
  return {out.text.substr(0, split), out.text.substr(split + 1)};
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(RoundTrip, RmsNormComponent) {
  std::string path = FRANK_TESTS_DIR "/../components/normalization/rms_norm.mlir";
  RoundTrip rt = roundTrip(readFile(path), path);
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, StartsWith("module @rms_norm_components {\n"));
  EXPECT_THAT(rt.first, HasSubstr("util.func public @rms_norm_linalg(%input: tensor<?x?xf32>, "
                                  "%weight: tensor<?xf32>, %eps: f32) -> tensor<?x?xf32> {"));
  EXPECT_THAT(rt.first, HasSubstr("util.func public @rms_norm_fused("));
  EXPECT_THAT(rt.first, HasSubstr("iterator_types = [\"parallel\", \"reduction\"]"));
  // Aliases are expanded and named dims renumbered.
  EXPECT_THAT(rt.first, HasSubstr("indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
                                  "affine_map<(d0, d1) -> (d0)>]"));
  EXPECT_THAT(rt.first, HasSubstr("affine_map<(d0, d1) -> (d1)>"));
  EXPECT_THAT(rt.first, HasSubstr("%hidden_f32 = arith.sitofp %hidden_i32 : i32 to f32"));
  EXPECT_THAT(rt.first, HasSubstr("%root = math.sqrt %shifted : f32"));
  EXPECT_THAT(rt.first, HasSubstr("flow.dispatch.region -> (tensor<?x?xf32>{%rows, %hidden})"));
  EXPECT_THAT(rt.first, HasSubstr("flow.return %result : tensor<?x?xf32>"));
  EXPECT_THAT(rt.first, HasSubstr("%zero = arith.constant 0.0 : f32"));
  EXPECT_THAT(rt.first, Not(HasSubstr("//")));
  EXPECT_THAT(rt.first, Not(HasSubstr("#row")));
}

TEST(RoundTrip, SwigluComponent) {
  std::string path = FRANK_TESTS_DIR "/../components/activation/swiglu.mlir";
  RoundTrip rt = roundTrip(readFile(path), path);
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, StartsWith("module @activation_components {\n"));
  EXPECT_THAT(rt.first, HasSubstr("util.func public @swiglu(%gate: tensor<?x?x?xf32>, "
                                  "%up: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {"));
  EXPECT_THAT(rt.first, HasSubstr("%empty = tensor.empty(%d0, %d1, %d2) : tensor<?x?x?xf32>"));
  EXPECT_THAT(rt.first, HasSubstr("iterator_types = [\"parallel\", \"parallel\", \"parallel\"]"));
  EXPECT_THAT(rt.first, HasSubstr("ins(%gate, %up : tensor<?x?x?xf32>, tensor<?x?x?xf32>) "
                                  "outs(%empty : tensor<?x?x?xf32>)"));
  EXPECT_THAT(rt.first, HasSubstr("^bb0(%g: f32, %u: f32, %unused: f32):"));
  EXPECT_THAT(rt.first, HasSubstr("%neg_u = arith.negf %u : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%one = arith.constant 1.0 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("util.return %out : tensor<?x?x?xf32>"));
}

// `//` comments are whitespace in every position (MLIR-SUBSET 1.2).
TEST(RoundTrip, CommentsEverywhere) {
  RoundTrip rt = roundTrip(R"(// a leading comment
#id = affine_map<(d0) -> (d0)> // after an alias
util.func private @m.g( // after '(' of a declaration
    tensor<?xf32>, // between type-only arguments
    f32 // after the last one
) -> tensor<?xf32> // after the result type
util.func public @f( // after '('
    %a: tensor<?xf32>, // between signature arguments
    %s: f32 // after the last argument
) -> tensor<?xf32> { // after the signature
  // at the start of a body
  %c0 = arith.constant 0 : index // after an op
  %n = tensor.dim %a, // after an operand
      %c0 : tensor<?xf32>
  %e = tensor.empty(%n // inside parentheses
      ) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [
          affine_map<(d0) -> (d0)>, // after an affine_map entry
          #id // after an alias entry
        ],
        // between the lines of a multi-line op
        iterator_types = ["parallel"]}
      ins(%a : tensor<?xf32>) // after ins
      outs(%e : tensor<?xf32>) { // after outs
  ^bb0(%x: f32, // between block arguments
       %o: f32): // after the block header
    // inside a generic body
    %y = arith.addf %x, %s : f32 // uses a captured scalar
    linalg.yield %y : f32 // after the yield
  } -> tensor<?xf32> // after the result type
  %z = util.call @m.g(%r, // between call operands
                      %s) : (tensor<?xf32>, f32) // between the call's types
      -> tensor<?xf32>
  util.return %z : tensor<?xf32> // after the return
} // after the function
// a trailing comment without a newline at the end)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("util.func private @m.g(tensor<?xf32>, f32) -> tensor<?xf32>"));
  EXPECT_THAT(rt.first,
              HasSubstr("util.func public @f(%a: tensor<?xf32>, %s: f32) -> tensor<?xf32> {"));
  EXPECT_THAT(rt.first, HasSubstr("%n = tensor.dim %a, %c0 : tensor<?xf32>"));
  EXPECT_THAT(rt.first,
              HasSubstr("indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>]"));
  EXPECT_THAT(rt.first, HasSubstr("%y = arith.addf %x, %s : f32"));
  EXPECT_THAT(rt.first,
              HasSubstr("%z = util.call @m.g(%r, %s) : (tensor<?xf32>, f32) -> tensor<?xf32>"));
  EXPECT_THAT(rt.first, Not(HasSubstr("//")));
}

// Hex float literals are bit patterns; non-finite values print back as bit patterns.
// `frank.config` prints where it was written: in a generic's and attention's attribute
// dictionary, and in the one that a matmul may have.
TEST(RoundTrip, LoweringChoicesOnOps) {
  RoundTrip rt = roundTrip(frank::test::componentTextWith(
      "attention/attention_gqa.mlir", "#att_out]}", "#att_out], frank.config = \"prefetch=8\"}"));
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>], "
                                  "frank.config = \"prefetch=8\"} ins("));
  rt = roundTrip(R"(#id = affine_map<(d0) -> (d0)>
util.func @f(%a: tensor<?x?xf32>, %v: tensor<?xf32>) -> tensor<?x?xf32> {
  %r = linalg.matmul {frank.config = "tile=4x2,k-block=0"} ins(%a, %a : tensor<?x?xf32>, tensor<?x?xf32>) outs(%a : tensor<?x?xf32>) -> tensor<?x?xf32>
  %g = linalg.generic {frank.config = "pipeline=loops", indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%v : tensor<?xf32>) outs(%v : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  } -> tensor<?xf32>
  util.return %r : tensor<?x?xf32>
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("%r = linalg.matmul {frank.config = \"tile=4x2,k-block=0\"} "
                                  "ins(%a, %a : "));
  EXPECT_THAT(rt.first, HasSubstr("iterator_types = [\"parallel\"], frank.config = "
                                  "\"pipeline=loops\"} ins(%v"));
}

TEST(RoundTrip, HexFloatConstants) {
  RoundTrip rt = roundTrip(R"(util.func @f() -> f32 {
  %ninf = arith.constant 0xFF800000 : f32
  %pinf = arith.constant 0x7F800000 : f32
  %nan = arith.constant 0x7FC00000 : f32
  %one = arith.constant 0x3F800000 : f32
  %hinf = arith.constant 0xFC00 : f16
  %dinf = arith.constant 0xFFF0000000000000 : f64
  %hex_int = arith.constant 0x10 : i32
  util.return %ninf : f32
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("%ninf = arith.constant 0xFF800000 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%pinf = arith.constant 0x7F800000 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%nan = arith.constant 0x7FC00000 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%one = arith.constant 1.0 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%hinf = arith.constant 0xFC00 : f16"));
  EXPECT_THAT(rt.first, HasSubstr("%dinf = arith.constant 0xFFF0000000000000 : f64"));
  EXPECT_THAT(rt.first, HasSubstr("%hex_int = arith.constant 16 : i32"));
}

TEST(RoundTrip, ScalarConstantsAndArith) {
  RoundTrip rt = roundTrip(R"(util.func @f(%x: f32, %i: i32) -> i1 {
  %t = arith.constant true
  %f = arith.constant false : i1
  %two = arith.constant 2 : f32
  %small = arith.constant -2.5E+3 : f32
  %eps = arith.constant 1.0e-5 : f32
  %m = arith.constant -1 : i32
  %s = arith.mulf %x, %two : f32
  %b = arith.cmpf olt, %s, %small : f32
  %c = arith.cmpi slt, %i, %m : i32
  %both = arith.andi %b, %c : i1
  %any = arith.select %t, %both, %f : i1
  %w = arith.extf %eps : f32 to f64
  util.return %any : i1
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("%t = arith.constant true\n"));
  EXPECT_THAT(rt.first, HasSubstr("%f = arith.constant false\n"));
  EXPECT_THAT(rt.first, HasSubstr("%two = arith.constant 2.0 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%small = arith.constant -2500.0 : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%m = arith.constant -1 : i32"));
  EXPECT_THAT(rt.first, HasSubstr("%b = arith.cmpf olt, %s, %small : f32"));
  EXPECT_THAT(rt.first, HasSubstr("%w = arith.extf %eps : f32 to f64"));
}

// Aliases of a whole trait dictionary, and of the lists in it, as MLIR's linalg examples write
// them (`linalg.generic #trait ins(...)`): parsed where they are used.
TEST(RoundTrip, TraitAndListAliases) {
  RoundTrip rt = roundTrip(R"(#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#same = #id
#red = "reduction"
#iters = [#linalg.iterator_type<parallel>, #red]
#sum = {
  indexing_maps = [#same, #row],
  iterator_types = #iters
}
util.func @f(%x: tensor<2x3xf32>, %y: tensor<2xf32>) -> tensor<2xf32> {
  %r = linalg.generic #sum ins(%x : tensor<2x3xf32>) outs(%y : tensor<2xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<2xf32>
  util.return %r : tensor<2xf32>
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("iterator_types = [\"parallel\", \"reduction\"]"));
  EXPECT_THAT(rt.first, HasSubstr("affine_map<(d0, d1) -> (d0)>"));
}

// A literal of no elements: `dense<>`, as MLIR prints it, or empty lists, for a type of no
// elements whatever its dims (`dense<[]>` for 0x3 had been refused once lists had to nest).
TEST(RoundTrip, DenseLiteralsOfNoElements) {
  for (const char *literal : {"dense<>", "dense<[]>", "dense<[[]]>"}) {
    RoundTrip rt = roundTrip(fmt::format("util.func @f() -> tensor<0x3xf32> {{\n"
                                         "  %c = arith.constant {} : tensor<0x3xf32>\n"
                                         "  util.return %c : tensor<0x3xf32>\n"
                                         "}}\n",
                                         literal));
    EXPECT_EQ(rt.first, rt.second) << literal;
  }
}

// Quoted symbol names (`@"..."`), printed quoted where they are not identifiers.
TEST(RoundTrip, QuotedSymbolNames) {
  RoundTrip rt = roundTrip(R"(module @"my-model" {
  util.func public @"f x"(%a: f32) -> f32 {
    %r = util.call @"g.h"(%a) : (f32) -> f32
    util.return %r : f32
  }
  util.func public @"g.h"(%a: f32) -> f32 {
    util.return %a : f32
  }
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("module @\"my-model\" {"));
  EXPECT_THAT(rt.first, HasSubstr("util.func public @\"f x\"(%a: f32)"));
  EXPECT_THAT(rt.first, HasSubstr("util.call @g.h(%a)"));
}

// Forms MLIR takes too: a predicate as a string, spaces around a dim list's 'x'.
TEST(RoundTrip, QuotedPredicatesAndSpacedDims) {
  RoundTrip rt = roundTrip(R"(util.func @f(%t: tensor<? x 4 x f32>, %i: i32, %x: f32) -> i1 {
  %c = arith.cmpi "slt", %i, %i : i32
  %d = arith.cmpf "olt", %x, %x : f32
  %both = arith.andi %c, %d : i1
  util.return %both : i1
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("%t: tensor<?x4xf32>"));
  EXPECT_THAT(rt.first, HasSubstr("%c = arith.cmpi slt, %i, %i : i32"));
  EXPECT_THAT(rt.first, HasSubstr("%d = arith.cmpf olt, %x, %x : f32"));
}

// Signed dense elements: the most negative i64 (whose magnitude an i64 cannot hold, so the sign
// must be parsed with the number) and negative floats and integers of other widths.
TEST(RoundTrip, NegativeDenseElements) {
  RoundTrip rt = roundTrip(R"(util.func @f() {
  %a = arith.constant dense<-9223372036854775808> : tensor<1xi64>
  %b = arith.constant dense<[-128, 127, -1]> : tensor<3xi8>
  %c = arith.constant dense<[-1.5, 2.0]> : tensor<2xf32>
  util.return
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("dense<-9223372036854775808> : tensor<1xi64>"));
  EXPECT_THAT(rt.first, HasSubstr("dense<[-128, 127, -1]> : tensor<3xi8>"));
  EXPECT_THAT(rt.first, HasSubstr("dense<[-1.5, 2.0]> : tensor<2xf32>"));
}

// Named dims, constant results and empty results (a rank-0 tensor and a scalar operand).
TEST(RoundTrip, AffineMapForms) {
  RoundTrip rt = roundTrip(R"(#row = affine_map<(b, e) -> (b)>
#elem = affine_map<(b, e) -> (b, e)>
#pair1 = affine_map<(d0, d1) -> (d0, 1)>
#none = affine_map<(d0, d1) -> ()>
util.func @f(%a: tensor<?x?xf32>, %p: tensor<?x2xf32>, %z: tensor<f32>, %s: f32,
             %init: tensor<?xf32>) -> tensor<?xf32> {
  %r = linalg.generic {indexing_maps = [#elem, #pair1, #none, #none, #row],
                       iterator_types = ["parallel", "reduction"]}
      ins(%a, %p, %z, %s : tensor<?x?xf32>, tensor<?x2xf32>, tensor<f32>, f32)
      outs(%init : tensor<?xf32>) {
  ^bb0(%x: f32, %q: f32, %zz: f32, %ss: f32, %acc: f32):
    %t = arith.mulf %x, %q : f32
    %u = arith.addf %t, %zz : f32
    %v = arith.addf %u, %ss : f32
    %w = arith.addf %acc, %v : f32
    linalg.yield %w : f32
  } -> tensor<?xf32>
  util.return %r : tensor<?xf32>
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
                                  "affine_map<(d0, d1) -> (d0, 1)>, affine_map<(d0, d1) -> ()>, "
                                  "affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0)>]"));
  EXPECT_THAT(rt.first, HasSubstr("%z: tensor<f32>"));
  EXPECT_THAT(rt.first, HasSubstr("ins(%a, %p, %z, %s : tensor<?x?xf32>, tensor<?x2xf32>, "
                                  "tensor<f32>, f32)"));
}

// func.func / func.return / return / call / func.call are synonyms; bare functions make an
// anonymous module.
TEST(RoundTrip, SynonymsAndBareFunctions) {
  RoundTrip rt = roundTrip(R"(func.func private @m.g(f32) -> f32
func.func @f(%x: f32) -> f32 {
  %y = call @m.g(%x) : (f32) -> f32
  %z = func.call @m.g(%y) : (f32) -> f32
  func.return %z : f32
}
func.func @h(%x: f32) -> f32 {
  return %x : f32
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_EQ(rt.first, R"(module {
  util.func private @m.g(f32) -> f32

  util.func public @f(%x: f32) -> f32 {
    %y = util.call @m.g(%x) : (f32) -> f32
    %z = util.call @m.g(%y) : (f32) -> f32
    util.return %z : f32
  }

  util.func public @h(%x: f32) -> f32 {
    util.return %x : f32
  }
}
)");
}

// Check files are zero-argument functions with a bare `return` (MLIR-SUBSET 4.11).
TEST(RoundTrip, FunctionWithoutResults) {
  RoundTrip rt = roundTrip(R"(func.func private @m.h()
func.func @main() {
  call @m.h() : () -> ()
  return
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("util.func private @m.h()\n"));
  EXPECT_THAT(rt.first, HasSubstr("util.func public @main() {\n"));
  EXPECT_THAT(rt.first, HasSubstr("util.call @m.h() : () -> ()\n"));
  EXPECT_THAT(rt.first, HasSubstr("    util.return\n"));
}

TEST(RoundTrip, TypeAlias) {
  RoundTrip rt = roundTrip(R"(!elem = f32
!vec = tensor<?x!elem>
module @m {
  util.func public @f(%a: tensor<?x!elem>, %b: !vec, %s: !elem) -> tensor<?x?x!elem> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %a, %c0 : tensor<?x!elem>
    %e = tensor.empty(%n, %n) : tensor<?x?x!elem>
    util.return %e : tensor<?x?xf32>
  }
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("util.func public @f(%a: tensor<?xf32>, %b: tensor<?xf32>, "
                                  "%s: f32) -> tensor<?x?xf32> {"));
  EXPECT_THAT(rt.first, HasSubstr("%e = tensor.empty(%n, %n) : tensor<?x?xf32>"));
}

TEST(RoundTrip, ExternalDeclarations) {
  RoundTrip rt = roundTrip(R"(module @user {
  util.func private @m.f(tensor<?xf32>) -> tensor<?xf32>
  util.func private @m.two(tensor<?xf32>, f32) -> (tensor<?xf32>, f32)
  util.func public @g(%x: tensor<?xf32>, %s: f32) -> (tensor<?xf32>, f32) {
    %y = util.call @m.f(%x) : (tensor<?xf32>) -> tensor<?xf32>
    %a, %b = util.call @m.two(%y, %s) : (tensor<?xf32>, f32) -> (tensor<?xf32>, f32)
    util.return %a, %b : tensor<?xf32>, f32
  }
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("  util.func private @m.f(tensor<?xf32>) -> tensor<?xf32>\n"));
  EXPECT_THAT(rt.first,
              HasSubstr("util.func private @m.two(tensor<?xf32>, f32) -> (tensor<?xf32>, f32)\n"));
  EXPECT_THAT(
      rt.first,
      HasSubstr("util.func public @g(%x: tensor<?xf32>, %s: f32) -> (tensor<?xf32>, f32) {"));
  EXPECT_THAT(
      rt.first,
      HasSubstr(
          "%a, %b = util.call @m.two(%y, %s) : (tensor<?xf32>, f32) -> (tensor<?xf32>, f32)"));
  EXPECT_THAT(rt.first, HasSubstr("util.return %a, %b : tensor<?xf32>, f32"));
}

// Trailing loc(...) annotations and `#x = loc(...)` aliases are skipped.
TEST(RoundTrip, LocationsAreIgnored) {
  RoundTrip rt = roundTrip(R"(#loc0 = loc("model.py":1:1)
module @m {
  util.func public @f(%a: f32 loc("model.py":2:3), %b: f32 loc(#loc0)) -> f32 {
    %s = arith.addf %a, %b : f32 loc(fused["model.py":3:4, #loc0])
    util.return %s : f32 loc("say \"hi\" in C:\\src":7:8)
  } loc("model.py":5:6)
} loc(#loc0)
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("util.func public @f(%a: f32, %b: f32) -> f32 {"));
  EXPECT_THAT(rt.first, HasSubstr("%s = arith.addf %a, %b : f32\n"));
  EXPECT_THAT(rt.first, Not(HasSubstr("loc")));
}

// Names reused in sibling regions are made unique by the printer, and stay stable.
TEST(RoundTrip, DispatchRegionAndReusedNames) {
  RoundTrip rt = roundTrip(R"(#id = affine_map<(d0) -> (d0)>
util.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %out = flow.dispatch.region -> (tensor<?xf32>{%n}) {
    %e = tensor.empty(%n) : tensor<?xf32>
    %r1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
        ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%x: f32, %o: f32):
      %i = linalg.index 0 : index
      linalg.yield %x : f32
    } -> tensor<?xf32>
    %r2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
        ins(%r1 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
    ^bb0(%x: f32, %o: f32):
      %y = math.exp %x : f32
      linalg.yield %y : f32
    } -> tensor<?xf32>
    flow.return %r2 : tensor<?xf32>
  }
  util.return %out : tensor<?xf32>
}
)");
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(rt.first, HasSubstr("%out = flow.dispatch.region -> (tensor<?xf32>{%n}) {"));
  EXPECT_THAT(rt.first, HasSubstr("%i = linalg.index 0 : index"));
  EXPECT_THAT(rt.first, HasSubstr("^bb0(%x: f32, %o: f32):"));
  EXPECT_THAT(rt.first, HasSubstr("^bb0(%x_1: f32, %o_1: f32):"));
  EXPECT_THAT(rt.first, HasSubstr("flow.return %r2 : tensor<?xf32>"));
}

} // namespace

namespace {

// Every Tier-1 op form prints back to text that parses to the same print.
TEST(RoundTrip, EveryOpForm) {
  std::string path = FRANK_TESTS_DIR "/data/all_ops.mlir";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto first = frank::parseString(text.str(), path);
  frank::verifyModule(*first);
  std::string printed = frank::printModule(*first);
  auto second = frank::parseString(printed, "printed.mlir");
  frank::verifyModule(*second);
  EXPECT_EQ(printed, frank::printModule(*second));
  for (const char *form :
       {"tensor.expand_shape %x [[0], [1, 2]] output_shape [%d0, 2, %h]",
        "tensor.extract_slice %cl[0, %c1] [%d0, 4] [1, 1]", "permutation = [1, 0]",
        "linalg.softmax dimension(1)", "dimensions = [1] (%in: f32, %acc: f32)",
        "iree_linalg_ext.gather dimension_map = [0]", "-> tensor<?x?xf32>, tensor<?x?xi32>",
        "iter_args(%a = %sel)", "dense<[[1.0, 2.0], [3.0, 0xFF800000]]>",
        "util.assume.int %n<umin = 1, umax = 4096, udiv = 2>"})
    EXPECT_NE(printed.find(form), std::string::npos) << form;
}

// ---- Hostile input (fuzz_parse's findings and their kin) -----------------------------------

/// The first line of the diagnostic for `text`; fails the test on a crash or a success.
std::string firstError(const std::string &text) {
  Outcome out = runIsolated([&] {
    auto module = frank::parseString(text, "t.mlir");
    frank::verifyModule(*module);
    return std::string();
  });
  EXPECT_EQ(out.kind, Outcome::Threw) << out.text;
  return splitLines(out.text).empty() ? std::string() : splitLines(out.text)[0];
}

// A UTF-8 byte order mark before the text is skipped; columns count after it.
TEST(RoundTrip, ByteOrderMarkIsSkipped) {
  const std::string text =
      "\xEF\xBB\xBFutil.func @f(%a: f32) -> f32 {\n  util.return %a : f32\n}\n";
  RoundTrip rt = roundTrip(text);
  EXPECT_EQ(rt.first, rt.second);
  EXPECT_THAT(firstError("\xEF\xBB\xBF%x"), StartsWith("t.mlir:1:1: error: "));
}

// A diagnostic on a very long line shows the part around its column, the caret under it.
TEST(Diagnostics, LongLinesAreShownAroundTheColumn) {
  auto fullError = [](const std::string &text) {
    try {
      frank::parseString(text, "t.mlir");
    } catch (const frank::Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string elements;
  for (int i = 0; i < 20000; ++i)
    elements += "1.0, ";
  const std::string text = "util.func @f() {\n  %c = arith.constant dense<[" + elements +
                           "1.0]> : tensor<2xf32>\n  util.return\n}\n";
  std::string error = fullError(text);
  std::vector<std::string> lines = splitLines(error);
  ASSERT_EQ(lines.size(), 3u) << error.substr(0, 3000);
  EXPECT_EQ(lines[0], "t.mlir:2:23: error: dense literal of shape [20001] does not match its type "
                      "tensor<2xf32>");
  EXPECT_LE(lines[1].size(), 1003u);
  EXPECT_THAT(lines[1], StartsWith("  %c = arith.constant dense<[1.0, 1.0"));
  EXPECT_THAT(lines[1], testing::EndsWith("..."));
  EXPECT_EQ(lines[2], std::string(22, ' ') + "^");
  // Far into the line, the part shown starts with "..." and the caret still points at the column.
  const std::string late = "util.func @f() {\n  %c = arith.constant dense<[" + elements +
                           "1.0, x]> : tensor<2xf32>\n  util.return\n}\n";
  lines = splitLines(fullError(late));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[1], StartsWith("..."));
  EXPECT_EQ(lines[1][lines[2].size() - 1], 'x');
}

// Nested dense lists and nested tensor types recursed once per level and overflowed the stack.
TEST(Hostile, DeepNestingIsAnErrorNotACrash) {
  const size_t depth = 200000;
  std::string dense = fmt::format("util.func @f() {{\n  %c = arith.constant dense<{}1.0{}> : "
                                  "tensor<1xf32>\n  util.return\n}}\n",
                                  std::string(depth, '['), std::string(depth, ']'));
  EXPECT_THAT(firstError(dense),
              StartsWith("t.mlir:2:286: error: nesting too deep (more than 256 levels)"));
  std::string tensor = fmt::format("util.func @f(%x: {}f32{}) {{}}\n",
                                   fmt::join(std::vector<std::string>(depth, "tensor<"), ""),
                                   std::string(depth, '>'));
  EXPECT_THAT(firstError(tensor), StartsWith("t.mlir:1:25: error: tensor element type must be a "
                                             "scalar type, found a tensor type"));
  // Within the limit, nested dense lists still parse.
  EXPECT_NO_THROW(frank::parseString("util.func @f() {\n  %c = arith.constant dense<[[[1.0, "
                                     "2.0]]]> : tensor<1x1x2xf32>\n  util.return\n}\n",
                                     "t.mlir"));
}

} // namespace
