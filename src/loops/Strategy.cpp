// Strategy selection: pure functions of the nest's shape and the target.
#include "loops/Strategy.h"
#include "ir/Diagnostics.h"
#include "loops/LoopIR.h"

#include <algorithm>

#include <llvm/ADT/StringExtras.h>
#include <llvm/ADT/StringRef.h>

namespace frank::loops {

const char *pipelineName(Pipeline p) {
  switch (p) {
  case Pipeline::Loops: return "loops";
  case Pipeline::Elementwise: return "elementwise";
  case Pipeline::RowReduction: return "row-reduction";
  case Pipeline::ContractionOuter: return "contraction.outer";
  case Pipeline::ContractionDot: return "contraction.dot";
  case Pipeline::ContractionGather: return "contraction.gather";
  case Pipeline::ContractionChoices: return "contraction.choices";
  case Pipeline::ContractionRanks: return "contraction.ranks";
  case Pipeline::ContractionStream: return "contraction.stream";
  }
  return "?";
}

ConfigOverride parseConfig(const std::string &text, const std::string &origin) {
  ConfigOverride config;
  config.origin = origin;
  auto bad = [&](const std::string &what) -> Error {
    return Error(fmt::format("error: {}='{}': {}", origin, text, what));
  };
  auto zeroOrOne = [&](llvm::StringRef key, llvm::StringRef value) {
    if (value != "0" && value != "1")
      throw bad(fmt::format("{} '{}' is not 0 or 1", key.str(), value.str()));
    return value == "1";
  };
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).split(items, ',', -1, false);
  std::vector<std::string> keys;
  for (llvm::StringRef item : items) {
    auto [untrimmedKey, untrimmedValue] = item.split('=');
    llvm::StringRef key = untrimmedKey.trim(), value = untrimmedValue.trim();
    if (key.empty() || value.empty())
      throw bad(fmt::format("'{}' is not key=value", item.trim().str()));
    if (std::find(keys.begin(), keys.end(), key.str()) != keys.end())
      throw bad(fmt::format("{} is given twice", key.str()));
    keys.push_back(key.str());
    if (key == "pipeline") {
      std::optional<Pipeline> found;
      for (Pipeline p :
           {Pipeline::Loops, Pipeline::Elementwise, Pipeline::RowReduction,
            Pipeline::ContractionOuter, Pipeline::ContractionDot, Pipeline::ContractionGather,
            Pipeline::ContractionChoices, Pipeline::ContractionRanks, Pipeline::ContractionStream})
        if (value == pipelineName(p))
          found = p;
      if (!found)
        throw bad(fmt::format("unknown pipeline '{}' (loops, contraction.outer, contraction.dot, "
                              "contraction.gather, contraction.choices, contraction.ranks, "
                              "contraction.stream)",
                              value.str()));
      config.pipeline = found;
    } else if (key == "tile") {
      auto [m, n] = value.split('x');
      int tm = 0, tn = 0;
      if (m.getAsInteger(10, tm) || n.getAsInteger(10, tn) || tm < 1 || tn < 1 || tm > 16 ||
          tn > 16)
        throw bad(fmt::format("tile '{}' is not MxN with 1 <= M, N <= 16", value.str()));
      config.tileM = tm;
      config.tileN = tn;
    } else if (key == "k-block") {
      int64_t k = 0;
      if (value.getAsInteger(10, k) || k < 0)
        throw bad(fmt::format("k-block '{}' is not an integer from 0 to 2^63", value.str()));
      config.blockK = k;
    } else if (key == "pack") {
      config.pack = zeroOrOne(key, value);
    } else if (key == "prefetch") {
      int ahead = 0;
      if (value.getAsInteger(10, ahead) || ahead < 0 || ahead > 64)
        throw bad(fmt::format("prefetch '{}' is not an integer from 0 to 64", value.str()));
      config.prefetchAhead = ahead;
    } else if (key == "key-chunks") {
      int64_t chunks = 0;
      if (value.getAsInteger(10, chunks) || chunks < 1 || chunks > 64)
        throw bad(fmt::format("key-chunks '{}' is not an integer from 1 to 64", value.str()));
      config.keyChunks = chunks;
    } else if (key == "query-blocks") {
      int64_t blocks = 0;
      if (value.getAsInteger(10, blocks) || blocks < 1 || blocks > 1024)
        throw bad(fmt::format("query-blocks '{}' is not an integer from 1 to 1024", value.str()));
      config.queryBlocks = blocks;
    } else if (key == "blocks-outside") {
      config.blocksOutside = zeroOrOne(key, value);
    } else if (key == "n-group") {
      int64_t group = 0;
      if (value.getAsInteger(10, group) || group < 0)
        throw bad(fmt::format("n-group '{}' is not a non-negative integer", value.str()));
      config.groupN = group;
    } else if (key == "ranks") {
      if (value != "by-choice" && value != "in-order")
        throw bad(fmt::format("ranks '{}' is not by-choice or in-order", value.str()));
      config.ranksByChoice = value == "by-choice";
    } else if (key == "k-blocks") {
      if (value != "in-tile" && value != "outside")
        throw bad(fmt::format("k-blocks '{}' is not in-tile or outside", value.str()));
      config.kBlocksInTile = value == "in-tile";
    } else {
      throw bad(fmt::format("unknown key '{}' (pipeline, tile, k-block, pack, prefetch, "
                            "key-chunks, query-blocks, blocks-outside, n-group, ranks, k-blocks)",
                            key.str()));
    }
  }
  // Plain loops have no tiles, blocks or chunks to choose: the other keys would be dropped.
  if (config.pipeline == Pipeline::Loops && keys.size() > 1)
    throw bad("pipeline=loops takes no other choices");
  return config;
}

std::string ConfigOverride::str() const {
  std::vector<std::string> items;
  auto add = [&](const char *key, const auto &field, auto text) {
    if (field)
      items.push_back(fmt::format("{}={}", key, text(*field)));
  };
  auto same = [](auto v) { return fmt::format("{}", v); };
  auto bit = [](bool v) { return std::string(v ? "1" : "0"); };
  add("pipeline", pipeline, [](Pipeline p) { return std::string(pipelineName(p)); });
  if (tileM)
    items.push_back(fmt::format("tile={}x{}", *tileM, *tileN));
  add("k-block", blockK, same);
  add("pack", pack, bit);
  add("prefetch", prefetchAhead, same);
  add("key-chunks", keyChunks, same);
  add("query-blocks", queryBlocks, same);
  add("blocks-outside", blocksOutside, bit);
  add("n-group", groupN, same);
  add("ranks", ranksByChoice, [](bool v) { return std::string(v ? "by-choice" : "in-order"); });
  add("k-blocks", kBlocksInTile, [](bool v) { return std::string(v ? "in-tile" : "outside"); });
  return fmt::format("{}", fmt::join(items, ","));
}

ConfigOverride ConfigOverride::overriddenBy(const ConfigOverride &op) const {
  if (op.empty())
    return *this;
  if (empty())
    return op;
  ConfigOverride merged = *this;
  merged.origin = origin + " and " + op.origin;
  auto take = [](auto &field, const auto &from) {
    if (from)
      field = from;
  };
  take(merged.pipeline, op.pipeline);
  take(merged.tileM, op.tileM);
  take(merged.tileN, op.tileN);
  take(merged.blockK, op.blockK);
  take(merged.pack, op.pack);
  take(merged.prefetchAhead, op.prefetchAhead);
  take(merged.groupN, op.groupN);
  take(merged.keyChunks, op.keyChunks);
  take(merged.queryBlocks, op.queryBlocks);
  take(merged.blocksOutside, op.blocksOutside);
  take(merged.ranksByChoice, op.ranksByChoice);
  take(merged.kBlocksInTile, op.kBlocksInTile);
  return merged;
}

namespace {

bool divides(int64_t d, int64_t n) { return d > 0 && n % d == 0; }

/// The largest k block of `least` to `most` steps that splits k into whole blocks, two or more;
/// 0 when there is none, or when `most` steps already take the whole k.
int64_t dividingBlock(int64_t k, int64_t most, int64_t least) {
  for (int64_t block = most; block >= least && block < k; --block)
    if (k % block == 0)
      return block;
  return 0;
}

} // namespace

int64_t groupedVectors(int64_t pairs, int64_t choices, int64_t lanes) {
  return (pairs + (lanes - 1) * std::min(choices, pairs)) / lanes;
}

namespace {

// The L1 data caches of the x86 cores we target (Skylake to Zen 4): 32 KiB in 8 ways, so
// addresses 4 KiB apart share a set.
constexpr int kL1Ways = 8;
constexpr int64_t kL1SetStride = 4096;

// The largest B panel a tile reads from L1 again for every m block (a Xeon's or a Zen 4's L1
// holds 48 or 32 KiB).
constexpr int64_t kL1PanelBytes = 32 << 10;

// Of `mr` rows and the sizes down to two thirds of it, the largest that divides `rows`, or `mr`.
// A leftover tile costs as much to compile as the main one and saves almost nothing at run
// time: attention at S5 compiles 6x4 tiles with their 2x4 leftover in 39 ms and 4x4 tiles in 33,
// and both run in 1.5 ms; S7 runs 21.2-21.5 ms with either; mul_mat_id at S9, 32 tokens,
// compiles 4x4 in 71 ms and 6x4 with its leftover in 85, and runs both in 3.8-4.2 ms.
int rowsDividingTile(int mr, int64_t rows) {
  for (int smaller = mr; smaller * 3 >= mr * 2; --smaller)
    if (rows % smaller == 0)
      return smaller;
  return mr;
}

// Register tiles in order of preference: the most FMAs per load, averaged over the rows (a
// leftover tile takes the rows MR does not divide), that fit the registers. `extra(mr, nr)`
// counts the registers a tile needs beyond its accumulators; a load of the m side costs
// `rowLoadCost` vector loads. NR divides `cols`, unless only NR = 1 does (125 vectors, n =
// 1000) and `columnsLeft` lets the n blocks leave columns over, at most an eighth of them, which
// run after them in a narrower tile (serially, so their FMAs per load count half). More left
// over costs more than the wider tile saves: 128x512 by 512x40 (5 vectors) took 57 µs in 4x3
// tiles and their 2 vectors left over, 53 in 8x1 tiles, on an AVX-512 Xeon with AVX2 code.
void chooseTile(Strategy &s, int64_t rows, int64_t cols, int registers, int maxN,
                const std::function<int(int, int)> &extra, double rowLoadCost = 1.0,
                bool divideRows = true, bool columnsLeft = false) {
  auto perLoad = [&](int64_t mr, int64_t nr) {
    return double(mr * nr) / (rowLoadCost * double(mr) + double(nr));
  };
  // Averaged over the rows, in tiles of NR columns.
  auto perLoadDown = [&](int64_t mr, int64_t nr) {
    int64_t left = rows % mr;
    return (perLoad(mr, nr) * double(rows - left) + perLoad(left, nr) * double(left)) /
           double(rows);
  };
  auto pick = [&](bool anyN) {
    double best = -1;
    for (int nr = 1; nr <= std::min<int64_t>(maxN, cols); ++nr)
      for (int mr = 1; mr <= std::min<int64_t>(8, rows); ++mr) {
        const int64_t left = cols % nr;
        if ((anyN ? left * 8 > cols : left != 0) || mr * nr + extra(mr, nr) > registers)
          continue;
        const double leftOver = left ? 0.5 * perLoadDown(mr, left) * double(left) : 0;
        double score =
            (perLoadDown(mr, nr) * double(cols - left) + leftOver) / double(cols) + 1e-3 * mr * nr;
        if (score > best) {
          best = score;
          s.tileM = mr;
          s.tileN = nr;
        }
      }
  };
  pick(false);
  if (columnsLeft && s.tileN == 1 && cols > 1)
    pick(true);
  if (divideRows)
    s.tileM = rowsDividingTile(s.tileM, rows);
}

int64_t extentOr1(const NestShape &nest, int dim) { return dim < 0 ? 1 : nest.extents[dim]; }

bool isRuntime(const NestShape &nest, int dim) {
  return dim >= 0 && !nest.runtime.empty() && nest.runtime[dim];
}

bool hasRuntimeExtents(const NestShape &nest) {
  return std::find(nest.runtime.begin(), nest.runtime.end(), true) != nest.runtime.end();
}

// A constant n that is no whole number of outer's n blocks: the vectors and then the columns
// left over run as a runtime n's do (tryOuter), after the blocks, so never inside blocks that
// run outside other parallel dims (placeBlocksOutside).
bool columnsLeftOver(const NestShape &nest, const Strategy &s) {
  return s.pipeline == Pipeline::ContractionOuter && s.dimN >= 0 && !isRuntime(nest, s.dimN) &&
         nest.extents[s.dimN] % (int64_t(s.tileN) * s.lanes) != 0;
}

// Runtime extents only along the dims of the gather's choices (the pairs: tokens and slots).
bool runtimeOnlyInPairs(const NestShape &nest) {
  const auto &choices = nest.strides[nest.gather->indexInput];
  for (size_t d = 0; d < nest.runtime.size(); ++d)
    if (nest.runtime[d] && choices[d] == 0)
      return false;
  return true;
}

// Every extent a constant but, perhaps, m's and `dimK`'s and `dimN`'s: what k blocks need (no
// dimK), and packing (a panel of a runtime k is as long as k; a transposed one's n blocks are
// the whole ones of a runtime n).
bool constantBesidesM(const NestShape &nest, int dimM, int dimK = -1, int dimN = -1) {
  for (size_t d = 0; d < nest.runtime.size(); ++d)
    if (nest.runtime[d] && int(d) != dimM && int(d) != dimK && int(d) != dimN)
      return false;
  return true;
}

// The bytes of one row of a B panel: NR vectors.
int64_t panelRowBytes(const NestShape &nest, const Strategy &s) {
  return int64_t(s.tileN) * s.lanes * (nest.elemBits / 8);
}

// Whether the tile's B panel (its k block, or all of k, by NR vectors) is larger than L1, and
// so comes from L2 again for every m block. A runtime k counts as short.
bool panelStreams(const NestShape &nest, const Strategy &s) {
  const int64_t panelK = s.blockK ? s.blockK : s.dimK >= 0 ? extentOr1(nest, s.dimK) : 1;
  const int64_t panelBytes = saturatingMul(panelK, panelRowBytes(nest, s));
  return panelBytes > kL1PanelBytes && !isRuntime(nest, s.dimK);
}

// An outer tile streams its B panel through L1 once per m block. A panel larger than L1 comes
// from L2 each time, and the more rows a tile has, the fewer times, so its rows stay as the
// tile's FMAs per load chose them, with a leftover tile for the rows they do not divide: S7
// (panels of 256 x 64 floats, 64 KiB) runs 14.9-15.4 ms with 6x4 tiles and their 2x4 leftover
// against 15.0-16.1 with 4x4 on the 2-core Xeon (six alternating `frank-jit bench` runs, 6x4
// faster in five), the same on the Zen 4, and compiles in 13-14 ms either way. A panel that fits
// (attention's, k of 128: 32 KiB) stays in L1, and the rows shrink to a size that divides them: the
// leftover tile would cost more than it saves (S5 0.98-0.99 ms with 4x4 against 1.02-1.03 with 6x4
// on the Xeon). On a later Xeon (AMX, 2 MiB L2) 6x4 ran S5 in 0.87-0.91 ms against 0.94-0.98 but
// compiled in 29-33 ms against 22-27; a last m block shifted to end at M instead of the leftover
// tile (its first row a select of the block index) ran 1.03.
void divideRowsUnlessPanelStreams(const NestShape &nest, Strategy &s) {
  if (s.pipeline == Pipeline::ContractionOuter && !panelStreams(nest, s))
    s.tileM = rowsDividingTile(s.tileM, extentOr1(nest, s.dimM));
}

// The parallel dim other than `exclude` with the smallest non-zero output stride.
int nextOutputDim(const NestShape &nest, int exclude, const std::vector<int64_t> &outStrides) {
  int best = -1;
  for (size_t d = 0; d < nest.extents.size(); ++d) {
    if (nest.reduction[d] || int(d) == exclude || outStrides[d] == 0 || nest.extents[d] < 2)
      continue;
    if (best < 0 || outStrides[d] < outStrides[best])
      best = int(d);
  }
  return best;
}

// `columnsLeft`: a constant n may leave columns over after its whole vectors (at least one),
// which then run one lane wide, as those of a runtime n do.
std::optional<Strategy> tryOuter(const NestShape &nest, int lanes, const Target &target,
                                 std::string &why, bool columnsLeft = false,
                                 bool anyTransposed = false) {
  const auto &out = nest.strides.back();
  int n = -1;
  for (size_t d = 0; d < nest.extents.size(); ++d)
    if (!nest.reduction[d] && out[d] == 1)
      n = int(d);
  const char *notWholeVectors =
      "the output is not contiguous along a parallel dim of whole vectors";
  if (n < 0) {
    why = notWholeVectors;
    return std::nullopt;
  }
  bool someBroadcast = false;
  int transposed = -1; // the input read along k instead of n, packed transposed
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    if (nest.strides[i][n] > 1) {
      if (transposed >= 0) {
        why = fmt::format("input #{} is strided along d{}", i, n);
        return std::nullopt;
      }
      transposed = int(i);
    }
    someBroadcast |= nest.strides[i][n] == 0;
  }
  // Packed transposed, a constant n of more than a vector may end its last n block at n
  // (shiftsLastNBlock): attention over 127 keys took 2.73-2.75 ms in dot tiles, 128 keys 1.9.
  const bool lastBlockShifts =
      transposed >= 0 && nest.startsFromFill && !isRuntime(nest, n) && nest.extents[n] > lanes;
  if (!isRuntime(nest, n) && nest.extents[n] % lanes != 0 &&
      !(columnsLeft && nest.extents[n] > lanes) && !lastBlockShifts) {
    why = notWholeVectors;
    return std::nullopt;
  }
  if (!someBroadcast) {
    why = "no input is shared across the output's contiguous dim";
    return std::nullopt;
  }
  Strategy s;
  s.pipeline = Pipeline::ContractionOuter;
  s.lanes = lanes;
  s.dimN = n;
  s.dimM = nextOutputDim(nest, n, out);
  int reductions = 0;
  for (size_t d = 0; d < nest.extents.size(); ++d)
    if (nest.reduction[d]) {
      ++reductions;
      s.dimK = int(d);
    }
  if (reductions != 1)
    s.dimK = -1;
  if (transposed >= 0) {
    // Packed transposed: read along k, never along m (every m block shares the panels).
    const auto &b = nest.strides[transposed];
    if (s.dimK < 0 || b[s.dimK] != 1 || (s.dimM >= 0 && b[s.dimM] != 0) ||
        !constantBesidesM(nest, s.dimM, -1, n)) {
      why = fmt::format("input #{} is strided along d{}", transposed, n);
      return std::nullopt;
    }
    s.packInput = transposed;
    s.packTransposed = true;
  }
  // Accumulators, NR vectors of B and one broadcast element of A. A panel that streams from L2
  // for 4 m blocks or more takes the most FMAs per load: with 16 registers 6x2 (1.5) rather than
  // 2x4 (1.33), S7 on a Zen 3 43.8 against 55.1 ms (one process alternating the kernels, medians
  // of 40 calls). Otherwise the broadcasts count 1.5: they read MR rows of A that are usually a
  // power of two apart, in the same cache sets as a panel that stays in L1 (S5 on the Zen 3,
  // whose Q rows are 16 KiB apart, takes 2x4 so: 3.25 ms against 3.44 with 4x2, the 6x2 that
  // divides its 512 rows), and fewer m blocks would leave B unpacked (7 rows by 4096x4096:
  // 11.7 ms in packed 2x4 tiles against 18.9 in a 6x2 tile and its leftover row).
  // Where only NR = 1 divides a constant n's vectors, NR may leave some over (chooseTile), to
  // run after the n blocks in a narrower tile reading B in place (a transposed B has no vectors
  // to read there): 128x4096 by 4096x1000 (125 vectors) took 12.6 ms in 8x1 tiles on the Zen 3,
  // against 8.6 for 1024 columns.
  // A shifted last block counts as whole, and NR vectors may not be more than n.
  const int64_t rows = extentOr1(nest, s.dimM), columns = nest.extents[n];
  const int64_t vectors = lastBlockShifts ? (columns + lanes - 1) / lanes : columns / lanes;
  const int maxN = lastBlockShifts ? int(std::min<int64_t>(4, columns / lanes)) : 4;
  auto chooseOuterTile = [&](double rowLoadCost) {
    chooseTile(
        s, rows, vectors, target.vectorRegisters, maxN, [](int, int nr) { return nr + 1; },
        rowLoadCost, /*divideRows=*/false,
        /*columnsLeft=*/!isRuntime(nest, n) && transposed < 0);
  };
  chooseOuterTile(1.0);
  if (!panelStreams(nest, s) || rows / s.tileM < 4)
    chooseOuterTile(1.5);
  divideRowsUnlessPanelStreams(nest, s);
  // A shifted last block of one vector wide tiles broadcasts an element of A for every FMA:
  // 128x512 by 40x512 (3 vectors, 8x1) took 39-42 µs, against 21-27 in dot tiles.
  if (lastBlockShifts && columns % lanes != 0 && s.tileN == 1) {
    why = fmt::format("input #{} is read along k, and the vectors of d{} take tiles one vector "
                      "wide (contraction.dot takes it)",
                      transposed, n);
    return std::nullopt;
  }
  // Packing B transposed pays when several m blocks share its panels and k is short, where
  // contraction.dot spends as much on summing its lanes as on the products (S5's Q x K^T, k of
  // 128: 98 against 68 GFLOP/s on one core, as matmul against matmul_transpose_b at 512x128x128).
  // With 32 registers it pays for a long k too: on the Xeon (alternating runs) B transposed at
  // 128x4096x4096 took 26.7-32.7 ms packed against 37.5-45.2 in contraction.dot, and at
  // 32x4096x4096 6.4-9.2 against 8.9-10.2.
  // `anyTransposed` (contraction.dot cannot read the nest) takes any k, and 3 rows or more: by a
  // 4096x4096 B on the Xeon, 7 rows took 48.9 ms in plain loops and 5.9 packed, 3 rows 8.3-9.2
  // and 4.4-5.3, but 2 rows 3.6-4.0 and 4.1-4.3.
  const bool longK =
      nest.extents[s.dimK] > 16 * int64_t(lanes) && target.vectorRegisters < 32 && !anyTransposed;
  const bool fewMBlocks =
      extentOr1(nest, s.dimM) / s.tileM < 4 && !(anyTransposed && extentOr1(nest, s.dimM) >= 3);
  if (s.packTransposed && (fewMBlocks || longK)) {
    why = fmt::format("input #{} is read along k, not d{} (contraction.dot takes it)", s.packInput,
                      n);
    return std::nullopt;
  }
  return s;
}

// dot: B's rows (read along k, one per column n) that are short and far apart, as keys are at
// decode (512 bytes of a head every 4 KiB), give the hardware prefetcher no stream to follow:
// each tile then waits on its rows from L3. Prefetching the rows a few n blocks
// ahead hides that: attention at decode (S6) on a Zen 3 runs 0.134 ms prefetching 2, 4 or 8
// blocks ahead, 0.138 ms at 16 and 0.147 ms without (medians of 15 alternating rounds). The rows'
// first lines are enough (kLinesPerPrefetch in LowerToLoops.cpp); on the Xeon, every line of
// them took the L1 fill buffers the tile needs, and S6 ran slower than without. Long
// rows stream by themselves, and would need a prefetch per line. With more than one m block the
// rows are read again from cache by the next: attention at prefill over a runtime length (S5
// partly specialized, Zen 4) runs 1.62-1.63 ms without the prefetches, 1.68-1.76 with them;
// decode with 8 query heads per KV head (two m blocks) 103.3-104.2 µs without, 104.6-105.1 with.
// `forced` (`prefetch=N`) sets the distance for any nest with such a B, however long or close its
// rows.
int choosePrefetchAhead(const NestShape &nest, const Strategy &s,
                        std::optional<int> forced = std::nullopt) {
  if (s.pipeline != Pipeline::ContractionDot || s.dimN < 0 || isRuntime(nest, s.dimK))
    return 0;
  const int64_t rowBytes = nest.extents[s.dimK] * (nest.elemBits / 8);
  const int64_t blocks = nest.extents[s.dimN] / s.tileN;
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    const auto &strides = nest.strides[i];
    bool isB = strides[s.dimK] == 1 && strides[s.dimN] > 0 && (s.dimM < 0 || strides[s.dimM] == 0);
    if (isB && forced)
      return *forced;
    if (isB && rowBytes <= 1024 && strides[s.dimN] > nest.extents[s.dimK] && blocks >= 16 &&
        extentOr1(nest, s.dimM) <= s.tileM)
      return 4;
  }
  return 0;
}

std::optional<Strategy> tryDot(const NestShape &nest, int lanes, const Target &target,
                               std::string &why) {
  if (!nest.addAccumulates) {
    why = "the body is not a sum of products";
    return std::nullopt;
  }
  const auto &out = nest.strides.back();
  int k = -1;
  for (size_t d = 0; d < nest.extents.size() && k < 0; ++d) {
    if (!nest.reduction[d] || nest.extents[d] % lanes != 0 || isRuntime(nest, int(d)))
      continue;
    // Two operands read along k: a product to block (one alone is a row reduction).
    bool contiguous = true;
    int readers = 0;
    for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
      contiguous &= nest.strides[i][d] <= 1;
      readers += nest.strides[i][d] == 1;
    }
    if (contiguous && readers >= 2)
      k = int(d);
  }
  if (k < 0) {
    why = "no reduction dim of whole vectors along which two inputs are contiguous";
    return std::nullopt;
  }
  Strategy s;
  s.pipeline = Pipeline::ContractionDot;
  s.lanes = lanes;
  s.dimK = k;
  s.dimN = nextOutputDim(nest, -1, out);
  s.dimM = s.dimN < 0 ? -1 : nextOutputDim(nest, s.dimN, out);
  // Accumulators, the loads of the smaller side (the other side is a memory operand) and one
  // register for the FMA's result in flight.
  // Four registers stay free: each accumulator is summed across lanes at the end, so large
  // tiles pay more there than they save in loads when k is short (S5: 4x2 beats 3x4 by 25%).
  const int64_t rows = extentOr1(nest, s.dimM), cols = extentOr1(nest, s.dimN);
  chooseTile(
      s, rows, cols, target.vectorRegisters - 4, 6,
      [](int mr, int nr) { return std::min(mr, nr) + 1; }, 1.0, /*divideRows=*/true,
      /*columnsLeft=*/!isRuntime(nest, s.dimN));
  // A power-of-two NR, if need be leaving columns over: a tile's rows' sums then add up as one
  // transposed tree (LowerToLoops), where other tiles sum each accumulator's lanes apart. At
  // S5's other sizes (alternating runs): 127 keys in 4x4 tiles 2.57-2.78 ms, 4x5 2.87-3.19; 129
  // keys 4x4 2.38-2.52, 6x3 2.87-2.89; 63 keys 4x4 0.74-0.78, 7x3 0.78-0.79.
  if ((s.tileN & (s.tileN - 1)) != 0)
    chooseTile(
        s, rows, cols, target.vectorRegisters - 4, 4,
        [](int mr, int nr) { return (nr & (nr - 1)) == 0 ? std::min(mr, nr) + 1 : 1 << 20; }, 1.0,
        /*divideRows=*/true, /*columnsLeft=*/!isRuntime(nest, s.dimN));
  s.prefetchAhead = choosePrefetchAhead(nest, s);
  return s;
}

// The roles a folded gather's contraction needs (see the header): one reduction dim k, a
// parallel dim m the gathered operand is read along and the choices are not, pairs that are all
// the other parallel dims of extent > 1, and one other tensor input, read along the pairs and k
// only. Sets dimM and dimK; returns the number of pairs, or 0 with `why`.
int64_t gatherRoles(const NestShape &nest, Strategy &s, std::string &why) {
  const NestShape::Gather &gather = *nest.gather;
  if (!nest.addAccumulates) {
    why = "the body is not a sum of products";
    return 0;
  }
  const auto &choices = nest.strides[gather.indexInput];
  for (size_t d = 0; d < nest.extents.size(); ++d) {
    if (nest.reduction[d]) {
      s.dimK = s.dimK == -1 ? int(d) : -2;
    } else if (choices[d] == 0 && gather.strides[d] != 0 && nest.extents[d] >= 2) {
      s.dimM = s.dimM == -1 ? int(d) : -2;
    } else if (choices[d] == 0 && nest.extents[d] >= 2) {
      why = fmt::format("d{} is neither the gathered rows nor a dim of the choices", d);
      return 0;
    }
  }
  if (s.dimK < 0 || s.dimM < 0) {
    why = "it needs one reduction dim and one dim of gathered rows";
    return 0;
  }
  int others = 0;
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    if (int(i) == gather.indexInput || nest.strides[i].empty())
      continue;
    bool tensor = std::any_of(nest.strides[i].begin(), nest.strides[i].end(),
                              [](int64_t x) { return x != 0; });
    if (tensor && nest.strides[i][s.dimM] != 0) {
      why = fmt::format("input #{} is read along the gathered rows", i);
      return 0;
    }
    others += tensor;
  }
  if (others != 1) {
    why = "it needs exactly one input besides the choices and the gathered operand";
    return 0;
  }
  int64_t pairs = 1;
  for (size_t d = 0; d < nest.extents.size(); ++d)
    if (choices[d] != 0)
      pairs = saturatingMul(pairs, nest.extents[d]);
  return pairs;
}

constexpr int64_t kRanksInputBlockBytes = 512 << 10; // a quarter of a 2 MiB L2

// The rows of contraction.choices' tile (4, 2 or 1; 0 when not even one fits): MR rows hold an
// accumulator for every pair and vector of choices, beside a broadcast of each pair's input.
int choicesTileRows(int64_t pairs, int64_t vectorsOfChoices, int64_t rows, const Target &target) {
  const int64_t free = target.vectorRegisters - 2 - pairs;
  for (int mr = 4; mr >= 1; mr /= 2)
    if (mr * vectorsOfChoices * (pairs + 1) <= free && mr <= rows)
      return mr;
  return 0;
}

// Where contraction.choices' tile would hold fewer than 4 rows (6 to 15 pairs of 8 f32 choices
// with AVX-512), one padded rank of contraction.ranks does better with 32 registers: mul_mat_id
// by S9's weights, specialized, two threads, alternating runs: 7 tokens (14 pairs, choices'
// 1x1 tiles) 10.7-14.0 ms against 3.5-3.7 in ranks, 4 tokens (2x1) 4.3-4.5 against 3.1-3.3, 3
// tokens (2x1) 3.7-4.4 against 3.2-3.6; 2 tokens (4x1) 3.4-3.7 either way.
bool ranksPadForChoices(const NestShape &nest, int64_t pairs, int64_t rows, const Target &target) {
  const int64_t choices = nest.gather->choices;
  const int64_t lanes = std::min<int64_t>(choices, target.vectorBits / nest.elemBits);
  // With 16 registers, only where the tile holds one row: the same weights in AVX2 code (on the
  // Xeon), 3 tokens (6 pairs) in 1x1 tiles 6.4-7.0 ms, where 2 tokens in 2x1 tiles took 3.8-4.1
  // and 4 tokens in ranks 3.8-4.1.
  const int64_t fewestRows = std::min<int64_t>(target.vectorRegisters >= 32 ? 4 : 2, rows);
  return choices % lanes == 0 && choicesTileRows(pairs, choices / lanes, rows, target) < fewestRows;
}

// Grouping the pairs by choice: the input is packed by slot once for every m.
std::optional<Strategy> tryGather(const NestShape &nest, int lanes, const Target &target,
                                  std::string &why) {
  const NestShape::Gather &gather = *nest.gather;
  Strategy s;
  s.pipeline = Pipeline::ContractionGather;
  s.lanes = lanes;
  int64_t pairs = gatherRoles(nest, s, why);
  if (pairs == 0)
    return std::nullopt;
  // Fewer pairs than a vector (decode: one token) fill no vector: contraction.choices, or the
  // row reduction, takes them.
  if (pairs < lanes) {
    why = fmt::format("{} pairs fill no vector of {}", pairs, lanes);
    return std::nullopt;
  }
  // Each choice's pairs start a vector of their own: when the choices spread the pairs over
  // fewer than a vector each (S9 at 32 tokens: 64 pairs over 8 experts), narrower vectors keep
  // the lanes full. Two 8-lane FMAs per cycle do the work of one 16-lane one, so with half the
  // lanes idle 16 lanes took twice the time.
  int64_t perChoice = (pairs + gather.choices - 1) / std::max<int64_t>(1, gather.choices);
  while (s.lanes > 8 && s.lanes / 2 >= perChoice)
    s.lanes /= 2;
  // MR accumulators, the packed vector and one broadcast element of the gathered operand.
  chooseTile(s, nest.extents[s.dimM], 1, target.vectorRegisters, 1, [](int, int) { return 2; });
  // Rows of the gathered operand a multiple of 4 KiB apart (the expert-innermost weights: 32 KiB
  // on S9) fall in the same sets of the 8-way L1, so MR rows take MR ways of every set their k
  // block touches, and the packed input and the next block evict them at 7 or 8. S9 at 32
  // tokens: 8 rows 5.1-5.3 ms, 7 rows 4.9-5.0, 6 rows 4.4-4.6, 5 rows 4.8-5.5.
  const int64_t rowBytes = gather.strides[s.dimM] * (nest.elemBits / 8);
  if (rowBytes != 0 && rowBytes % kL1SetStride == 0)
    s.tileM = std::min(s.tileM, kL1Ways - 2);
  // A k block keeps the tile's rows of the gathered operand (MR lines of its choices per k,
  // rows far apart) in 8 KiB of L1 while every vector of slots passes over them: on S9, k-block
  // 32 takes 6.6 ms, 64 takes 7.3 ms, none 15.6 ms.
  int64_t perK = int64_t(s.tileM) * gather.choices * (nest.elemBits / 8);
  s.blockK = dividingBlock(nest.extents[s.dimK], (8 << 10) / std::max<int64_t>(1, perK), 8);
  return s;
}

// contraction.ranks' k block outside the m blocks (see tryRanks): 0 while the packed input
// (its ranks' vectors of slots a k) fits within kRanksInputBlockBytes.
int64_t rankInputBlockK(const NestShape &nest, const Strategy &s) {
  Strategy roles;
  std::string why;
  const int64_t ranks = (gatherRoles(nest, roles, why) + s.lanes - 1) / s.lanes;
  const int64_t k = nest.extents[s.dimK];
  const int64_t steps = s.ranksKSteps(nest.gather->choices);
  const int64_t slotVectors = (ranks + s.tileN - 1) / s.tileN * s.tileN;
  const int64_t perK = slotVectors * s.lanes * (nest.elemBits / 8);
  const int64_t blockBytes =
      hasRuntimeExtents(nest) ? 2 * kRanksInputBlockBytes : kRanksInputBlockBytes;
  if (k * perK <= blockBytes || isRuntime(nest, s.dimK))
    return 0;
  return steps * dividingBlock(k / steps, blockBytes / perK / steps, 8 / steps);
}

// contraction.ranks' k block inside each tile (`k-blocks=in-tile`): the most k that keeps the
// tile's rows (MR rows of C choices a k) within kTileRowsBytes, so that they stay in L1 while
// every rank block of the tile passes over them, rather than coming from L2 again for each
// rank block after the first; 0 when no such block divides k.
constexpr int64_t kTileRowsBytes = 8 << 10;
int64_t tileBlockK(const NestShape &nest, const Strategy &s) {
  const int64_t k = nest.extents[s.dimK];
  const int64_t steps = s.ranksKSteps(nest.gather->choices);
  const int64_t perK = int64_t(s.tileM) * nest.gather->choices * (nest.elemBits / 8);
  return steps * dividingBlock(k / steps, kTileRowsBytes / perK / steps, 8 / steps);
}

// The choices as the lanes, the pairs in order as the slots: for a chosen dim that is one
// whole vector (8 or 16 f32). A step loads MR vectors of the gathered operand (a row's choices,
// contiguous) and NR vectors of the packed input (NR ranks of slots), and permutes each row's
// vector by each rank's choices, for MR x NR FMAs, where contraction.gather's broadcasts cost a
// load per FMA: on S9 at 32 tokens the loads bound it at 1.44 FMAs a cycle.
std::optional<Strategy> tryRanks(const NestShape &nest, int lanes, const Target &target,
                                 bool forced, std::optional<bool> byChoice, std::string &why) {
  const int64_t choices = nest.gather->choices;
  Strategy s;
  s.pipeline = Pipeline::ContractionRanks;
  int64_t pairs = gatherRoles(nest, s, why);
  if (pairs == 0)
    return std::nullopt;
  if (choices > lanes || choices * nest.elemBits < 256) {
    why = fmt::format("a row's {} choices take {} bits, where a vector of them needs 256 bits or "
                      "more and {} lanes at most",
                      choices, choices * nest.elemBits, lanes);
    return std::nullopt;
  }
  if (pairs < lanes && !ranksPadForChoices(nest, pairs, nest.extents[s.dimM], target)) {
    why = fmt::format("{} pairs fill no vector of {}", pairs, lanes);
    return std::nullopt;
  }
  if (isRuntime(nest, s.dimM) || isRuntime(nest, s.dimK)) {
    why = "its rows or its reduction have a runtime extent";
    return std::nullopt;
  }
  // A vector of slots twice the choices wide when the target's vectors are (8 f32 experts on
  // AVX-512) and a row's choices at k and k + 1 are contiguous: one load then holds both, and
  // each step permutes it by the slots' choices for k and by those plus C for k + 1, so that
  // one permute and one FMA serve 2C pairs, and the permutes no longer hold the FMAs back. On
  // the Zen 4 the inner loop (4x4, warm) ran at 117 GFLOP/s a core this way, against 77 with C
  // lanes; the 16-lane permute issues beside the FMA.
  const int64_t k = nest.extents[s.dimK];
  // By choice where a permute per FMA would share the FP pipes with the FMAs (16 vector
  // registers): lane j of a rank is choice j, and the r-th pair of choice c takes slot r x C + c,
  // so that the tiles multiply each row's choices as they are loaded, with no permute, in 3x4
  // tiles. That covers the pairs / C ranks of even routing; the pairs past them in their choice
  // (routing is rarely even) follow in order, in ranks that permute. On the Zen 3, one process
  // alternating, against contraction.gather's broadcasts: S9 at 32 tokens with its ids spread
  // evenly 8.3 ms against 9.5 (warm in L3, 448 rows: 0.82 against 1.12), random ids 10.3
  // against 10.4 (warm 1.14 against 1.23), the MoE block at 32 tokens routed by its
  // router 34.6-34.8 ms against 39.3-40.1. Every pair by choice (as many ranks as the busiest
  // choice has pairs) took random ids 10.8 ms and the MoE block 48.7-49.8. A runtime count of pairs
  // counts its ranks by choice at run time.
  //
  // By choice on a target whose vectors hold twice the choices (8 experts, AVX-512), a vector of
  // slots holds two ranks, lane j being choice j mod C, and each row's choices are loaded
  // repeated to fill it (one vbroadcastf64x4): 16-lane FMAs with no permute. S9's weights at 32
  // tokens (ids spread evenly) on the Xeon, forced by choice, one process alternating: 96 rows
  // (3 MiB) 166-176 µs against 221-229 with 8-lane ranks, 384 rows 489-503 against 624-682.
  // Ranks in order, which read the pairs in place where by choice packs them first, took
  // 106-111 and 452-460 in another round, and stay the default: past L2 the Xeon's L3 reads no
  // faster than its DRAM, which bounds both (S9 cold at 32 tokens by choice 5.8-6.4 ms against
  // 5.8-6.0, the MoE block 19.4-20.7 against 17.1-19.2).
  s.ranksByChoice = byChoice.value_or(target.vectorRegisters < 32);
  const bool wide = lanes == 2 * choices;
  const bool twoSteps =
      !s.ranksByChoice && wide && k % 2 == 0 && nest.gather->strides[s.dimK] == choices;
  s.lanes = int(twoSteps || (s.ranksByChoice && wide) ? 2 * choices : choices);
  // With 16 vector registers the tile is 4x2 and its permutes, one per FMA, share the FP pipes
  // with the FMAs: unless grouping the pairs by choice pads them to twice the ranks' vectors or
  // more, contraction.gather's broadcasts do the same work sooner (S9 on Zen 3, ids spread
  // evenly: 32 tokens 9.0 ms against 13.2, the down projection 9.9 against 15.0, 128 tokens 23
  // against 41; at 8 tokens, padded 4x, this pipeline's 6.3 against 7.6).
  const int64_t ranks = (pairs + s.lanes - 1) / s.lanes;
  const int64_t grouped =
      groupedVectors(pairs, choices, std::max(1, target.vectorBits / nest.elemBits));
  if (target.vectorRegisters < 32 && !forced && !s.ranksByChoice && grouped < 2 * ranks) {
    why = fmt::format("{} pairs group by choice into {} vectors, fewer than twice their {} "
                      "ranks: contraction.gather takes them",
                      pairs, grouped, ranks);
    return std::nullopt;
  }
  // NR and MR: the tile of most FMAs the registers hold beside each row's choices at every k of
  // a step (MR x steps vectors, read by every vector of slots), one vector of slots' choices to
  // permute by with its inputs (one per k) and a permuted copy, with NR at most the ranks and
  // 4 (on S9 at 32 tokens, 4x4 took 3.7-3.9 ms, 4x2 4.8-4.9, 8x2 4.4) and MR at most
  // kL1Ways - 2: the rows stream side by side, and when they are a multiple of 4 KiB apart their
  // lines share a set of the L1 (7x4: 4.4-4.5 ms).
  const int64_t rows = nest.extents[s.dimM];
  // Of the tiles, the one of most FMAs a step that go to slots of pairs, not to the padding that
  // rounds the ranks up to whole tiles, and a quarter fewer for a tile that pads: the padded
  // slots cannot be where the pairs are, and packing them and reading their sums back cost the
  // MoE block at 32 tokens 0.5 ms (of 12) where it had tiles in place. With two k steps, 4x4
  // fits since each k's choices are a vector of their own, permuted by the same indices; when the
  // second k took its own indices (the first's plus C), its 8 vectors of indices spilled (the MoE
  // block at 32 tokens 15.1-15.3 ms or 11.2-11.7 depending on where the stack was, 4x2
  // 10.5-12.2).
  const int steps = int(s.ranksKSteps(choices));
  // A runtime count of pairs pads its last rank block, up to NR - 1 vectors: partly
  // specialized on the Xeon, mul_mat_id in 4x4 tiles took 5.3 ms at 8 to 32 tokens, 7.7 at 48
  // and 64 and 12.6 at 128, where 4x2 tiles, which pad less, took 4.8-5.0 at 8 and 16, 6.3-6.4
  // at 24 and 32, 7.6 at 48, 8.8 at 64 and 13.6 at 128 (the MoE block at 32 tokens: 16.4-16.7
  // ms against 19.4).
  //
  // By choice, a tile needs no vector of indices and no permuted copy: MR x NR accumulators, MR
  // rows' choices and one vector of slots' inputs. With 16 registers that is 3x4, with a
  // leftover tile where 3 does not divide the rows, as at S9 (3584 rows), which at 32 tokens
  // took 0.79-0.82 ms against 1.11 for 3x3, 1.18 for 4x3 and 0.92 for 2x4 (448 rows, warm; cold
  // at 3584 rows 8.2 ms, 2x4 8.8).
  const int spare = s.ranksByChoice ? 1 : steps + 2;
  const int perRow = s.ranksByChoice ? 1 : steps;
  int64_t most = 0;
  for (int nr = 1; nr <= std::min<int64_t>(ranks, 4); ++nr) {
    const int fits = int(std::min<int64_t>(
        std::clamp((target.vectorRegisters - spare) / (nr + perRow), 1, kL1Ways - 2), rows));
    const int mr = s.ranksByChoice ? fits : rowsDividingTile(fits, rows);
    const int64_t paddedRanks = (ranks + nr - 1) / nr * nr;
    const int64_t useful =
        int64_t(mr) * nr * ranks * 1000 / paddedRanks * (paddedRanks == ranks ? 4 : 3) / 4;
    if (useful > most) {
      most = useful;
      s.tileM = mr;
      s.tileN = nr;
    }
  }
  // Every m block reads the whole packed input (k x ranks x C), which must stay in L2 beside
  // the weights streaming through it. k blocks that divide k keep a block of it within a
  // quarter of L2, and the m blocks then run once per k block. On the Xeon (2 MiB of L2) with
  // 4x4 tiles, at 32 tokens (256 bytes a k), two rounds: the down projection (k = 3584) took
  // 4.4-4.5 ms in blocks of 1792, 4.7-4.8 in 896, 5.2 in 448 and 4.9-5.0 whole; gate (k = 1024)
  // 4.2 ms whole and 5.0 in blocks of 512; the MoE block 13.0-13.1 ms against 13.2-13.6 with
  // blocks of half the size. Two k steps at a time take blocks of an even size.
  //
  // A runtime count of pairs is counted as kNominalExtent tokens' (512 pairs at two a token),
  // more than most calls bring, and the block may take half of L2 at that count. Partly
  // specialized on the Xeon, mul_mat_id took 22.5-22.6 ms at 256 tokens in blocks of 256 or
  // 512 (37.4 whole), and at 32 tokens 3.9 ms in blocks of 256 against 3.4 in 512.
  s.blockK = rankInputBlockK(nest, s);
  // By choice, with rows read in runs of a page or more (shorter ones take prefetchNextRows,
  // LowerToLoops), the k blocks are the tile's own instead: each rank block after the first,
  // by choice or permuted, then reads the tile's rows from L1, not L2. With even routing and
  // one rank block that is one pass, as fast either way (S9 at 16 tokens 3.37-3.45 ms against
  // 3.41-3.48); routed at random, the permuted ranks follow (16 tokens 3.9-7.4 ms against
  // 5.2-8.0, 8 tokens 3.9-4.3 against 5.0-5.5, in-tile faster in each round). On the Zen 3, one
  // process alternating the kernels (three rounds of 12 medians each): S9 at 32 tokens with its
  // ids spread evenly 5.02-5.35 ms against 5.51-5.79 (blocks of 32 or 128 within 1% of 64, 256
  // 4-5% slower), random ids 7.54-7.93 against 8.02-8.32, the down projection's shape (k 3584,
  // in place of its k blocks of 1792 outside) 5.53-5.91 against 6.15-6.65, the MoE block at 32
  // tokens 22.7-23.7 against 23.6-25.1. Ranks in order (AVX-512's) were not measured so.
  const int64_t rowRunBytes = k * nest.gather->strides[s.dimK] * (nest.elemBits / 8);
  if (s.ranksByChoice && rowRunBytes >= kPageBytes) {
    if (const int64_t block = tileBlockK(nest, s)) {
      s.blockK = block;
      s.kBlocksInTile = true;
    }
  }
  return s;
}

// Every choice of a row at once, the choices being the lanes: for few pairs (fewer than a
// vector, unless `forced`) and a chosen dim that is a whole number of vectors of 4 lanes or more
// (at most 4 vectors). A tile is MR rows x every pair: MR x pairs x vectors accumulators, MR x
// vectors loads of A and one broadcast element of the input per pair.
std::optional<Strategy> tryChoices(const NestShape &nest, int lanes, const Target &target,
                                   bool forced, std::string &why) {
  const int64_t choices = nest.gather->choices;
  Strategy s;
  s.pipeline = Pipeline::ContractionChoices;
  int64_t pairs = gatherRoles(nest, s, why);
  if (pairs == 0)
    return std::nullopt;
  s.lanes = int(std::min<int64_t>(choices, lanes));
  s.tileN = int(choices / s.lanes);
  if (choices % s.lanes != 0 || s.lanes < 4 || s.tileN > 4) {
    why = fmt::format("{} choices are not 1 to 4 vectors of {} lanes", choices, s.lanes);
    return std::nullopt;
  }
  if (pairs >= lanes && !forced) {
    why = fmt::format("{} pairs fill vectors of {}: contraction.gather takes them", pairs, lanes);
    return std::nullopt;
  }
  if (!forced && ranksPadForChoices(nest, pairs, nest.extents[s.dimM], target)) {
    why = fmt::format("{} pairs leave room for tiles of fewer than 4 rows: contraction.ranks "
                      "takes them",
                      pairs);
    return std::nullopt;
  }
  s.tileM = choicesTileRows(pairs, s.tileN, nest.extents[s.dimM], target);
  if (s.tileM == 0) {
    why = fmt::format("{} pairs x {} vectors of accumulators do not fit the registers", pairs,
                      s.tileN);
    return std::nullopt;
  }
  return s;
}

// The most output rows contraction.stream takes: an accumulator each, 3/8 of the registers (12
// with AVX-512, 6 with AVX2). A few rows (a matmul of a handful of tokens) read B as one row
// does, once and in order, each vector of B added to every row; outer's tiles read B down its
// columns, a panel per n block, and with one m block pack nothing. Matmuls by 4096x4096 on the
// 2-core Xeon, specialized, B warm (`frank-jit bench`, medians of 5), outer then stream: 2 rows
// 1.36-1.38 -> 1.17 ms, 4 rows 1.63-1.73 -> 1.22-1.28, 8 rows 3.64 -> 1.52-1.58, 9 rows 3.23 ->
// 1.75, 10 rows 3.29 -> 1.99, 12 rows (outer packing B in k blocks) 2.68 -> 2.51; from 14 rows the
// stream's loads of its accumulators and broadcasts pass the tiles' (3.00 against 3.15 ms; 16
// rows 3.06 against 3.64). AVX2's limit is the same share of its registers, not timed.
int64_t maxStreamRows(const Target &target) { return target.vectorRegisters * 3 / 8; }

// Several rows stream B only when it is this large: a smaller B stays in cache for the tiles,
// which keep their accumulators in registers (8 rows by 512x512, 1 MiB: 26.3 us streamed
// against 25.6 in tiles; by 256x256 8.1 against 8.0; by 1024x1024 86 against 95), and the MoE
// block's router (8 rows by 1024x32) in tiles compiles in 25 ms rather than 33.
constexpr int64_t kMinStreamedBytes = 1 << 20;

// Up to maxStreamRows rows of output (m), several of them with a B of kMinStreamedBytes or more,
// and one reduction dim: stream B by rows. The parts split k for the threads, or N in long runs
// where k cannot split (two: each reads half of every row of B, 8 KiB at S8); each step adds 4
// rows of B, or 8 (below), to every output row.
// `columnsLeft` as for tryOuter: only where the parts split k, each then adding its rows to the
// columns left over one lane wide after its vectors.
std::optional<Strategy> tryStream(const NestShape &nest, int lanes, const Target &target,
                                  std::string &why, bool columnsLeft = false) {
  // Any B read along k is refused below, with the stream's own reason.
  std::optional<Strategy> outer =
      tryOuter(nest, lanes, target, why, columnsLeft, /*anyTransposed=*/true);
  if (!outer)
    return std::nullopt;
  if (outer->dimK < 0) {
    why = "it has no reduction dim to stream B along";
    return std::nullopt;
  }
  if (outer->packTransposed) {
    why = fmt::format("input #{} is read along k, and the stream reads B's rows along d{}",
                      outer->packInput, outer->dimN);
    return std::nullopt;
  }
  const int64_t rows = extentOr1(nest, outer->dimM);
  const int64_t bBytes = nest.extents[outer->dimK] * nest.extents[outer->dimN] * nest.elemBits / 8;
  if (rows > maxStreamRows(target)) {
    why = fmt::format("it has {} rows of output, more than the {} it streams B for", rows,
                      maxStreamRows(target));
    return std::nullopt;
  }
  if (rows > 1 && bBytes < kMinStreamedBytes) {
    why = fmt::format("its B of {} bytes is too small to stream for {} rows (from {} bytes)",
                      bBytes, rows, kMinStreamedBytes);
    return std::nullopt;
  }
  for (size_t d = 0; d < nest.extents.size(); ++d)
    if (int(d) != outer->dimN && int(d) != outer->dimK && int(d) != outer->dimM &&
        nest.extents[d] != 1) {
      why = fmt::format("it has a parallel dim besides the rows and columns (d{})", d);
      return std::nullopt;
    }
  Strategy s = *outer;
  s.pipeline = Pipeline::ContractionStream;
  if (extentOr1(nest, s.dimM) == 1)
    s.dimM = -1;
  int64_t vectors = nest.extents[s.dimN] / lanes;
  // Where a vector is a whole cache line (f32 in 512 bits), 8 rows a step, and each load of a
  // row prefetches the same line of the row a step ahead: with rows 16 KiB apart the hardware
  // prefetcher alone does not reach the rate of one plain stream. S8 on a Zen 4, in one
  // process alternating with a plain two-thread read of the same pages (medians of 15, three
  // processes): 4 rows 1321-1478 us, 8 rows 1233-1344, 4 rows prefetching 1203-1252, 8 rows
  // prefetching 1048-1125, the plain read 1110-1215. Pages that read at 35 GB/s rather than 60
  // run them all alike, in about 1.85 ms.
  const bool lineVectors = int64_t(lanes) * nest.elemBits >= 512;
  s.tileM = int(std::min<int64_t>(lineVectors ? 8 : 4, nest.extents[s.dimK]));
  s.prefetchAhead = lineVectors ? 1 : 0;
  s.tileN = vectors % 2 == 0 ? 2 : 1;
  // A sum of products can split k instead: each part then reads whole rows of B, one
  // contiguous half of it, into a partial output of its own (S8: 1.8-2.0 ms against 2.0-2.3 ms
  // for halves of every row), and the parts' sums are added at the end. An odd k splits too
  // where N does not (columns past the vectors, or an odd number of them), the first part
  // taking the last row after the halves: 8 rows by 4095x4095 had taken outer's tiles, 15.4 ms
  // on one thread against 4.2 for 4096x4096.
  const int64_t k = nest.extents[s.dimK];
  if (nest.addAccumulates &&
      (k % 2 == 0 || (k >= 2 && (s.tileN == 1 || nest.extents[s.dimN] % lanes != 0)))) {
    s.splitK = true;
    s.tileN = 2;
  }
  if (!s.splitK && nest.extents[s.dimN] % lanes != 0) {
    why = fmt::format("its {} columns are not whole {}-lane vectors, and k does not split in two",
                      nest.extents[s.dimN], lanes);
    return std::nullopt;
  }
  return s;
}

// The most bytes of a B panel (k-block x NR vectors) that stay in cache for the m blocks: 64 KiB
// in L2 for tiles of 4 rows or more, 32 KiB in L1 for fewer (see chooseBlockK).
int64_t panelBudget(const Strategy &s) { return s.tileM >= 4 ? 64 << 10 : 32 << 10; }

// An outer-product nest with one reduction dim whose B panels serve at least 4 m blocks, or 2
// when B is too large for one panel: the cases that k blocks and packing pay for. With 2x4 tiles
// on a Zen 3 (medians of 9 alternating rounds), packing a 4096x1024 B whole ran m = 4 and 6 as
// fast as reading it in place (2 and 3 blocks: 2.03 against 2.04 ms, 2.67 against 2.61) and m = 8
// faster (2.22 against 2.87 ms); attention at decode (S6, 2 blocks of 2 query rows per KV head, a
// panel of its V per chunk of keys) runs 0.147 ms without packing V and 0.169 ms packing it. In k
// blocks, each packed between the previous one's tiles (LowerToLoops), 2 m blocks pay: matmuls
// by 4096x4096 on the 2-core Xeon with 6x4 tiles, B warm, 12 rows 3.71 -> 2.71 ms, 16 rows 5.86
// -> 3.06, 20 rows 3.34 (`frank-jit bench`, medians of 5). Not when B fits in L2, where the
// second m block finds it: attention at decode on a Zen 3 (S6; P·V's V 128 KiB per head and
// chunk of keys, 2 m blocks of 2x4 tiles) ran 167-184 µs packing V in k blocks of 128 and
// 143-144 without, V read in place (three alternating rounds of `frank-jit bench`).
constexpr int64_t kTwoBlocksPackBytes = 512 << 10;
// The most a kernel's packed panels may take, over all their regions.
constexpr int64_t kMaxPackBytes = 8 << 20;
bool reusesPanels(const NestShape &nest, const Strategy &s) {
  if (s.pipeline != Pipeline::ContractionOuter || s.dimK < 0 ||
      !constantBesidesM(nest, s.dimM, s.dimK))
    return false;
  const int64_t mBlocks = extentOr1(nest, s.dimM) / s.tileM;
  const int64_t bBytes =
      saturatingMul(saturatingMul(nest.extents[s.dimK], nest.extents[s.dimN]), nest.elemBits / 8);
  return mBlocks >= 4 ||
         (mBlocks >= 2 && nest.extents[s.dimK] * panelRowBytes(nest, s) > panelBudget(s) &&
          bBytes > kTwoBlocksPackBytes);
}

// Whether the outer tile's B, read in place, has rows (its steps along k) a multiple of 4 KiB
// apart, more of them than L1 has ways: they all share L1 sets, so however small the panel it
// does not stay in L1 for the next m block.
bool panelRowsShareL1Sets(const NestShape &nest, const Strategy &s) {
  if (s.pipeline != Pipeline::ContractionOuter || s.packInput >= 0 || s.dimK < 0 ||
      nest.extents[s.dimK] <= kL1Ways)
    return false;
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    const auto &b = nest.strides[i];
    if (b[s.dimN] == 1 && b[s.dimK] > 0 && (s.dimM < 0 || b[s.dimM] == 0))
      return b[s.dimK] * (nest.elemBits / 8) % kL1SetStride == 0;
  }
  return false;
}

// The largest k block that divides k and keeps the B panel (k-block x NR vectors) within
// Target::blockKPanelBytes (64 KiB; 32 for tiles of fewer than 4 rows), when there are several m
// blocks to reuse it. Every k block loads and stores the C tile once more, so a panel in L2
// beats one in L1: S7 (k 4096) runs 25.2 ms with k blocks of 256 against 26.5 ms with 64
// (16 KiB, medians of six alternating runs on a Zen 4, 4x4 tiles);
// attention's k of 128 fits whole either way (2.2-2.3 ms both).
// A tile of fewer than 4 rows feeds each B vector to fewer than 4 FMAs, so it reads its panel
// faster than L2 refills L1 (a 2x4 AVX2 tile at peak: 32 bytes a cycle, a Zen 3's whole L2
// bandwidth), and its panel stays within L1: S7 forced to 2x4 tiles on a Zen 3 runs 47.8 ms with
// 32 KiB panels against 55.1 with 16 KiB (two threads, one process alternating the kernels,
// medians of 40 calls; on one thread, in separate processes, 64 KiB had been slowest).
// Every n block reads A's k block for all of m again, so that slice of A stays within
// Target::blockKSliceBytes, a quarter of a Zen 3's L2, beside the panels (a runtime m counts as its
// nominal extent): S7 with 6x2 tiles on the Zen 3 runs 43.8 ms with k blocks of 256 (A's slice 128
// KiB), 45.9 with 512 and 84.2 with 1024 (512 KiB, all of L2), alternating as above.
int64_t chooseBlockK(const NestShape &nest, const Strategy &s, const Target &target) {
  if (!reusesPanels(nest, s) || isRuntime(nest, s.dimK))
    return 0;
  const int64_t panelRow = panelRowBytes(nest, s);
  const int64_t k = nest.extents[s.dimK];
  int64_t most = (s.tileM >= 4 ? target.blockKPanelBytes : panelBudget(s)) / panelRow;
  if (k <= most)
    return 0;
  const int64_t aRowBytes = saturatingMul(extentOr1(nest, s.dimM), nest.elemBits / 8);
  return dividingBlock(k, std::min(most, target.blockKSliceBytes / aRowBytes), 16);
}

// Where B is read in place from beyond L1 (rows that share L1 sets) and one tile of two vectors
// or more can take every row of m, it does, with as many vectors as then fit: each m block would
// read all of B again from L2 or L3. Any k blocks, chosen for those m blocks, go with them. (A
// tile of one vector, 7 or 8 rows with AVX2, would spend a broadcast on every FMA.) Attention at
// decode on AVX2 (P·V: 4 query rows per KV head, V's key rows 4 KiB apart) took 2x4 tiles, two m
// blocks, for their fewer loads a step (6 for 8 FMAs, as 4x2); in 4x2 tiles, one m block, its keys
// also run in blocks outside the heads (placeBlocksOutside): S6 on the Zen 3 113-124 µs against
// 131-139 (one process alternating both, medians of 500 calls, three rounds). Over a runtime key
// count (the tile alone, no blocks outside) 128-176 µs against 132-196 at 512 keys: the machine's
// noise, no loss.
void takeAllRowsWhereBLeavesL1(const NestShape &nest, Strategy &s, const Target &target) {
  const int64_t rows = extentOr1(nest, s.dimM);
  if (!panelRowsShareL1Sets(nest, s) || isRuntime(nest, s.dimM) || rows <= s.tileM || rows > 8)
    return;
  const int64_t vectors = nest.extents[s.dimN] / s.lanes;
  for (int nr = 4; nr >= 2; --nr)
    if (vectors % nr == 0 && rows * nr + nr + 1 <= target.vectorRegisters) {
      s.tileM = int(rows);
      s.tileN = nr;
      s.blockK = chooseBlockK(nest, s, target); // none: k blocks serve several m blocks
      return;
    }
}

// The input to pack: the one operand read along both n and k (B), when it is not read along m
// or another reduction, several m blocks reuse each panel, and its panels are not contiguous
// already. Attention's P x V packs V per head: its rows are 4 KiB apart in [S, Hkv, D].
// Where none is, `whyNot` (if given) says why, for the error of a `pack=1` that does not fit.
int choosePackInput(const NestShape &nest, const Strategy &s, std::string *whyNot = nullptr) {
  auto none = [&](std::string why) {
    if (whyNot)
      *whyNot = std::move(why);
    return -1;
  };
  if (!reusesPanels(nest, s)) {
    if (s.pipeline != Pipeline::ContractionOuter || s.dimK < 0)
      return none("it is not a contraction.outer nest");
    if (!constantBesidesM(nest, s.dimM, s.dimK))
      return none("its extents besides m are runtime values");
    const int64_t mBlocks = extentOr1(nest, s.dimM) / std::max(1, s.tileM);
    return none(fmt::format("too few m blocks read each panel ({} m block{} of {} row{})", mBlocks,
                            mBlocks == 1 ? "" : "s", s.tileM, s.tileM == 1 ? "" : "s"));
  }
  // The regions, one per iteration of the other parallel dims (of the chunks of whichever loop
  // runs in parallel, at most as many): at most kMaxPackBytes.
  int64_t regions = 1;
  for (size_t d = 0; d < nest.extents.size(); ++d)
    if (!nest.reduction[d] && int(d) != s.dimM && int(d) != s.dimN)
      regions = saturatingMul(regions, nest.extents[d]);
  int64_t panelK = s.blockK ? s.blockK : nest.extents[s.dimK];
  const int64_t packBytes = saturatingMul(saturatingMul(regions, panelK),
                                          saturatingMul(nest.extents[s.dimN], nest.elemBits / 8));
  if (packBytes > kMaxPackBytes)
    return none(fmt::format("its panels of {} rows would take {} MiB, over the {} MiB a pack "
                            "may use (a smaller k-block takes fewer)",
                            panelK, (packBytes + (1 << 20) - 1) >> 20, kMaxPackBytes >> 20));
  int found = -1;
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    const auto &strides = nest.strides[i];
    if (strides[s.dimN] != 1 || strides[s.dimK] == 0)
      continue;
    // B: read along n and k, and perhaps the other parallel dims, never along m.
    for (size_t d = 0; d < strides.size(); ++d)
      if (strides[d] != 0 && int(d) != s.dimN && int(d) != s.dimK &&
          (nest.reduction[d] || int(d) == s.dimM))
        return none("its input read along n and k is read along other dims too");
    if (found >= 0)
      return none("two of its inputs are read along n and k");
    if (strides[s.dimK] <= int64_t(s.tileN) * s.lanes)
      return none("its panels are contiguous already");
    found = int(i);
  }
  return found >= 0 ? found : none("no input is read along n and k alone");
}

// The parallel dims outside the tile along which `b` (an input's strides) is read more closely
// than along `along`: the innermost of them, and those just outside it.
std::vector<int> dimsReadCloser(const NestShape &nest, const Strategy &s,
                                const std::vector<int64_t> &b, int along) {
  std::vector<int> dims;
  for (int d = int(nest.extents.size()) - 1; d >= 0; --d) {
    if (nest.reduction[size_t(d)] || d == s.dimM || d == s.dimN)
      continue;
    if (isRuntime(nest, d) || b[size_t(d)] == 0 || b[size_t(d)] >= b[size_t(along)])
      break;
    dims.insert(dims.begin(), d);
  }
  return dims;
}

// The tile's blocks run outside the parallel dims along which B, the input read along n and k,
// is read more closely than along its blocks' dim (dot: n; outer: k), so that B is read in
// address order. At decode K and V are [keys, KV heads, head dim]: a loop over the heads
// outside the blocks reads 512 bytes of every 4 KiB key row (P·V: 256 bytes, for each half of
// the head dim), a page each, which leaves the hardware prefetcher no stream to follow while
// the tiles compute. So Q·Kᵀ's n blocks (4 keys) go outside the heads, and P·V's reduction over
// the keys is cut into blocks of kKeysOutside keys, each block running over every head (the
// accumulators are stored and loaded again between blocks): each reads whole rows of K and V.
// S6 on the Xeon, one process alternating both orders: Q·Kᵀ 59.3 -> 52.7 and 61.2 -> 55.1 µs,
// then P·V 53.0-57.1 -> 49.7-55.9 in four runs (blocks of 8 and 16 keys did the same, 32 a
// little less, 64 nothing); its keys in one piece (`key-chunks=1`) Q·Kᵀ 74.3 -> 62.5.
// The cost: a temporary of every head's scores (32 KiB a chunk at S6), formed before any head's
// softmax, instead of one head's, and, when the keys are not split, a parallel loop of Q·Kᵀ's
// own (over the n blocks, then the heads for the rest), whose fork and join cost more than the
// order saves while B is small: decode with keys in one piece, 128 keys (K 512 KiB) 9.7 -> 10.9
// µs, 160 15.4 -> 15.2, 192 18.5 -> 16.8, 256 29.0 -> 21.2, 384 53.2 -> 40.7; so only for a
// B of more than kBlocksOutsideBytes, a runtime extent counting as kNominalExtent (decode over a
// runtime key count, where Q·Kᵀ's columns left over run in a loop of their own over the heads:
// 512 keys 77.1 -> 61.3 µs, 1000 keys 173 -> 130, but 100 keys 9.2 -> 10.5). Only for one m
// block of a constant m (more would each meet B's blocks in turn; not measured), constant dims
// outside, B read in place, and, for outer, constant extents but m's (its k blocks) and a
// parallel dim of two or more outside the k blocks, which never run on the threads.
// `blocks-outside=` turns it off, or on for any number of m blocks.
constexpr int64_t kKeysOutside = 16;
constexpr int64_t kBlocksOutsideBytes = 512 << 10;
void placeBlocksOutside(const NestShape &nest, Strategy &s, const ConfigOverride &config) {
  const bool dot = s.pipeline == Pipeline::ContractionDot;
  if ((!dot && s.pipeline != Pipeline::ContractionOuter) || s.dimN < 0 || s.dimK < 0 ||
      isRuntime(nest, s.dimM) || (!dot && !constantBesidesM(nest, s.dimM)) || s.packInput >= 0 ||
      columnsLeftOver(nest, s) ||
      !config.blocksOutside.value_or(extentOr1(nest, s.dimM) <= s.tileM))
    return;
  for (size_t i = 0; i + 1 < nest.strides.size(); ++i) {
    const auto &b = nest.strides[i];
    const int along = dot ? s.dimN : s.dimK;
    if ((dot ? b[s.dimK] != 1 : b[s.dimN] != 1) || b[along] == 0 || (s.dimM >= 0 && b[s.dimM] != 0))
      continue;
    int64_t bytes = nest.elemBits / 8;
    for (size_t d = 0; d < b.size(); ++d)
      bytes = b[d] ? saturatingMul(bytes, nest.extents[d]) : bytes;
    if (bytes <= kBlocksOutsideBytes)
      return;
    std::vector<int> dims = dimsReadCloser(nest, s, b, along);
    if (dims.empty() || dot) {
      s.blocksOutside = dims;
      return;
    }
    bool parallelOutside = false;
    for (int d = 0; d < dims.front(); ++d)
      parallelOutside |= !nest.reduction[size_t(d)] && nest.extents[size_t(d)] >= 2;
    const int64_t k = nest.extents[s.dimK];
    if (parallelOutside && !s.blockK && !config.blockK && k > kKeysOutside && k % kKeysOutside == 0)
      s.blockK = kKeysOutside;
    if (parallelOutside && s.blockK)
      s.blocksOutside = dims;
    return;
  }
}

// An override that does not fit the nest, named by where it was set.
[[noreturn]] void unfit(const ConfigOverride &config, const std::string &what) {
  throw Error(fmt::format("error: {}: {}", config.origin, what));
}

// The most of each of B's k rows that a group of n blocks reads in one run (groupNBlocks).
constexpr int64_t kGroupRowBytes = 2048;

// With k blocks and B packed, the loop over the n blocks runs outside the k blocks, so every
// n block walks all of A, k block by k block: S7's A is 2 MiB, as large as a core's L2, and
// each n block read it again from L3. In groups of n blocks with the k blocks outside the
// group's n blocks (n_group, then (k block, n block) pairs, the packing of the next pair's
// panel interleaved with the tiles as before), a k block of A (S7: 128 x 256 floats, 128 KiB)
// serves the group's n blocks from L2, while the output's tiles are loaded and stored once per
// k block instead of once per n block. S7 on the 2-core Xeon, `n-group=0` and groups of 8
// alternating (`frank-jit bench`, medians of 5, ten rounds): 13.49 -> 13.26 ms on average, faster
// in every round; groups of 2 to 32 within the noise of 8. (A hand-written kernel gained 9-12%
// from the order, but its own n-block order ran slower than the compiled one.) A group reads
// each k row of B from DRAM in a run of its columns: on the Zen 3 (AVX2, so n blocks of 16
// columns; 512 KiB of L2), groups of 8 (runs of 512 bytes) took 0.996-1.051x the time of groups
// of 32 (runs of 2 KiB) on S7, 1.03x on average, in five rounds of `frank-jit bench --versus`
// (the two kernels' repetitions interleaved, medians of 20), where the same kernel on both
// sides read 0.950-1.016x, 0.99x on average; 1.035x at 512 rows and 1.034-1.037x at 7 and 16
// rows (one round each). 64 (4 KiB, four groups) took 0.95x of 32 at 128 rows but 1.08x at 512.
// At n = 1024 (64 n blocks), four groups of 16 took 0.94x the time of eight of 8, and two of 32
// 1.0x. The group: the largest of 32, 16, 8, 4 and 2 n blocks that spans at most
// kGroupRowBytes of B's rows and leaves two groups or more for the threads, four or more past
// 8 n blocks (with AVX-512's n blocks of 64 columns, 8 of which span 2 KiB, the choice before).
// Only for the k blocks whose next panel is packed between the tiles: two m blocks or more, a
// runtime m counted at its nominal extent (the rows its fewer m blocks leave unpacked are
// packed after them). A partly specialized S7 (M a runtime value) ran 13.2-13.8 -> 12.2-13.3
// ms with groups, 32 rows 5.4-5.6 -> 4.7-5.0 ms, 8 rows 3.38-3.41 -> 2.69-2.71 ms, 512 rows the
// same.
// Why groups of n blocks do not fit `s` (empty: they do).
std::string whyNoGroups(const NestShape &nest, const Strategy &s) {
  if (s.pipeline != Pipeline::ContractionOuter)
    return fmt::format("groups need contraction.outer, not {}", pipelineName(s.pipeline));
  if (s.packInput < 0 || s.packTransposed)
    return "groups need a packed B";
  if (!s.blockK || nest.extents[s.dimK] / s.blockK < 2)
    return fmt::format("groups need two k blocks or more, and k-block {} leaves {}", s.blockK,
                       s.blockK ? nest.extents[s.dimK] / s.blockK : 1);
  if (!s.blocksOutside.empty())
    return "groups do not take blocks outside the parallel dims";
  if (s.dimM < 0 || nest.extents[s.dimM] / s.tileM < 2)
    return "groups need two m blocks or more";
  return "";
}

void groupNBlocks(const NestShape &nest, Strategy &s, const ConfigOverride &config) {
  const std::string whyNot = whyNoGroups(nest, s);
  const bool fits = whyNot.empty();
  const int64_t nBlocks = s.pipeline == Pipeline::ContractionOuter && s.dimN >= 0
                              ? nest.extents[s.dimN] / (int64_t(s.tileN) * s.lanes)
                              : 0;
  if (config.groupN) {
    if (*config.groupN && !fits)
      unfit(config, fmt::format("n-group={} does not apply: {}", *config.groupN, whyNot));
    if (*config.groupN && nBlocks % *config.groupN != 0)
      unfit(config, fmt::format("n-group={} does not divide the nest's {} n blocks", *config.groupN,
                                nBlocks));
    s.groupN = *config.groupN;
    return;
  }
  if (!fits)
    return;
  const int64_t blockBytes = int64_t(s.tileN) * s.lanes * (nest.elemBits / 8);
  for (int64_t group : {32, 16, 8, 4, 2})
    if (nBlocks % group == 0 && group * blockBytes <= kGroupRowBytes &&
        nBlocks / group >= (group > 8 ? 4 : 2)) {
      s.groupN = group;
      return;
    }
}

void applyOverride(const NestShape &nest, Strategy &s, const ConfigOverride &config) {
  if (s.pipeline == Pipeline::ContractionStream) {
    // M counts rows of B per step, N the parts: of k where they divide it (split=k), else of
    // the output's vectors where they divide those, else of k, the first part taking the rows
    // past the others. The columns past its whole vectors are added to by parts of k only.
    const int64_t k = nest.extents[s.dimK], n = nest.extents[s.dimN], vectors = n / s.lanes;
    const int parts = config.tileN.value_or(s.tileN);
    const bool splitK = s.splitK && parts > 0 && parts <= k &&
                        (k % parts == 0 || !divides(parts, vectors) || n % s.lanes != 0);
    if ((!splitK && !divides(parts, vectors)) || config.blockK.value_or(0) ||
        config.pack.value_or(false))
      unfit(config, fmt::format("contraction.stream takes tile=RxP with P {}, and no k-block or "
                                "packing",
                                s.splitK ? fmt::format("at most k ({}) or dividing its {} vectors",
                                                       k, vectors)
                                         : fmt::format("dividing {} vectors", vectors)));
    if (!splitK && n % s.lanes != 0)
      unfit(config, fmt::format("contraction.stream over {} columns, {} past its whole vectors, "
                                "takes tile=RxP with P at most k ({})",
                                n, n % s.lanes, k));
    s.tileM = config.tileM.value_or(s.tileM);
    s.tileN = parts;
    s.splitK = splitK;
    s.prefetchAhead = config.prefetchAhead.value_or(s.prefetchAhead);
    return;
  }
  if (s.pipeline == Pipeline::ContractionChoices) {
    // N is fixed by the choices (their vectors); rows stream whole, with no k blocks.
    if ((config.tileN && *config.tileN != s.tileN) ||
        (config.tileM && *config.tileM > extentOr1(nest, s.dimM)) || config.blockK.value_or(0) ||
        config.pack.value_or(false))
      unfit(config, fmt::format("contraction.choices takes tile=Mx{} with M at "
                                "most {}, and no k-block or packing",
                                s.tileN, extentOr1(nest, s.dimM)));
    s.tileM = config.tileM.value_or(s.tileM);
    return;
  }
  if (s.pipeline == Pipeline::ContractionRanks) {
    // N counts ranks, any number the registers hold; k blocks divide k (checked below).
    if ((config.tileM && *config.tileM > extentOr1(nest, s.dimM)) || config.pack.value_or(false))
      unfit(config, fmt::format("contraction.ranks takes tile=MxN with M at most "
                                "{}, and no packing",
                                extentOr1(nest, s.dimM)));
    s.tileM = config.tileM.value_or(s.tileM);
    s.tileN = config.tileN.value_or(s.tileN);
    if (s.kBlocksInTile && config.tileM) // the tile's rows that stay in L1
      s.blockK = tileBlockK(nest, s);
    if (config.blockK) {
      const int64_t k = nest.extents[s.dimK];
      if (*config.blockK != 0 && (*config.blockK > k || k % *config.blockK != 0))
        unfit(config, fmt::format("k-block {} does not divide the nest's one "
                                  "reduction dim ({})",
                                  *config.blockK, k));
      const int64_t steps = s.ranksKSteps(nest.gather->choices);
      if (*config.blockK % steps != 0)
        unfit(config, fmt::format("k-block {} is not a multiple of the {} k steps each step of "
                                  "contraction.ranks takes here",
                                  *config.blockK, steps));
      s.blockK = *config.blockK == k ? 0 : *config.blockK; // 0: none
    }
    if (config.kBlocksInTile) {
      s.kBlocksInTile = *config.kBlocksInTile;
      if (!config.blockK) // the placement's own block size
        s.blockK = s.kBlocksInTile ? tileBlockK(nest, s) : rankInputBlockK(nest, s);
      if (s.kBlocksInTile && !s.blockK)
        unfit(config, fmt::format("k-blocks=in-tile needs a k block that divides the nest's one "
                                  "reduction dim ({})",
                                  nest.extents[s.dimK]));
    }
    s.kBlocksInTile = s.kBlocksInTile && s.blockK;
    return;
  }
  if (!constantBesidesM(nest, s.dimM) && config.blockK.value_or(0))
    unfit(config, "k blocks need constant extents (but for m)");
  if (!constantBesidesM(nest, s.dimM, s.dimK) && !s.packTransposed && config.pack.value_or(false))
    unfit(config, "packing needs constant extents (but for m and k)");
  if (config.tileM)
    s.tileM = *config.tileM;
  if (config.tileN)
    s.tileN = *config.tileN;
  if (config.blockK)
    s.blockK = *config.blockK;
  bool alongN = s.pipeline == Pipeline::ContractionOuter; // the tile's N counts vectors along n
  int64_t cols = alongN ? nest.extents[s.dimN] / s.lanes : extentOr1(nest, s.dimN);
  // The columns of a runtime n that the n blocks leave over run in one-column tiles; the
  // vectors of a constant one in a narrower tile, unless B is packed transposed, and
  // contraction.dot's columns one at a time (as its own choice may leave them).
  const bool anyColumns = isRuntime(nest, s.dimN);
  const bool vectorsLeft = (!alongN || !s.packTransposed) && s.tileN <= cols;
  const bool lastBlockShifts = alongN && s.packTransposed && nest.startsFromFill &&
                               !isRuntime(nest, s.dimN) && s.tileN <= cols;
  if (s.tileM > extentOr1(nest, s.dimM))
    unfit(config,
          fmt::format("tile {}x{} does not fit the {} nest: M {} is more than its {} rows", s.tileM,
                      s.tileN, pipelineName(s.pipeline), s.tileM, extentOr1(nest, s.dimM)));
  if (!anyColumns && !vectorsLeft && !lastBlockShifts && !divides(s.tileN, cols))
    unfit(config, fmt::format("tile {}x{} does not fit the {} nest: N {} must {} its {} {}{}",
                              s.tileM, s.tileN, pipelineName(s.pipeline), s.tileN,
                              !s.packTransposed ? "be at most" : "divide", cols,
                              alongN ? "vector" : "column", cols == 1 ? "" : "s"));
  if (s.blockK && s.pipeline == Pipeline::ContractionDot)
    unfit(config, fmt::format("k-block {} does not apply: contraction.dot sums each tile's dot "
                              "products over the whole reduction",
                              s.blockK));
  if (s.blockK && (s.dimK < 0 || nest.extents[s.dimK] % s.blockK != 0))
    unfit(config, fmt::format("k-block {} does not divide the nest's one "
                              "reduction dim",
                              s.blockK));
  // Chosen again for the tile the override may have changed. Only contraction.dot (and
  // contraction.stream, above) prefetch: `prefetch=` holds for every nest of a function, and
  // the others ignore it.
  s.prefetchAhead = choosePrefetchAhead(nest, s, config.prefetchAhead);
  if (s.packTransposed) {
    if (!config.pack.value_or(true))
      unfit(config, fmt::format("pack=0 does not apply: input #{} is read along "
                                "k, so contraction.outer must pack it",
                                s.packInput));
    return;
  }
  std::string whyNot;
  s.packInput = config.pack.value_or(true) ? choosePackInput(nest, s, &whyNot) : -1;
  if (config.pack.value_or(false) && s.packInput < 0)
    unfit(config, "pack=1 does not apply: " + whyNot);
}

} // namespace

bool shiftsLastNBlock(const Strategy &s, std::optional<int64_t> n, bool startsFromFill) {
  return s.pipeline == Pipeline::ContractionOuter && s.packTransposed && startsFromFill && n &&
         *n % (int64_t(s.tileN) * s.lanes) != 0;
}

Strategy selectStrategy(const NestShape &nest, const Target &target, const ConfigOverride &config) {
  Strategy base;
  bool hasReduction = false, reductionsInnermost = true;
  for (size_t d = 0; d < nest.reduction.size(); ++d) {
    if (nest.reduction[d])
      hasReduction = true;
    else if (hasReduction)
      reductionsInnermost = false;
  }
  if (nest.extents.empty() && !nest.reduction.empty())
    base.why = "its extents are runtime values";
  else if (!hasReduction)
    base.pipeline = Pipeline::Elementwise;
  else if (reductionsInnermost)
    base.pipeline = Pipeline::RowReduction;
  else
    base.why = "a reduction encloses a parallel loop";

  bool wantsContraction = config.pipeline && (*config.pipeline == Pipeline::ContractionOuter ||
                                              *config.pipeline == Pipeline::ContractionDot ||
                                              *config.pipeline == Pipeline::ContractionGather ||
                                              *config.pipeline == Pipeline::ContractionChoices ||
                                              *config.pipeline == Pipeline::ContractionRanks ||
                                              *config.pipeline == Pipeline::ContractionStream);
  auto allows = [&](Pipeline p) { return !config.pipeline || *config.pipeline == p; };
  if ((config.pipeline && !wantsContraction) || !hasReduction || nest.extents.empty())
    return base;
  // The register tiles assume at least one tile of work; an empty nest computes nothing, so it
  // stays plain loops under any override (zero-trip loops are always correct).
  if (std::find(nest.extents.begin(), nest.extents.end(), 0) != nest.extents.end()) {
    base.why = "the nest is empty";
    return base;
  }
  std::string whyNot;
  if (!nest.vectorBody)
    whyNot = "its body has ops the vector code generator does not take";
  // 16-bit floats are computed in f32 registers: a vector holds as many of them as of f32.
  const int laneBits = std::max(nest.elemBits, 32);
  int lanes = std::max(1, target.vectorBits / laneBits);
  std::optional<Strategy> chosen;
  std::string whyOuter, whyDot;
  if (nest.gather && hasRuntimeExtents(nest) && !runtimeOnlyInPairs(nest)) {
    whyNot = "it reads an operand through a gather, over runtime extents besides the pairs'";
  } else if (nest.gather) {
    // Only the gather pipelines read an operand through its indices. A runtime count of pairs
    // (the tokens of a partly specialized mul_mat_id) takes contraction.ranks alone: its slots
    // are counted at run time, while the others size their vectors of pairs when they are
    // compiled.
    const bool runtimePairs = hasRuntimeExtents(nest);
    std::string whyChoices;
    if (whyNot.empty() && !runtimePairs && allows(Pipeline::ContractionChoices))
      chosen = tryChoices(nest, lanes, target, config.pipeline.has_value(), whyChoices);
    std::string whyRanks;
    if (!chosen && whyNot.empty() && allows(Pipeline::ContractionRanks))
      chosen = tryRanks(nest, lanes, target, config.pipeline.has_value() || runtimePairs,
                        config.ranksByChoice, whyRanks);
    if (!chosen && whyNot.empty() && !runtimePairs && allows(Pipeline::ContractionGather))
      chosen = tryGather(nest, lanes, target, whyNot);
    else if (!chosen && whyNot.empty())
      whyNot = runtimePairs && config.pipeline != Pipeline::ContractionRanks
                   ? "it counts its pairs at run time, which only contraction.ranks takes"
               : config.pipeline == Pipeline::ContractionRanks || runtimePairs ? whyRanks
               : whyChoices.empty() ? "it reads an operand through a gather"
                                    : whyChoices;
  } else if (whyNot.empty()) {
    // Vectors of the target's full width first, then half as wide down to 128 bits, so that a
    // dim that is not a whole number of full vectors (n = 40 on AVX-512) still gets register
    // tiles: row-reduction reads B down its columns. A matmul of 128x512 by 512x40 took 0.63 ms
    // that way on a Zen 4, where 512x48 takes 0.055 with 16 lanes.
    const int narrowest = std::min(lanes, std::max(1, 128 / laneBits));
    for (int width = lanes; !chosen && width >= narrowest; width /= 2) {
      if (allows(Pipeline::ContractionStream) && !hasRuntimeExtents(nest))
        chosen = tryStream(nest, width, target, whyOuter);
      if (!chosen && allows(Pipeline::ContractionOuter))
        chosen = tryOuter(nest, width, target, whyOuter);
      if (!chosen && allows(Pipeline::ContractionDot))
        chosen = tryDot(nest, width, target, whyDot);
    }
    // No width divides n: full vectors, and the columns left over one lane wide. Read in a
    // row reduction instead, B went down its columns: 32x1024 by 1024x1001 took 13.7 ms on the
    // Zen 3, against 0.71 ms for 1024x1000.
    // Both inputs read along the other's dim (A along m, B along k: both transposed) leave
    // contraction.dot nothing to read along k: B packs transposed however long k is. Plain
    // loops took 2.55 s for 128x4096x4096 on the Xeon.
    std::string whyTransposed;
    if (!chosen && allows(Pipeline::ContractionOuter))
      chosen = tryOuter(nest, lanes, target, whyTransposed, false, /*anyTransposed=*/true);
    std::string whyLeft;
    if (!chosen && allows(Pipeline::ContractionStream) && !hasRuntimeExtents(nest))
      chosen = tryStream(nest, lanes, target, whyLeft, /*columnsLeft=*/true);
    if (!chosen && allows(Pipeline::ContractionOuter))
      chosen = tryOuter(nest, lanes, target, whyLeft, /*columnsLeft=*/true);
    if (!chosen && (config.pipeline == Pipeline::ContractionGather ||
                    config.pipeline == Pipeline::ContractionChoices ||
                    config.pipeline == Pipeline::ContractionRanks))
      whyNot = "it reads no operand through a gather";
    else if (!chosen) // the reasons of the pipelines that were tried
      whyNot = whyOuter.empty() ? whyDot
               : whyDot.empty() ? whyOuter
                                : fmt::format("{}; {}", whyOuter, whyDot);
    if (!chosen && whyNot.empty())
      whyNot = hasRuntimeExtents(nest) && config.pipeline == Pipeline::ContractionStream
                   ? "it has runtime extents, and contraction.stream splits its work when it is "
                     "compiled"
                   : whyLeft;
  }
  if (!chosen) {
    if (wantsContraction)
      unfit(config,
            fmt::format("pipeline {} does not apply: {}", pipelineName(*config.pipeline), whyNot));
    if (base.pipeline == Pipeline::Loops)
      base.why = whyNot;
    return base;
  }
  // The gather pipelines chose their own k blocks and pack nothing the way the others do.
  bool gathers = chosen->pipeline == Pipeline::ContractionGather ||
                 chosen->pipeline == Pipeline::ContractionChoices ||
                 chosen->pipeline == Pipeline::ContractionRanks ||
                 chosen->pipeline == Pipeline::ContractionStream;
  if (!gathers) {
    chosen->blockK = chooseBlockK(nest, *chosen, target);
    if (!chosen->packTransposed)
      chosen->packInput = choosePackInput(nest, *chosen);
    takeAllRowsWhereBLeavesL1(nest, *chosen, target);
  }
  // A shifted last n block with k blocks runs after the n blocks' loop, only its m blocks on
  // the threads (LowerToLoops): after one n block, which no thread shares, the nest ran on one
  // thread (128x4096 by 127x4096: 1.28-1.55 ms against 1.04-1.24 in dot tiles). dot takes such
  // a nest, or, where it cannot (k of no whole vectors), the k blocks go.
  const auto n = chosen->dimN >= 0 && !isRuntime(nest, chosen->dimN)
                     ? std::optional<int64_t>(nest.extents[chosen->dimN])
                     : std::nullopt;
  if (shiftsLastNBlock(*chosen, n, nest.startsFromFill) && chosen->blockK &&
      *n / (int64_t(chosen->tileN) * chosen->lanes) < 2) {
    std::string whyDot;
    std::optional<Strategy> dot;
    if (allows(Pipeline::ContractionDot))
      dot = tryDot(nest, chosen->lanes, target, whyDot);
    if (dot)
      chosen = dot;
    else
      chosen->blockK = 0;
  }
  if (!config.empty())
    applyOverride(nest, *chosen, config);
  if (config.blockK && !config.tileM)
    divideRowsUnlessPanelStreams(nest, *chosen); // with the k block set by hand
  placeBlocksOutside(nest, *chosen, config);
  groupNBlocks(nest, *chosen, config);
  return *chosen;
}

std::string describe(const Strategy &s) {
  if (!s.isContraction())
    return s.why.empty() ? pipelineName(s.pipeline)
                         : fmt::format("{} ({})", pipelineName(s.pipeline), s.why);
  auto dim = [](int d) { return d < 0 ? std::string("-") : fmt::format("d{}", d); };
  std::string text = fmt::format("{} m={} n={} k={} tile={}x{} lanes={}", pipelineName(s.pipeline),
                                 dim(s.dimM), dim(s.dimN), dim(s.dimK), s.tileM, s.tileN, s.lanes);
  if (s.blockK)
    text += fmt::format(" k-block={}", s.blockK);
  if (s.splitK)
    text += " split=k";
  if (s.prefetchAhead)
    text += fmt::format(" prefetch={}", s.prefetchAhead);
  if (s.packInput >= 0)
    text += fmt::format(" pack=#{}{}", s.packInput, s.packTransposed ? "^T" : "");
  for (size_t i = 0; i < s.blocksOutside.size(); ++i)
    text += (i ? "," : " blocks-outside=") + dim(s.blocksOutside[i]);
  if (s.groupN)
    text += fmt::format(" n-group={}", s.groupN);
  if (s.ranksByChoice)
    text += " ranks=by-choice";
  if (s.kBlocksInTile)
    text += " k-blocks=in-tile";
  return text;
}

} // namespace frank::loops
