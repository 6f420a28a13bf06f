// \file How each linalg.generic becomes loops: a named pipeline and its lowering configuration,
// chosen from the op's iteration space, its operands' strides at the specialized shapes and the
// target's vector registers. The choice is plain data: it prints into the loop IR above the nest
// it built (`--emit=loops`), it can be overridden by hand (`--config=`), and tests check it
// without compiling anything.
//
// Pipelines:
// - loops: the nest as the op writes it, innermost loop left to LLVM's vectorizer (generic
//   mode, and anything no other pipeline takes);
// - elementwise: all-parallel nests; row-reduction: reductions innermost, accumulated in a
//   register (both are `loops` with a name that says what they are);
// - contraction.outer: register-blocked outer products for contractions whose output and
//   "B" operand are contiguous along a parallel dim n (matmul, attention's P x V): a tile of
//   MR rows of dim m by NR vectors along n stays in registers across the whole reduction,
//   each step broadcasting one element of "A" per row and loading NR vectors of "B";
//   optionally blocked over k so the B panel stays in L1 while all m blocks pass over it, and
//   with B packed panel by panel into contiguous memory first when its rows are far apart (a
//   large power-of-two row stride maps every row of a panel to the same cache sets). With k
//   blocks the panels take turns in two slots: the m blocks of one k block pack the next k
//   block's panel into the other slot a chunk of rows after each tile, having prefetched the
//   chunk into L2 before the tile, so reading B overlaps the products (S7: a whole-panel pack
//   stalls the tiles for 14% of the time); and the n blocks run in groups, each group taking
//   its k blocks outside its n blocks, so that a k block of A serves the group from L2
//   (`n-group=8`). An n that no vector width divides (a vocabulary of 50257) keeps this
//   strategy for its whole vectors, and its last n % lanes columns run one lane wide after the
//   n blocks, B read in place, over all of k (as contraction.stream's parts of k add their rows
//   to them after their vectors). Whole vectors that only NR = 1 divides (125 at n = 1000)
//   take wider n blocks, and the vectors those leave over run before those columns, in one
//   narrower tile;
// - contraction.dot: register-blocked dot products for contractions whose operands are
//   contiguous along the reduction dim k (Q x K^T): an MR x NR tile of vector accumulators
//   along k, summed across lanes once at the end.
//
// Both take their blocks (dot's n blocks, outer's k blocks) outside the parallel dims along
// which B is read more closely than along the blocks' dim (the KV heads at decode), so that B
// is read in address order (`blocks-outside=d1`).
// - contraction.gather: a contraction whose "A" operand is a folded gather (mul_mat_id): the
//   body reads it with tensor.extract, one dim chosen per point by an integer input. The pairs
//   (points of the dims the choices depend on: slots x tokens) are grouped by their choice into
//   runs of whole vectors, and the input is packed by slot, so that every vector of pairs reads
//   one choice: each step broadcasts one element of A per row (MR x 1 tile), k-blocked so the
//   tile's rows of A stay in L1. The m blocks are the outer, parallel loop, so each thread
//   streams its own rows of A from memory once.
// - contraction.ranks: the same contraction when the chosen dim is one whole vector (8 or 16
//   f32, contiguous), in place of contraction.gather: the choices are the lanes. The pairs in
//   their own order are the slots, C to a vector (a rank of slots), and lane j of a rank
//   multiplies the choice of its pair: a step loads one vector of a row's C choices and
//   permutes it by each rank's choices (one vpermps) for NR ranks (MR x NR tile: no broadcast,
//   which bounds contraction.gather at one load per FMA). Every routing takes the same ranks,
//   the pairs over C: ranking the pairs within their choice instead (lane j always choice j)
//   needs no permute but as many ranks as the busiest choice has pairs, and random routing of
//   S9 at 32 tokens took 12 or 16 ranks for 8 (4.4-5.1 ms against 3.8-3.9 with permutes; one
//   choice taking every pair, 12.8-13.6 ms; AVX-512). With 16 registers, where a permute per
//   FMA shares the FP pipes with the FMAs, the ranks go by choice (`ranks=by-choice`): the
//   pairs / C ranks of even routing take lane j for choice j and need no permute, and only the
//   pairs past them in their choice follow in order, in ranks that permute. When the pairs fill
//   whole tiles and the input and output hold them contiguously in the ids' order (x[k, pairs],
//   out[m, pairs]), the slots in order are those tensors themselves: nothing is packed or read
//   back (S10 at 32 tokens: 13.5 -> 13.0 ms). The whole k runs in registers, or, when the input by
//   slot (k x ranks x choices) would pass a quarter of L2, one k block at a time: the m blocks run
//   once per k block and add to their slots, so that a block of the input serves every m block from
//   cache. The rows are then split into 8 parts, the parallel loop, each running every k block over
//   its m blocks: one parallel loop rather than one per k block, each ending in a wait for the
//   slower thread (S10 at 32 tokens, four alternating rounds: 12.8-14.0 -> 12.4-13.3 ms). By
//   choice, with rows of a page or more, the k blocks are the tile's own instead
//   (`k-blocks=in-tile`): every rank block, by choice or permuted, passes over a k block of
//   the tile's rows while they are in L1, and the permuted ones a rank at a time. When a tile reads
//   its rows in runs shorter than a 4 KiB page (small k blocks outside), the rows after the tile
//   (their lines of the k block) are prefetched into L2 in order as it runs, one stream instead of
//   MR far apart; longer runs are left to the L2's streamer.
// - contraction.choices: the same contraction with fewer pairs than a vector (decode: one
//   token, k slots), when the chosen dim is short and contiguous: every choice of a row is
//   computed, the choices being the lanes (one vector load of A per k), and each pair then takes
//   the lane of its choice. A's rows stream contiguously, which is what reading them all costs
//   anyway when the choices are innermost: the extra lanes are free FMAs beside the memory.
// - contraction.stream: a contraction.outer nest with one row of output (GEMV: x[K] W[K, N]),
//   or a few (up to 3/8 of the vector registers, a B of 1 MiB or more: a matmul of a handful of
//   tokens by weights), reads B row after row instead of in column stripes: N is split into a
//   few parts (the parallel loop), and each part adds MR rows of B at a time to its slice of
//   every output row, which stays in L1, each vector of B loaded once for all the rows. Each row
//   of B is then read in long contiguous runs, as the prefetchers and DRAM want; column stripes
//   touch every 4 KiB page of B for 256 bytes at a time. The tile is printed as MRxP: rows per
//   step by parts. When the body is a sum of products the parts split k instead (`split=k`):
//   each sums its contiguous share of B's rows into a partial output of its own, and the partial
//   outputs are added at the end. With `prefetch=N` each load of a row of B prefetches the same
//   line N steps of rows ahead (the default where a vector is a whole line).
//
// contraction.outer also takes a B that is contiguous along k rather than n (Q x K^T, x W^T with
// a short k, where contraction.dot would sum 16-lane accumulators after only a few steps): B is
// then always packed, transposed panel by panel, and printed `pack=#i^T`. Any packed B is packed
// again in every iteration of the parallel dims outside the tile (each head of attention), into
// the region of the chunk of the parallel loop that runs it, so that parallel chunks do not
// share one while each chunk's iterations reuse theirs (`chunk from pack_region`).
//
// With runtime extents (partial specialization), contraction.outer and contraction.dot both
// apply, dot when k is a constant: the m blocks, the n blocks and outer's reductions then run a
// runtime number of times, the rows m leaves over take one-row tiles and the columns n leaves
// over one-column tiles (outer's one lane wide, B read in place). A runtime m keeps k blocks and
// packing (the token count of a prefill matmul), a runtime k keeps packing, whole panels of the
// runtime length (attention's P x V over a runtime key count), and a runtime n keeps packing
// transposed, the whole n blocks' panels (attention's Q x K^T over a runtime key count).
#pragma once

#include "ir/IR.h"

#include <optional>
#include <string>
#include <vector>

namespace frank::loops {

/// What the lowering may assume about the machine.
struct Target {
  int vectorBits = 256; // widest vector register (AVX2: 256, AVX-512: 512)
  int vectorRegisters = 16;
  /// Whether the tiles that stream several rows of weights side by side (contraction.ranks and
  /// contraction.choices: mul_mat_id and the MoE block) prefetch each row ahead of their reads.
  /// On the Xeon they took S9 from 83-86% of a plain read of its weights to 97-101%. The Zen 3's
  /// own prefetchers follow the rows, and the prefetches only take slots: one process
  /// alternating the kernels, weights rotated through 3-4 copies, S9 at one token took 0.96-0.97
  /// of the time without them and the MoE block at one token 0.86-0.94; at 32 tokens level
  /// (0.92-1.05), 0.98 with the weights warm. Off for AMD's Zen cores (Engine::target) but Zen 4,
  /// where they took the MoE block at 32 tokens to 12.4-14.1 ms from 13.2-15.9 (medians 12.9 and
  /// 14.5; alternating processes, five rounds), S9 at 32 tokens 3.9-4.7 from 4.1-4.6, and left
  /// one token level (S9 2.9-3.4 against 2.4-3.7, the MoE block 9.2-12.5 against 10.1-12.1).
  bool prefetchRowsAhead = true;
  /// The most bytes of B's panel (a k block of a tile's NR vectors, for tiles of 4 rows or more)
  /// and of A's slice (the k block of every row of m) that chooseBlockK's k blocks take: the
  /// slice a quarter of a Zen 3's L2. Zen 5 takes twice both (its L2 1 MiB): S7 in k blocks of
  /// 512 ran 9.40-9.45 ms against 10.03-10.07 in blocks of 256 (one process alternating the
  /// kernels, medians of 25 calls, two rounds), 128x14336 by 14336x4096 33.8 against 35.4 and
  /// 128x4096 by 4096x14336 34.6 against 35.3; 32 and 64 rows level.
  int64_t blockKPanelBytes = 64 << 10;
  int64_t blockKSliceBytes = 128 << 10;
  static Target avx2() { return {256, 16}; }
  static Target avx512() { return {512, 32}; }
};

enum class Pipeline : uint8_t {
  Loops,
  Elementwise,
  RowReduction,
  ContractionOuter,
  ContractionDot,
  ContractionGather,
  ContractionChoices,
  ContractionRanks,
  ContractionStream
};

const char *pipelineName(Pipeline p);

struct Strategy {
  Pipeline pipeline = Pipeline::Loops;
  int dimM = -1, dimN = -1, dimK = -1; // loop dims of the contraction's register tile
  int lanes = 1;                       // vector width along the vectorized dim
  int tileM = 1;                       // register tile: rows of dim m
  int tileN = 1;                       // vectors along n (outer) or columns of n (dot)
  int64_t blockK = 0;                  // cache block of dim k; 0 for none
  int packInput = -1;                  // the input packed into panels (outer), or -1
  bool packTransposed = false;         // it is read along k, not n: packing transposes it
  bool splitK = false;                 // stream: the parts split k, not n
  int prefetchAhead = 0;               // dot: B's rows are prefetched this many n blocks ahead;
                                       // stream: this many steps of rows ahead
  std::vector<int> blocksOutside;      // the parallel dims outside the tile that dot's m and n
                                       // blocks, or outer's k blocks, run outside of, outside
                                       // in (B read in address order)
  int64_t groupN = 0;                  // outer, packed k blocks: n blocks per group, the k
                                       // blocks running outside a group's n blocks; 0 for none
  bool ranksByChoice = false;          // ranks: lane j is choice j mod C in the ranks of even
                                       // routing (no permute), the other pairs in order
  bool kBlocksInTile = false;          // ranks: the k blocks run inside each tile, every
                                       // rank block passing over a k block of the tile's rows;
                                       // else outside the m blocks
  std::string why;                     // for `loops`: why nothing better applies

  bool isContraction() const {
    return pipeline == Pipeline::ContractionOuter || pipeline == Pipeline::ContractionDot ||
           pipeline == Pipeline::ContractionGather || pipeline == Pipeline::ContractionChoices ||
           pipeline == Pipeline::ContractionRanks || pipeline == Pipeline::ContractionStream;
  }

  /// contraction.ranks: the k steps a vector of slots takes (in order, a vector twice the
  /// `choices` holds a row's choices at two k), or 1 (by choice, such a vector holds two ranks).
  int64_t ranksKSteps(int64_t choices) const { return ranksByChoice ? 1 : lanes / choices; }
};

/// contraction.outer packing B transposed over a constant n of `n` columns that its n blocks do
/// not divide, into an output that starts from a fill value: the last block ends at n, its
/// first columns written again with the values the block before wrote there. (A transposed B
/// has no vectors to read in place for the columns after the whole blocks.)
bool shiftsLastNBlock(const Strategy &s, std::optional<int64_t> n, bool startsFromFill);

/// The span the L2's hardware streamer follows a run of lines within: rows read in runs this
/// long or longer need no prefetch of the rows after them (the strategy's choices and the
/// lowering's prefetches both go by it).
constexpr int64_t kPageBytes = 4096;

/// What a nest's runtime extents (partial specialization) count as, in extents and strides,
/// when its pipeline and tiles are chosen.
constexpr int64_t kNominalExtent = 256;

/// The facts the choice depends on, gathered by the lowering from one generic.
struct NestShape {
  std::vector<int64_t> extents; // per loop dim; empty when the nest's extents are not known
  std::vector<bool> reduction;  // per loop dim
  /// Per loop dim: its extent is a runtime value, counted as kNominalExtent in `extents`.
  /// Empty when every extent is a constant. Only m (the tile's rows), n, a reduction of
  /// contraction.outer and the dims outside the tile may be runtime values; k blocks need every
  /// extent but m's to be a constant, packing every extent but m's and k's (and n's, packed
  /// transposed).
  std::vector<bool> runtime;
  /// Per tensor input, then the output: the element stride along each loop dim (0 when the
  /// operand does not depend on it).
  std::vector<std::vector<int64_t>> strides;
  int elemBits = 32;
  bool vectorBody = false;     // only arithmetic the vector code generator handles
  bool addAccumulates = false; // the body yields `acc + f(inputs)` and reads acc nowhere else
  /// The output starts from a fill value that outer's tiles take instead of reading it: a
  /// column they compute twice is then written twice with the same value.
  bool startsFromFill = false;
  /// A folded gather: the body reads a tensor with tensor.extract at loop indices, except its
  /// last dim, which an integer input chooses.
  struct Gather {
    std::vector<int64_t> strides; // element strides along the loop dims (the chosen dim apart)
    int indexInput = -1;          // the input holding the choices
    int64_t choices = 0;          // the extent of the chosen (last, contiguous) dim
  };
  std::optional<Gather> gather;
};

/// Hand-set choices; every field left empty defers to the selection.
struct ConfigOverride {
  std::optional<Pipeline> pipeline; // `loops` turns the contraction pipelines off
  std::optional<int> tileM, tileN;
  std::optional<int64_t> blockK;
  std::optional<bool> pack;
  std::optional<int> prefetchAhead;
  std::optional<int64_t> keyChunks; // attention's chunks of keys (generalize-attention)
  std::optional<int64_t> queryBlocks; // attention's blocks of queries (generalize-attention)
  std::optional<bool> blocksOutside; // may the tiles' blocks run outside other parallel dims
  std::optional<int64_t> groupN;     // outer's n blocks per group (0: no groups)
  std::optional<bool> ranksByChoice; // ranks' slots by choice (`ranks=by-choice`) or in order
  std::optional<bool> kBlocksInTile; // ranks' k blocks in each tile (`k-blocks=in-tile`)
  std::string origin = "--config"; // where it was set, for the errors of choices it does not fit
  bool empty() const {
    return !pipeline && !tileM && !tileN && !blockK && !pack && !prefetchAhead && !keyChunks &&
           !queryBlocks && !blocksOutside && !groupN && !ranksByChoice && !kBlocksInTile;
  }
  /// This override with the fields `op` sets replaced: an op's `frank.config` attribute wins
  /// over the function-wide `--config`.
  ConfigOverride overriddenBy(const ConfigOverride &op) const;
  /// The choices as parseConfig reads them, in one order and spelling: `tile = 4x2,` and
  /// `tile=4x2` say the same (a kernel's cache key and description).
  std::string str() const;
};

/// Parses `--config=` text (or, with `origin` "frank.config", an op's attribute):
/// comma-separated `pipeline=NAME`, `tile=MxN`, `k-block=K` (0 for none), `pack=0|1`,
/// `prefetch=N` (n blocks ahead, 0 for none), `key-chunks=N` (attention's keys in N chunks, 1
/// for one piece), `query-blocks=N` (attention's queries in N blocks, 1 for one piece),
/// `blocks-outside=0|1` (the tiles' blocks kept inside every other parallel dim,
/// or run outside those B is read more closely along, however many m blocks), `n-group=G`
/// (contraction.outer's n blocks in groups of G, each running its k blocks outside its n
/// blocks; 0 for none), `ranks=by-choice|in-order` (contraction.ranks' slots, by choice or the
/// pairs in order; nests that take no contraction.ranks ignore it), `k-blocks=in-tile|outside`
/// (contraction.ranks' k blocks inside each tile or outside the m blocks). Throws
/// frank::Error naming what is wrong.
ConfigOverride parseConfig(const std::string &text, const std::string &origin = "--config");

/// contraction.gather's vectors of `lanes` pairs, at most: every choice's group padded.
int64_t groupedVectors(int64_t pairs, int64_t choices, int64_t lanes);

/// Picks the pipeline for one generic. An override that does not fit the nest (a tile that
/// does not divide its dims, a contraction pipeline for a nest that is not one) is an error.
Strategy selectStrategy(const NestShape &nest, const Target &target,
                        const ConfigOverride &config = {});

/// One line, e.g. "contraction.outer m=d0 n=d1 k=d2 tile=4x2 lanes=8 k-block=256 pack=#1".
std::string describe(const Strategy &s);

} // namespace frank::loops
