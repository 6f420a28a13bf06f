// The loop IR: loop nests over flat buffers, in the spirit of Halide's Stmt.
//
// Semantics:
// - A kernel reads input buffers, writes output buffers and uses temporaries carved from one
//   workspace. Buffers are flat arrays of one element type; an index is an element offset.
// - Expressions are pure trees. Integer expressions are 64-bit for indices and wrap on
//   overflow; the arithmetic ops reuse the tensor IR's OpKind with the same meaning.
// - `Let` binds an immutable name for the rest of its enclosing block. `Local` declares a
//   mutable scalar (a reduction accumulator) that `Assign` updates.
// - `For` runs its body for var = 0 .. extent-1 in order. `Vectorize` marks the innermost loop
//   the lowering expects LLVM's vectorizer to take (a hint for the reader; LLVM's cost model
//   decides); `Parallel` marks a loop whose iterations are independent.
// - A `Binary` node with `reassoc` may be reassociated with others of its kind (reduction
//   accumulation only); all other float arithmetic is evaluated as written.
// - `Check` stops the kernel when its condition is false, reporting check `buffer` (an index into
//   Program::checks) with the values of `index` and `value` (e.g. the index and the bound).
// - `Prefetch` asks the caches for the line holding element `index` of `buffer` ahead of its
//   reads. It has no effect on the results, and an index past the buffer does not fault, but
//   it may cost a page walk each time (S7's panels, prefetched past the weights in their last
//   k block, ran twice as slow in some processes), so a loop keeps its prefetches in bounds
//   where they run often.
// - `DimParam` and `ScalarParam` read the kernel's runtime arguments: the dims of the inputs
//   (generic mode) and the scalar arguments (f32 eps, or unspecialized integers).
// - Vectors: an expression has `lanes` (1 for a scalar). A Load with lanes L reads L consecutive
//   elements from its scalar index, a Store of an L-lane value writes them. Elementwise nodes
//   take the lanes of their operands, and a scalar operand mixed with a vector is broadcast
//   (`Broadcast`, inserted by the constructors). `ReduceAdd` sums the lanes of a vector in any
//   order, or of N vectors into the N lanes of one. `Permute` picks a vector's lanes by an
//   index vector, `Shuffle` two vectors' lanes by constant positions. Vectors are written by
//   strategies that block for registers; everything else is scalar code that LLVM's vectorizer
//   widens.
#pragma once

#include "ir/IR.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace frank::loops {

enum class ExprKind : uint8_t {
  IntConst,
  FloatConst,
  Var,
  DimParam,
  ScalarParam,
  Unary,
  Binary,
  Cmp,
  Select,
  Cast,
  Load,
  Broadcast,
  ReduceAdd,
  Permute,
  Shuffle
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprNode(ExprKind k, ElemKind t) : kind(k), type(t) {}
  ExprKind kind;
  ElemKind type;        // result type; Index for addresses and loop variables
  int lanes = 1;        // vector width of the result; 1 for scalars
  int64_t intValue = 0; // IntConst; param number for DimParam/ScalarParam; buffer for Load
  double floatValue = 0;
  std::string name;         // Var; predicate for Cmp
  OpKind op = OpKind::AddI; // Unary, Binary, Cast
  bool reassoc = false;
  std::vector<Expr> args; // operands; Load: {index}
  std::vector<int> picks; // Shuffle: the lanes of its two operands, one per result lane
};

Expr intConst(int64_t v, ElemKind type = ElemKind::Index);
Expr floatConst(double v, ElemKind type);
Expr var(const std::string &name, ElemKind type, int lanes = 1);
Expr dimParam(int index);
Expr scalarParam(int index, ElemKind type);
Expr unary(OpKind op, Expr a);
Expr binary(OpKind op, Expr a, Expr b, bool reassoc = false);
Expr cmp(const std::string &pred, Expr a, Expr b);
Expr select(Expr c, Expr a, Expr b);
Expr cast(OpKind op, Expr a, ElemKind to);
// `type` is the buffer's element type, or f32 or f64 for a buffer of 16-bit floats: the load then
// widens them (exactly).
Expr load(int buffer, Expr index, ElemKind type, int lanes = 1);
Expr broadcast(Expr scalar, int lanes);
/// A copy of `e`'s node with other operands.
Expr withArgs(const Expr &e, std::vector<Expr> args);
/// The sum of a vector's lanes, in any order.
Expr reduceAdd(Expr vector);
/// The sums of N vectors' lanes as an N-lane vector (N a power of two, at most their lanes),
/// which costs far fewer shuffles than N separate sums.
Expr reduceAdd(std::vector<Expr> vectors);
/// Lane i of the result is lane indices[i] of `vector` (an integer vector of its lanes or more,
/// each in [0, the vector's lanes): the lowering checks them), as one variable permute where the
/// target has it (AVX2's vpermps). The result has the indices' lanes: a half-width vector's
/// lanes spread over a whole register's.
Expr permute(Expr vector, Expr indices);
/// Lane i of the result is lane picks[i] of `a` followed by `b` (two vectors of one type): the
/// constant shuffles of a transpose in registers.
Expr shuffle(Expr a, Expr b, std::vector<int> picks);
/// A type as the loop IR prints it: f32, or f32x8 for a vector.
std::string typeName(ElemKind type, int lanes);

/// Constant index arithmetic past 64 bits (sizes from index arguments of any value): a user
/// error, which the lowering reports at the op it lowers.
class IndexOverflow : public Error {
public:
  using Error::Error;
};

/// Index arithmetic that folds constants (0 + x, 1 * x, c1 * c2); folding past 64 bits throws
/// IndexOverflow.
Expr add(Expr a, Expr b);
Expr mul(Expr a, Expr b);
/// a * b for the sizes heuristics weigh (at least 0), at most INT64_MAX.
int64_t saturatingMul(int64_t a, int64_t b);
/// Signed index division by a positive constant that folds c1 / c2, x / 1 and (k * x) / d where
/// d divides k: a tile count of a runtime extent that is a multiple of the tile stays a plain
/// product, which fuse-loops can bound.
Expr quotient(Expr a, int64_t divisor);
std::optional<int64_t> asConstant(const Expr &e);

/// An index as sum(coef * variable) + constant, or `ok` false when it is not of that form
/// (products of two variables, divisions, loads). A variable may appear in several terms.
struct LinearIndex {
  std::vector<std::pair<int64_t, Expr>> terms; // coefficient, scalar Var
  int64_t constant = 0;
  bool ok = true;
};
LinearIndex linearIndex(const Expr &index);

enum class StmtKind : uint8_t { Block, For, Let, Local, Assign, Store, If, Check, Prefetch };
enum class ForKind : uint8_t { Serial, Parallel, Vectorize };

struct StmtNode;
using Stmt = std::shared_ptr<StmtNode>;

struct StmtNode {
  explicit StmtNode(StmtKind k, std::string n = {}, ElemKind t = ElemKind::Index)
      : kind(k), name(std::move(n)), type(t) {}
  StmtKind kind;
  std::string name; // For: loop var; Let/Local/Assign: the variable
  ElemKind type = ElemKind::Index;
  int lanes = 1; // Let/Local: the variable's vector width
  ForKind forKind = ForKind::Serial;
  Expr value;                 // Let/Local/Assign/Store value; For extent; If/Check condition
  Expr index;                 // Store, Prefetch; Check: the observed value
  Expr bound;                 // Check: the bound it was checked against; parallel For: the
                              // fewest iterations worth giving a thread
  int buffer = -1;            // Store, Prefetch; Check: the check's id
  std::vector<Stmt> body;     // Block, For, If-then
  std::vector<Stmt> elseBody; // If
  std::string comment;        // printed above the statement (a strategy's choice, say)
  // For: a variable bound to the first iteration of the chunk running the body (a parallel
  // loop's chunk, a serial loop's 0), or empty. Only a loop no parallel loop encloses binds one:
  // memory a chunk indexes by it is its own for as long as the chunk runs (fuse-loops renames it
  // to the loop's variable when it makes the loop serial inside a parallel one).
  std::string chunkFirst;
};

Stmt block(std::vector<Stmt> body);
Stmt forLoop(const std::string &var, Expr extent, ForKind kind, std::vector<Stmt> body);
Stmt let(const std::string &name, Expr value);
Stmt local(const std::string &name, Expr init);
Stmt assign(const std::string &name, Expr value);
Stmt store(int buffer, Expr index, Expr value);
Stmt ifThen(Expr condition, std::vector<Stmt> body, std::vector<Stmt> elseBody = {});
/// A hint that element `index` of `buffer` is read soon, into the L2 cache.
Stmt prefetch(int buffer, Expr index);
/// Stops the kernel with check `id` unless `condition`; reports `observed` and `bound`.
Stmt check(Expr condition, int id, Expr observed, Expr bound);
/// Copies of `stmts` and the statements they hold, each expression they hold (value, index,
/// bound; null stays null) replaced by `rewrite` of it.
std::vector<Stmt> rewriteExprs(const std::vector<Stmt> &stmts,
                               const std::function<Expr(const Expr &)> &rewrite);

/// Calls `visit` on `e` and every expression under it.
void forEachExpr(const Expr &e, const std::function<void(const Expr &)> &visit);
/// `e` with each load under it (innermost first) replaced by `rewrite` of it; unchanged parts are
/// shared.
Expr mapLoads(const Expr &e, const std::function<Expr(const Expr &)> &rewrite);
/// Calls `visit` on every statement of `body` and the statements they hold, outer first.
void forEachStmt(const std::vector<Stmt> &body, const std::function<void(StmtNode &)> &visit);

/// One access of a buffer: a load in a statement's expression, a store or a prefetch.
struct BufferAccess {
  StmtNode *stmt;                      // the store or prefetch, or the statement that loads
  const ExprNode *load;                // the load; null for a store or prefetch
  std::vector<const StmtNode *> loops; // the loops around it, outermost first
  const Expr &index() const { return load ? load->args[0] : stmt->index; }
  /// Elements it touches from `index()` on.
  int lanes() const;
  bool isStore() const { return !load && stmt->kind == StmtKind::Store; }
};
/// The accesses of `buffer` in `body`, in program order. A loop's extent and bound are read
/// outside it.
std::vector<BufferAccess> accessesOf(const std::vector<Stmt> &body, int buffer);
/// The accesses of every buffer in `body` at once, element b holding accessesOf(body, b): one walk
/// instead of one per buffer.
std::vector<std::vector<BufferAccess>> accessesByBuffer(const std::vector<Stmt> &body,
                                                        size_t buffers);
/// Whether a load or store among `stmts` (not in nested loops) has an index that itself loads,
/// as the packing and the read-back around a gather's tiles do. Such loops stay scalar (codegen):
/// widened, each of those accesses would become one scalar access per lane.
bool addressesThroughLoads(const std::vector<Stmt> &stmts);
/// The most iterations a loop of `extent` runs, where a constant bounds it: the extent itself, or
/// the smallest constant a `minsi` takes (a causal mask's keys, `minsi(128, ...)`).
std::optional<int64_t> mostTrips(const Expr &extent);
/// Whether the iterations of the loop at `depth` around every access (a serial loop) each touch
/// a row of their own: each access is `S * i + inner + outer` for the loop's variable i, the same
/// S, an inner part (loops inside it, constants, vector lanes) within [0, S), and the same outer
/// part for all accesses, whose terms, in some order, each step past the rows (S times the loop's
/// extent) and the smaller terms' reach. Strides, bounds and extents may be runtime values: the
/// test runs on polynomials in the runtime sizes (Polynomial.h), proved for any sizes.
bool rowsOfTheirOwn(const std::vector<BufferAccess> &accesses, size_t depth);

/// The transpose of the square matrix whose rows are `rows` (L vectors of L lanes, L a power of
/// two), as L vectors bound by lets (named by `freshName`) appended to `body`: log2(L) rounds,
/// the one of distance d swapping the off-diagonal d x d blocks of every 2d x 2d block (rows j
/// and j + d exchange their lanes with bit d set and clear), each shuffle of two vectors one
/// instruction (vpermt2ps). 8 x 8 floats take 24 shuffles where element by element they take
/// 64 stores, each with its extract.
std::vector<Expr> transposeInRegisters(std::vector<Expr> rows, std::vector<Stmt> &body,
                                       const std::function<std::string()> &freshName);

/// `e` with variable `from` replaced by `to` (another variable, a constant, an index expression);
/// index sums and products fold again (0 * 32 + x is x).
Expr substitute(const Expr &e, const std::string &from, const Expr &to);
std::vector<Stmt> substitute(const std::vector<Stmt> &stmts, const std::string &from,
                             const Expr &to);

enum class BufferRole : uint8_t { Input, Output, Temp };

struct Buffer {
  std::string name;
  ElemKind elem;
  BufferRole role;
  int slot = 0;         // Input/Output: position among inputs/outputs
  Expr numElements;     // Temp: size; inputs and outputs: for information
  Expr workspaceOffset; // Temp: byte offset in the workspace
};

/// What a failed Check reports: where, and a message with {} for the observed value and bound.
struct CheckInfo {
  Location loc;
  std::string message;
};

/// One kernel: its buffers, runtime parameters and body.
struct Program {
  std::vector<CheckInfo> checks;
  std::string name;
  std::vector<Buffer> buffers;
  int numDimParams = 0;
  std::vector<ElemKind> scalarParams; // one slot per scalar argument
  std::vector<Stmt> body;
  Expr workspaceBytes; // total workspace size
};

std::string print(const Expr &e, const Program *program = nullptr);
std::string print(const Program &program);

/// Evaluates an integer expression of constants and params (the host uses it for output shapes
/// and workspace sizes). Throws if the expression reads anything else.
int64_t evaluate(const Expr &e, const int64_t *dims, const uint64_t *scalars);

} // namespace frank::loops
