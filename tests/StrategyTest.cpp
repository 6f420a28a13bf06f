// Strategy selection as data: golden choices for the benchmark nests on AVX2 and AVX-512
// targets, the reasons a nest stays plain loops, `--config` parsing and its errors, and the
// strategy lines the loop IR prints for the components. Nothing here compiles a kernel.
#include "loops/Strategy.h"
#include "Engine.h"
#include "TestSupport.h"

#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace frank::test {
namespace {

using loops::NestShape;
using loops::Target;

/// y[m, n] += x[m, k] * w[k, n]: dims (m, n, k).
NestShape matmulNest(int64_t m, int64_t k, int64_t n) {
  NestShape nest;
  nest.extents = {m, n, k};
  nest.reduction = {false, false, true};
  nest.strides = {{k, 0, 1}, {0, 1, n}, {n, 1, 0}};
  nest.vectorBody = true;
  nest.addAccumulates = true;
  return nest;
}

/// A sum of products over `extents` (reduction dims marked), inputs and output read at `strides`.
NestShape productNest(std::vector<int64_t> extents, std::vector<bool> reduction,
                      std::vector<std::vector<int64_t>> strides) {
  NestShape nest;
  nest.extents = std::move(extents);
  nest.reduction = std::move(reduction);
  nest.strides = std::move(strides);
  nest.vectorBody = true;
  nest.addAccumulates = true;
  return nest;
}

/// y[m, n] += x[m, k] * w[n, k]: both inputs contiguous along k.
NestShape transposedNest(int64_t m, int64_t k, int64_t n) {
  NestShape nest = matmulNest(m, k, n);
  nest.strides = {{k, 0, 1}, {0, k, 1}, {n, 1, 0}};
  return nest;
}

/// mul_mat_id after the gather folds: out[o, e, t] += w[o, i, ids[e, t]] * x[i, e, t], dims
/// (o, e, t, i); w [n_out, n_in, X] is read through the extract, ids [k, T] is input #1.
NestShape mulMatIdNest(int64_t nOut, int64_t nIn, int64_t experts, int64_t used, int64_t tokens) {
  NestShape nest;
  nest.extents = {nOut, used, tokens, nIn};
  nest.reduction = {false, false, false, true};
  int64_t slots = used * tokens;
  nest.strides = {{0, tokens, 1, slots}, {0, tokens, 1, 0}, {slots, tokens, 1, 0}};
  nest.vectorBody = true;
  nest.addAccumulates = true;
  nest.gather = NestShape::Gather{{nIn * experts, 0, 0, experts}, 1, experts};
  return nest;
}

std::string choose(const NestShape &nest, Target target = Target::avx2(),
                   const std::string &config = "") {
  return loops::describe(loops::selectStrategy(nest, target, loops::parseConfig(config)));
}

TEST(Strategy, GoldenContractions) {
  // S7 on AVX2: 16 registers, of which a panel streaming from L2 for many m blocks takes the
  // most FMAs per load (6x2); B's rows are 16 KiB apart, so it is packed; k blocks of 256 keep
  // A's slice of all 128 rows in 128 KiB of L2. The k blocks run outside groups of 32 n blocks
  // (a k block of A serves them from L2, and each of B's rows is read in runs of 2 KiB).
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096)),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8 k-block=256 pack=#1 n-group=32");
  // With 32 registers of 16 lanes the tile grows, and each k row of the panel with it: to 6x4
  // by FMAs per load. Its panel (64 KiB) streams from L2 for every m block, so the 6 rows stay,
  // with a 2x4 tile for the 2 rows left over. Its n blocks are 64 columns: 8 of them span 2 KiB
  // of B's rows.
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1 n-group=8");
  // Zen 5's budgets for k blocks (Engine::target), twice the others': k blocks of 512, A's slice
  // of 128 rows 256 KiB; 256 rows keep blocks of 256, and a k of 512 takes none.
  Target zen5 = Target::avx512();
  zen5.blockKPanelBytes *= 2;
  zen5.blockKSliceBytes *= 2;
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), zen5),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=512 pack=#1 n-group=8");
  EXPECT_EQ(choose(matmulNest(256, 4096, 4096), zen5),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1 n-group=8");
  EXPECT_THAT(choose(matmulNest(128, 512, 4096), zen5),
              testing::Not(testing::HasSubstr("k-block")));
  // `n-group=` sets the group (one that divides the n blocks), 0 none.
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx512(), "n-group=0"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1");
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx512(), "n-group=32"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1 n-group=32");
  // The largest of 8, 4 and 2 that leaves two groups: 4 of 8 n blocks; none of 2.
  EXPECT_EQ(choose(matmulNest(128, 4096, 128)),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8 k-block=256 pack=#1 n-group=4");
  EXPECT_EQ(choose(matmulNest(128, 4096, 128), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1");
  // A k of 128 (32 KiB panels, read from L1) shrinks the rows to a size that divides them and
  // leaves no tile over to compile: 4 of 128 rows, 5 of 130.
  EXPECT_EQ(choose(matmulNest(128, 128, 4096), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x4 lanes=16 pack=#1");
  EXPECT_EQ(choose(matmulNest(130, 128, 4096), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=5x4 lanes=16 pack=#1");
  // So does a k block set by hand that fits the panel in L1.
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx512(), "k-block=128"),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x4 lanes=16 k-block=128 pack=#1 n-group=8");
  // One row (GEMV): B streams by rows, four rows a step, each of two parts summing half of
  // them into a partial output of its own. Where a vector is a whole cache line, eight rows a
  // step, each prefetching its line of the next step's rows; `prefetch=` sets how many steps
  // ahead, or none.
  EXPECT_EQ(choose(matmulNest(1, 4096, 4096)),
            "contraction.stream m=- n=d1 k=d2 tile=4x2 lanes=8 split=k");
  EXPECT_EQ(choose(matmulNest(1, 4096, 4096), Target::avx512()),
            "contraction.stream m=- n=d1 k=d2 tile=8x2 lanes=16 split=k prefetch=1");
  EXPECT_EQ(choose(matmulNest(1, 4096, 4096), Target::avx512(), "prefetch=0"),
            "contraction.stream m=- n=d1 k=d2 tile=8x2 lanes=16 split=k");
  EXPECT_EQ(choose(matmulNest(1, 4096, 4096), Target::avx2(), "prefetch=3"),
            "contraction.stream m=- n=d1 k=d2 tile=4x2 lanes=8 split=k prefetch=3");
  // An odd k splits N instead, into two halves of the output.
  EXPECT_EQ(choose(matmulNest(1, 5, 32)), "contraction.stream m=- n=d1 k=d2 tile=4x2 lanes=8");
  // An odd number of vectors splits an odd k, the first part taking the row past the others';
  // fewer than four rows, one step of them.
  EXPECT_EQ(choose(matmulNest(1, 3, 24)),
            "contraction.stream m=- n=d1 k=d2 tile=3x2 lanes=8 split=k");
  // As a column-stripe contraction.outer, when asked: nothing to reuse a panel, so neither
  // packing nor k blocks.
  EXPECT_EQ(
      loops::describe(loops::selectStrategy(matmulNest(1, 4096, 4096), Target::avx2(),
                                            loops::parseConfig("pipeline=contraction.outer"))),
      "contraction.outer m=- n=d1 k=d2 tile=1x4 lanes=8");
  // B read in place with rows 4 KiB apart (n of 1024) leaves L1 between m blocks, however small
  // its panel: one tile takes all 4 rows, so that B is read once. Rows 5 KiB apart share no
  // set, and the panel (128 x 4 vectors, 16 KiB) serves both 2x4 tiles from L1. Packed, B is
  // read once either way: 7 rows by 1024x1024 keep their 2x4 tiles.
  EXPECT_EQ(choose(matmulNest(4, 128, 1024)), "contraction.outer m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  EXPECT_EQ(choose(matmulNest(6, 128, 1024)), "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8");
  // 7 rows would fit one vector a step only, a broadcast for every FMA: the tiles stay.
  EXPECT_EQ(choose(matmulNest(7, 128, 1024)), "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8");
  EXPECT_EQ(choose(matmulNest(4, 128, 1280)), "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8");
  // 16 batches of 4 rows by 2048x1024, too many panels to pack (16 MiB): the two m blocks of 2x4
  // tiles took k blocks of 256; one 4x2 tile takes the whole k.
  EXPECT_EQ(choose(productNest(
                {16, 4, 1024, 2048}, {false, false, false, true},
                {{4 * 2048, 2048, 0, 1}, {2048 * 1024, 0, 1, 1024}, {4 * 1024, 1024, 1, 0}})),
            "contraction.outer m=d1 n=d2 k=d3 tile=4x2 lanes=8");
  EXPECT_EQ(choose(matmulNest(7, 1024, 1024)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 k-block=256 pack=#1 n-group=8");
  // Rows that neither the tile nor one down to two thirds of its rows divides go to a leftover
  // tile. The whole panel (512 x 32 floats, 64 KiB) would fit L2, but a 2-row tile keeps its
  // panel in 32 KiB of L1. (A 6x2 tile's whole panel, 32 KiB, would stay in L1, where the
  // broadcasts of 6 rows cost more.)
  EXPECT_EQ(choose(matmulNest(37, 512, 128)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 k-block=256 pack=#1 n-group=2");
  // Packing pays from 4 m blocks on, or from 2 when B takes k blocks (each k block's panel
  // packed between the tiles of the one before): 8 rows in 2x4 tiles (a 6x2 tile would leave
  // one m block) pack B, 12 rows in 6x4 tiles (2 blocks) a B of 4096 rows but not one of 128
  // (a single panel).
  EXPECT_EQ(choose(matmulNest(8, 4096, 1024)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 k-block=256 pack=#1 n-group=8");
  EXPECT_EQ(choose(matmulNest(8, 128, 1024)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 pack=#1");
  EXPECT_EQ(choose(matmulNest(12, 4096, 1024), Target::avx512(), "pipeline=contraction.outer"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1 n-group=8");
  EXPECT_EQ(choose(matmulNest(12, 128, 1024), Target::avx512(), "pipeline=contraction.outer"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16");
  // A few rows, up to 3/8 of the registers (6 with AVX2, 12 with AVX-512), stream a B of 1 MiB or
  // more as one row does: each vector of B is loaded once and added to every row's accumulator.
  // More rows take tiles.
  EXPECT_EQ(choose(matmulNest(6, 4096, 4096)),
            "contraction.stream m=d0 n=d1 k=d2 tile=4x2 lanes=8 split=k");
  EXPECT_EQ(choose(matmulNest(7, 4096, 4096)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 k-block=256 pack=#1 n-group=16");
  EXPECT_EQ(choose(matmulNest(12, 4096, 4096), Target::avx512()),
            "contraction.stream m=d0 n=d1 k=d2 tile=8x2 lanes=16 split=k prefetch=1");
  EXPECT_EQ(choose(matmulNest(13, 4096, 4096), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1 n-group=8");
  // A B under 1 MiB stays in cache for the tiles (the MoE block's router, 8 experts by 32 tokens).
  EXPECT_EQ(choose(matmulNest(8, 1024, 32), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=8x2 lanes=16");
  EXPECT_EQ(choose(matmulNest(8, 1024, 256), Target::avx512()),
            "contraction.stream m=d0 n=d1 k=d2 tile=8x2 lanes=16 split=k prefetch=1");
  // With 4 rows or more per tile, panels of up to 64 KiB stay in L2: 256 rows of 64 floats.
  EXPECT_EQ(choose(matmulNest(37, 512, 128), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=256 pack=#1");
  // Q K^T at prefill: both operands contiguous along a short reduction, many m blocks: K is
  // packed transposed for the outer tile.
  EXPECT_EQ(choose(transposedNest(512, 128, 128)),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 pack=#1^T");
  EXPECT_EQ(choose(transposedNest(512, 128, 128), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x4 lanes=16 pack=#1^T");
  // Attention's P V per head, V read in place as [S, Hkv, D]: rows 4 KiB apart, packed once per
  // head. dims (head, query, d, key).
  NestShape pv = productNest({8, 512, 128, 128}, {false, false, false, true},
                             {{65536, 128, 0, 1}, {128, 0, 1, 1024}, {65536, 128, 1, 0}});
  EXPECT_EQ(choose(pv, Target::avx512()),
            "contraction.outer m=d1 n=d2 k=d3 tile=4x4 lanes=16 pack=#1");
  // A long k with 16 registers, or few m blocks to share the panels (decode): contraction.dot.
  // With 32 registers a long k packs transposed too (the Xeon's 128x4096x4096: 26.7-32.7 ms
  // against 37.5-45.2 in contraction.dot).
  EXPECT_EQ(choose(transposedNest(512, 4096, 128)),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  EXPECT_THAT(choose(transposedNest(128, 4096, 4096), Target::avx512()),
              testing::StartsWith("contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16"));
  EXPECT_THAT(choose(transposedNest(128, 4096, 4096), Target::avx512()),
              testing::HasSubstr("pack=#1^T"));
  // A read along m as well (both inputs transposed): contraction.dot cannot read the nest, so B
  // packs transposed whatever k, rather than plain loops (2.55 s for 128x4096x4096).
  NestShape bothTransposed = transposedNest(128, 4096, 4096);
  bothTransposed.strides[0] = {1, 0, 128};
  for (Target target : {Target::avx2(), Target::avx512()})
    EXPECT_THAT(choose(bothTransposed, target), testing::HasSubstr("pack=#1^T"));
  // However few m blocks, from 3 rows: 7 rows by a 4096x4096 B took 48.9 ms in plain loops, 5.9
  // packed.
  NestShape fewRows = transposedNest(7, 4096, 4096);
  fewRows.strides[0] = {1, 0, 7};
  for (Target target : {Target::avx2(), Target::avx512()})
    EXPECT_THAT(choose(fewRows, target), testing::StartsWith("contraction.outer"));
  // Never contraction.stream, which reads B's rows along n: a transposed B is read along k.
  // (Once the stream took the packed tile's strategy and read B as if it were not transposed.)
  EXPECT_THAT(
      [&] {
        loops::selectStrategy(fewRows, Target::avx512(),
                              loops::parseConfig("pipeline=contraction.stream"));
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr(
          "contraction.stream does not apply: input #1 is read along k, and the stream reads "
          "B's rows along d1")));
  EXPECT_EQ(choose(transposedNest(4, 128, 512), Target::avx512()),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x4 lanes=16");
  // Q K^T at decode, one KV head: 512-byte key rows 4 KiB apart in [S, Hkv, D] give the
  // hardware prefetcher no stream, so the tile prefetches the rows 4 blocks ahead. Contiguous
  // rows (above) and long rows stream by themselves.
  NestShape qk = transposedNest(4, 128, 512);
  qk.strides = {{128, 0, 1}, {0, 1024, 1}, {512, 1, 0}};
  EXPECT_EQ(choose(qk), "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8 prefetch=4");
  EXPECT_EQ(choose(qk, Target::avx2(), "prefetch=0"),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  EXPECT_EQ(choose(qk, Target::avx2(), "prefetch=2"),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8 prefetch=2");
  // Forced, any dot nest with a B prefetches, contiguous rows too; other pipelines ignore it.
  EXPECT_EQ(choose(transposedNest(4, 128, 512), Target::avx2(), "prefetch=3"),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8 prefetch=3");
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx2(), "prefetch=3"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8 k-block=256 pack=#1 n-group=32");
  // Q K^T at decode over every KV head, dims (head, query, key, d): along the heads K is read
  // 512 bytes apart, more closely than along the keys (4 KiB), so the n blocks run outside the
  // heads and each block of keys reads whole rows of [S, Hkv, D]. Two m blocks, K stored
  // [Hkv, S, D] (the heads farther apart than the keys), or a dim K does not depend on keep
  // the blocks inside; `blocks-outside=` turns it off, or on for any number of m blocks.
  NestShape heads = productNest({8, 4, 512, 128}, {false, false, false, true},
                                {{512, 128, 0, 1}, {128, 0, 1024, 1}, {2048, 512, 1, 0}});
  EXPECT_EQ(choose(heads, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4 blocks-outside=d0");
  EXPECT_EQ(choose(heads, Target::avx512(), "blocks-outside=0"),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4");
  NestShape twoBlocks = heads;
  twoBlocks.extents[1] = 8;
  twoBlocks.strides = {{1024, 128, 0, 1}, {128, 0, 1024, 1}, {4096, 512, 1, 0}};
  EXPECT_EQ(choose(twoBlocks, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16");
  EXPECT_EQ(choose(twoBlocks, Target::avx512(), "blocks-outside=1"),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 blocks-outside=d0");
  NestShape headMajor = heads;
  headMajor.strides[1] = {65536, 0, 128, 1};
  EXPECT_EQ(choose(headMajor, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16");
  NestShape shared = heads;
  shared.strides[1] = {0, 0, 1024, 1};
  EXPECT_EQ(choose(shared, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4");
  // The innermost run of such dims, dims (chunk, head, query, key, d): with K [S, chunk, Hkv,
  // D] the blocks run outside the chunks and the heads; with the chunks farthest apart, outside
  // the heads only.
  NestShape chunks =
      productNest({2, 8, 4, 256, 128}, {false, false, false, false, true},
                  {{0, 512, 128, 0, 1}, {1024, 128, 0, 2048, 1}, {8192, 1024, 256, 1, 0}});
  EXPECT_EQ(choose(chunks, Target::avx512()),
            "contraction.dot m=d2 n=d3 k=d4 tile=4x4 lanes=16 prefetch=4 blocks-outside=d0,d1");
  chunks.strides[1][0] = 262144;
  EXPECT_EQ(choose(chunks, Target::avx512()),
            "contraction.dot m=d2 n=d3 k=d4 tile=4x4 lanes=16 prefetch=4 blocks-outside=d1");
  // A runtime key count counts as 256 keys: 1 MiB of K. A runtime number of heads, or of
  // queries, keeps the blocks inside.
  NestShape runtimeKeys = heads;
  runtimeKeys.extents[2] = loops::kNominalExtent;
  runtimeKeys.runtime = {false, false, true, false};
  EXPECT_EQ(choose(runtimeKeys, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4 blocks-outside=d0");
  runtimeKeys.runtime = {true, false, true, false};
  EXPECT_EQ(choose(runtimeKeys, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4");
  // Fewer keys, a K of 512 KiB or less: a parallel loop of Q K^T's own would cost more than
  // reading K in order saves.
  NestShape fewKeys = heads;
  fewKeys.extents[2] = 128;
  EXPECT_EQ(choose(fewKeys, Target::avx512()),
            "contraction.dot m=d1 n=d2 k=d3 tile=4x4 lanes=16 prefetch=4");
  // P V per chunk of keys and KV head, dims (chunk, head, query, d, key), V [chunk, S, Hkv, D]:
  // along the heads V is read more closely than along the keys, so the keys go in blocks of
  // 16, each over every head. Not without a parallel dim outside them (the k blocks never run
  // on the threads), nor with `k-block=0` or `blocks-outside=0`.
  NestShape pvChunks =
      productNest({2, 8, 4, 128, 256}, {false, false, false, false, true},
                  {{8192, 1024, 256, 0, 1}, {262144, 128, 0, 1, 1024}, {4096, 512, 128, 1, 0}});
  EXPECT_EQ(choose(pvChunks, Target::avx512()),
            "contraction.outer m=d2 n=d3 k=d4 tile=4x4 lanes=16 k-block=16 blocks-outside=d1");
  EXPECT_EQ(choose(pvChunks, Target::avx512(), "k-block=0"),
            "contraction.outer m=d2 n=d3 k=d4 tile=4x4 lanes=16");
  EXPECT_EQ(choose(pvChunks, Target::avx512(), "blocks-outside=0"),
            "contraction.outer m=d2 n=d3 k=d4 tile=4x4 lanes=16");
  EXPECT_EQ(choose(pvChunks, Target::avx512(), "k-block=64"),
            "contraction.outer m=d2 n=d3 k=d4 tile=4x4 lanes=16 k-block=64 blocks-outside=d1");
  NestShape pvOnePiece = productNest({8, 4, 128, 512}, {false, false, false, true},
                                     {{2048, 512, 0, 1}, {128, 0, 1, 1024}, {512, 128, 1, 0}});
  EXPECT_EQ(choose(pvOnePiece, Target::avx512()),
            "contraction.outer m=d1 n=d2 k=d3 tile=4x4 lanes=16");
  NestShape longRows = transposedNest(4, 4096, 512);
  longRows.strides = {{4096, 0, 1}, {0, 8192, 1}, {512, 1, 0}};
  EXPECT_EQ(choose(longRows), "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  EXPECT_THAT(
      [] {
        loops::selectStrategy(transposedNest(512, 128, 128), Target::avx2(),
                              loops::parseConfig("pack=0"));
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr(
          "pack=0 does not apply: input #1 is read along k, so contraction.outer must pack it")));
  // S9 at T = 32, 8 experts: the experts are the lanes. With 16 registers by choice: lane j of
  // a rank is expert j, no permute, so a 3x4 tile (12 accumulators, 3 rows' experts and a
  // vector of inputs; its 2 leftover rows a tile of their own) for the 8 ranks of even routing,
  // two blocks of four. In order, with 16 registers (5x2, then 4x2) a permute per FMA costs more
  // than contraction.gather's padding of the 64 pairs to 15 vectors; forced, the 64 pairs are
  // eight vectors of 8 slots (four blocks of two), and each row loads one vector of weights per
  // k and permutes it for NR FMAs. The packed input takes 256 bytes a k: 256 KiB for k = 1024,
  // within a quarter of L2, needs no k blocks outside the m blocks. By choice, the tile's two
  // rank blocks pass over its rows (32 KiB each) in k blocks of its own, 64 k: 6 KiB of the three
  // rows, which the second rank block reads from L1.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32)),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=64 ranks=by-choice "
            "k-blocks=in-tile");
  // By hand: outside the m blocks (none: the input fits), or in the tile with a size of its own,
  // whose rows the size of a 5-row tile's L1 budget follows.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2(), "k-blocks=outside"),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 ranks=by-choice");
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2(), "k-block=128"),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=128 ranks=by-choice "
            "k-blocks=in-tile");
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2(), "tile=5x4"),
            "contraction.ranks m=d0 n=- k=d3 tile=5x4 lanes=8 k-block=32 ranks=by-choice "
            "k-blocks=in-tile");
  // The down projection's input (896 KiB a whole k) in k blocks outside when asked: 1792.
  EXPECT_EQ(choose(mulMatIdNest(1024, 3584, 8, 2, 32), Target::avx2(), "k-blocks=outside"),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=1792 ranks=by-choice");
  EXPECT_EQ(choose(mulMatIdNest(1024, 3584, 8, 2, 32)),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=64 ranks=by-choice "
            "k-blocks=in-tile");
  // One rank block by choice (16 tokens, four ranks) too: the permuted ranks of uneven routing
  // pass over the rows after it.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 16)),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=64 ranks=by-choice "
            "k-blocks=in-tile");
  // A k that no block of 8 to 85 divides has none in the tile.
  EXPECT_THAT(
      [] {
        loops::selectStrategy(mulMatIdNest(3584, 1021, 8, 2, 32), Target::avx2(),
                              loops::parseConfig("k-blocks=in-tile"));
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr(
          "k-blocks=in-tile needs a k block that divides the nest's one reduction dim (1021)")));
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2(), "ranks=in-order"),
            "contraction.gather m=d0 n=- k=d3 tile=6x1 lanes=8 k-block=32");
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2(),
                   "pipeline=contraction.ranks,ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=4x2 lanes=8");
  // With 16 lanes a vector holds 16 slots, and a step takes two k, a row's 8 experts at each:
  // the 64 pairs are four vectors, one block of 4x4 (16 accumulators beside a row's 8 experts
  // at either k for each of the 4 rows, a vector of slots' experts with its two inputs, and a
  // permuted copy). The same 256 bytes a k.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16");
  // S10's down projection, 896 KiB a whole k: two blocks of 1792.
  EXPECT_EQ(choose(mulMatIdNest(1024, 3584, 8, 2, 32), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 k-block=1792");
  // An odd k cannot go two steps at a time: 8 lanes, eight vectors in two blocks of four.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1023, 8, 2, 32), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=8");
  // Nor a k block of an odd size.
  EXPECT_THAT(
      [] {
        loops::selectStrategy(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx512(),
                              loops::parseConfig("k-block=1"));
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr(
          "k-block 1 is not a multiple of the 2 k steps each step of contraction.ranks takes "
          "here")));
  // 8 tokens: two ranks of 8, so NR = 2 at most; in order with 16 registers, 4 rows (4 rows'
  // vectors beside 8 accumulators, a vector of indices, the inputs and a permuted copy), by
  // choice 5 (5 rows' vectors and one of inputs beside 10 accumulators). With 32 registers, one
  // vector of 16 slots and the most rows L1 allows, 6. The packed input (128 KiB for twice the
  // ranks) needs no k blocks outside; by choice the tile takes its own, 32 k of its 5 rows.
  EXPECT_EQ(choose(mulMatIdNest(3600, 1024, 8, 2, 8), Target::avx2(), "ranks=by-choice"),
            "contraction.ranks m=d0 n=- k=d3 tile=5x2 lanes=8 k-block=32 ranks=by-choice "
            "k-blocks=in-tile");
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 8), Target::avx2(), "ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=4x2 lanes=8");
  EXPECT_EQ(choose(mulMatIdNest(3600, 1024, 8, 2, 8), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=6x1 lanes=16");
  // 64 tokens: eight vectors of 16 slots in two blocks of 4; 4x3 would pad them to nine. The
  // packed input, 512 bytes a k, is a quarter of L2 whole.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 64), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16");
  // 16 experts are two vectors of 8 lanes: contraction.gather groups the pairs by expert. The
  // weights' rows are 32 KiB apart, so they share L1 sets: six rows, not the eight the
  // registers allow, and k blocks whose 6 x 16 lines of 16 experts take 12 KiB of L1.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 16, 2, 32)),
            "contraction.gather m=d0 n=- k=d3 tile=6x1 lanes=8 k-block=16");
  // With 16 lanes the 16 experts are one vector again, with four ranks each.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 16, 2, 32), Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16");
  // Forced, contraction.gather on 8 experts: 8 pairs per expert at 32 tokens fill 8 lanes, not
  // 16; 64 tokens fill 16. Rows 32000 bytes apart spread over the sets: eight rows, and a k
  // block that divides 1000.
  auto gather = [](const NestShape &nest, const Target &target) {
    return loops::describe(
        loops::selectStrategy(nest, target, loops::parseConfig("pipeline=contraction.gather")));
  };
  EXPECT_EQ(gather(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx2()),
            "contraction.gather m=d0 n=- k=d3 tile=6x1 lanes=8 k-block=32");
  EXPECT_EQ(gather(mulMatIdNest(3584, 1024, 8, 2, 32), Target::avx512()),
            "contraction.gather m=d0 n=- k=d3 tile=6x1 lanes=8 k-block=32");
  EXPECT_EQ(gather(mulMatIdNest(3584, 1024, 8, 2, 64), Target::avx512()),
            "contraction.gather m=d0 n=- k=d3 tile=6x1 lanes=16 k-block=32");
  EXPECT_EQ(gather(mulMatIdNest(3584, 1000, 8, 2, 32), Target::avx2()),
            "contraction.gather m=d0 n=- k=d3 tile=8x1 lanes=8 k-block=25");
}

TEST(Strategy, GatherNeedsAVectorOfPairs) {
  // T = 1 (decode): 2 pairs fill no vector; every expert of a row is computed, the experts
  // being the lanes (four rows x two pairs of accumulators and a line of weights per row).
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 1)),
            "contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8");
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 1), Target::avx512()),
            "contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8");
  // 16 experts: two vectors a row, so two rows fit.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 16, 2, 1)),
            "contraction.choices m=d0 n=- k=d3 tile=2x2 lanes=8");
  // 6 pairs would leave room for one row (AVX2): one padded rank of contraction.ranks by choice
  // takes them; 60 experts are no whole number of vectors.
  EXPECT_EQ(choose(mulMatIdNest(64, 64, 8, 2, 3)),
            "contraction.ranks m=d0 n=- k=d3 tile=6x1 lanes=8 ranks=by-choice");
  EXPECT_EQ(choose(mulMatIdNest(64, 64, 8, 2, 2)),
            "contraction.choices m=d0 n=- k=d3 tile=2x1 lanes=8");
  // With 32 registers, pairs that leave choices' tiles fewer than 4 rows (6 to 15) take one
  // padded rank of contraction.ranks; 4 pairs keep choices' 4x1.
  EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, 2), Target::avx512()),
            "contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8");
  for (int64_t tokens : {3, 5, 7})
    EXPECT_EQ(choose(mulMatIdNest(3584, 1024, 8, 2, tokens), Target::avx512()),
              "contraction.ranks m=d0 n=- k=d3 tile=4x1 lanes=16")
        << tokens << " tokens";
  EXPECT_EQ(choose(mulMatIdNest(64, 64, 60, 2, 1)), "row-reduction");
  auto error = [](const NestShape &nest, const std::string &config) {
    try {
      loops::selectStrategy(nest, Target::avx2(), loops::parseConfig(config));
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 1), "pipeline=contraction.gather"),
              testing::HasSubstr("2 pairs fill no vector of 8"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.choices"),
              testing::HasSubstr("64 pairs x 1 vectors of accumulators do not fit the registers"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 1), "tile=2x2"),
              testing::HasSubstr("contraction.choices takes tile=Mx1 with M at most 64"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 1), "k-block=8"),
              testing::HasSubstr("and no k-block"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 1), "pack=1"),
              testing::HasSubstr("and no k-block or packing"));
  EXPECT_EQ(loops::describe(loops::selectStrategy(mulMatIdNest(64, 64, 8, 2, 1), Target::avx2(),
                                                  loops::parseConfig("tile=2x1"))),
            "contraction.choices m=d0 n=- k=d3 tile=2x1 lanes=8");
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.outer"),
              testing::HasSubstr("it reads an operand through a gather"));
  EXPECT_THAT(error(matmulNest(64, 64, 64), "pipeline=contraction.gather"),
              testing::HasSubstr("it reads no operand through a gather"));
  EXPECT_EQ(
      error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.gather,tile=3x1,k-block=16"),
      "no error");
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.gather,tile=2x2"),
              testing::HasSubstr("does not fit"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.gather,k-block=48"),
              testing::HasSubstr("k-block 48 does not divide"));
  // Pairs need not be whole vectors: 24 pairs, three vectors of slots, or, forced,
  // contraction.gather with each group padded to whole vectors. Two rows leave 16 registers
  // room for three vectors of slots: 2x3 serves the pairs 6 FMAs a step, in place, where 4x2
  // (5x2 fits, 64 rows take 4) pads them to four vectors for 6 of its 8.
  // By choice, three ranks as for even routing: 3x3.
  EXPECT_EQ(choose(mulMatIdNest(64, 64, 8, 2, 12), Target::avx2(), "ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=2x3 lanes=8");
  EXPECT_EQ(choose(mulMatIdNest(2, 32, 8, 2, 12), Target::avx2(), "ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=2x3 lanes=8");
  EXPECT_EQ(choose(mulMatIdNest(64, 64, 8, 2, 12), Target::avx2(), "ranks=by-choice"),
            "contraction.ranks m=d0 n=- k=d3 tile=3x3 lanes=8 ranks=by-choice");
  EXPECT_EQ(error(mulMatIdNest(64, 64, 8, 2, 12), "pipeline=contraction.gather"), "no error");
  EXPECT_EQ(
      loops::describe(loops::selectStrategy(mulMatIdNest(5, 32, 8, 2, 12), Target::avx2(),
                                            loops::parseConfig("pipeline=contraction.gather"))),
      "contraction.gather m=d0 n=- k=d3 tile=5x1 lanes=8");
  // Fewer choices than a 256-bit vector, or more than the lanes, are no ranks.
  EXPECT_THAT(error(mulMatIdNest(64, 64, 4, 2, 32), "pipeline=contraction.ranks"),
              testing::HasSubstr("a row's 4 choices take 128 bits, where a vector of them needs "
                                 "256 bits or more and 8 lanes at most"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 2), "pipeline=contraction.ranks"),
              testing::HasSubstr("4 pairs fill no vector of 8"));
  EXPECT_EQ(loops::describe(
                loops::selectStrategy(mulMatIdNest(64, 64, 8, 2, 32), Target::avx2(),
                                      loops::parseConfig("pipeline=contraction.ranks,tile=1x8"))),
            "contraction.ranks m=d0 n=- k=d3 tile=1x8 lanes=8 ranks=by-choice");
  EXPECT_EQ(
      loops::describe(loops::selectStrategy(mulMatIdNest(64, 64, 8, 2, 32), Target::avx2(),
                                            loops::parseConfig("pipeline=contraction.ranks"))),
      "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 ranks=by-choice");
  EXPECT_THAT(error(mulMatIdNest(8, 64, 8, 2, 32), "pipeline=contraction.ranks,tile=9x1"),
              testing::HasSubstr("contraction.ranks takes tile=MxN with M at most 8"));
  // k blocks by hand: they must divide k.
  EXPECT_THAT(
      loops::describe(
          loops::selectStrategy(mulMatIdNest(64, 64, 8, 2, 32), Target::avx2(),
                                loops::parseConfig("pipeline=contraction.ranks,k-block=16"))),
      testing::Eq("contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=16 ranks=by-choice"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.ranks,k-block=24"),
              testing::HasSubstr("k-block 24 does not divide the nest's one reduction dim (64)"));
  EXPECT_THAT(error(mulMatIdNest(64, 64, 8, 2, 32), "pipeline=contraction.ranks,pack=1"),
              testing::HasSubstr("and no packing"));
}

// A dim that is not a whole number of the target's vectors takes half as wide ones, down to
// 128 bits, before it gives up register tiles: N = 40 is 5 AVX2 vectors but not whole AVX-512
// ones, N = 36 only vectors of 4; the dot form takes K likewise.
TEST(Strategy, NarrowerVectorsForDimsOfPartVectors) {
  EXPECT_THAT(choose(matmulNest(128, 512, 40), Target::avx512()),
              testing::StartsWith("contraction.outer m=d0 n=d1 k=d2 tile=8x1 lanes=8 "));
  EXPECT_THAT(choose(matmulNest(128, 512, 40)),
              testing::StartsWith("contraction.outer m=d0 n=d1 k=d2 tile=8x1 lanes=8 "));
  EXPECT_THAT(choose(matmulNest(128, 512, 36), Target::avx512()),
              testing::StartsWith("contraction.outer m=d0 n=d1 k=d2 tile=8x3 lanes=4 "));
  EXPECT_THAT(choose(matmulNest(128, 512, 48), Target::avx512()), testing::HasSubstr(" lanes=16"));
  EXPECT_EQ(choose(transposedNest(4, 40, 512), Target::avx512()),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x4 lanes=8");
}

// A dim that no vector width divides (a vocabulary of 1001) still takes register tiles over
// its whole vectors, with the strategy of those alone (k blocks, packing, groups of n blocks),
// its last columns one lane wide, rather than a row reduction reading B down its columns.
TEST(Strategy, ColumnsLeftOverOfNoWholeVectors) {
  EXPECT_EQ(choose(matmulNest(32, 1024, 1001)),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x3 lanes=8 k-block=512 pack=#1");
  EXPECT_EQ(choose(matmulNest(128, 4096, 1025)), choose(matmulNest(128, 4096, 1024)));
  EXPECT_EQ(choose(matmulNest(128, 4096, 1025)),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8 k-block=256 pack=#1 n-group=16");
  // One row streams B, its parts splitting k, each adding its rows to the columns left over after
  // its vectors; an odd k too, the first part taking the last row (it had taken
  // contraction.outer, 4x slower at 8x4095x4095).
  EXPECT_EQ(choose(matmulNest(1, 300, 77)),
            "contraction.stream m=- n=d1 k=d2 tile=4x2 lanes=8 split=k");
  EXPECT_EQ(choose(matmulNest(1, 301, 77)), choose(matmulNest(1, 300, 77)));
  EXPECT_EQ(choose(matmulNest(8, 4095, 4095), Target::avx512()),
            "contraction.stream m=d0 n=d1 k=d2 tile=8x2 lanes=16 split=k prefetch=1");
  EXPECT_EQ(choose(matmulNest(128, 512, 41), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=8x2 lanes=16 pack=#1");
  // A whole number of narrower vectors still comes first; fewer columns than a vector stay loops.
  EXPECT_THAT(choose(matmulNest(128, 512, 36)), testing::HasSubstr(" lanes=4 "));
  EXPECT_EQ(choose(matmulNest(3, 5, 7)), "row-reduction");
}

// Whole vectors that only NR = 1 divides (125 at n = 1000, 17 at n = 136): wider tiles, the
// vectors they leave over after the n blocks in a narrower one, as long as those are at most an
// eighth of them (n = 40, 5 vectors, keeps 8x1). The AVX-512 target takes 8 lanes at n = 1000,
// which they divide, and so the same choice with 32 registers.
TEST(Strategy, VectorsLeftOverWhereOnlyOneDividesThem) {
  EXPECT_EQ(choose(matmulNest(128, 4096, 1000)),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x3 lanes=8 k-block=256 pack=#1");
  EXPECT_EQ(choose(matmulNest(128, 4096, 1000), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=8 k-block=256 pack=#1");
  EXPECT_EQ(choose(matmulNest(128, 512, 136)),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x3 lanes=8 pack=#1");
  EXPECT_THAT(choose(matmulNest(128, 512, 40)), testing::HasSubstr(" tile=8x1 "));
  // 15 vectors (n = 120): NR = 3 divides them; a transposed B keeps NR dividing them too.
  EXPECT_THAT(choose(matmulNest(128, 512, 120)), testing::HasSubstr(" tile=4x3 "));
  EXPECT_EQ(choose(transposedNest(512, 128, 136)),
            "contraction.outer m=d0 n=d1 k=d2 tile=8x1 lanes=8 pack=#1^T");
}

TEST(Strategy, WhyPlainLoops) {
  NestShape rowSum;
  rowSum.extents = {32, 4096};
  rowSum.reduction = {false, true};
  rowSum.strides = {{4096, 1}, {1, 0}};
  rowSum.vectorBody = true;
  rowSum.addAccumulates = true;
  EXPECT_EQ(choose(rowSum), "row-reduction");

  NestShape scale;
  scale.extents = {32, 4096};
  scale.reduction = {false, false};
  scale.strides = {{4096, 1}, {4096, 1}};
  EXPECT_EQ(choose(scale), "elementwise");

  NestShape runtime = matmulNest(1, 1, 1);
  runtime.extents.clear();
  EXPECT_EQ(choose(runtime), "loops (its extents are runtime values)");

  // N = 6 is not whole vectors, not even of 128 bits, and K = 6 neither: nothing to block.
  EXPECT_THAT(choose(matmulNest(4, 6, 6)), testing::HasSubstr("row-reduction"));

  NestShape transcendental = matmulNest(64, 64, 64);
  transcendental.vectorBody = false;
  EXPECT_EQ(choose(transcendental), "row-reduction");

  // A reduction outside a parallel loop, with B strided along the output's contiguous dim.
  NestShape strided = matmulNest(64, 64, 64);
  strided.reduction = {false, true, false};
  strided.strides = {{64, 0, 1}, {0, 64, 1}, {64, 0, 1}};
  EXPECT_THAT(choose(strided), testing::StartsWith("loops ("));
}

// Partial specialization: runtime extents count as kNominalExtent (strides too), and only m,
// dot's n, outer's reduction and the dims outside the tile may be runtime values.
NestShape withRuntime(NestShape nest, std::vector<bool> runtime) {
  nest.runtime = std::move(runtime);
  return nest;
}

TEST(Strategy, RuntimeExtents) {
  const int64_t r = loops::kNominalExtent;
  // Token count as M: the S7 tile, k blocks, packing and groups of n blocks (a runtime m counts
  // as its nominal m blocks, which pack the next pair's panel between them, and its nominal 256
  // rows keep A's slice in 128 KiB with k blocks of 128).
  EXPECT_EQ(choose(withRuntime(matmulNest(r, 4096, 4096), {true, false, false})),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8 k-block=128 pack=#1 n-group=32");
  EXPECT_EQ(choose(withRuntime(matmulNest(r, 4096, 4096), {true, false, false}), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x4 lanes=16 k-block=128 pack=#1 n-group=8");
  // A runtime reduction (P x V over a runtime KV length) still takes the outer tile, and with
  // m blocks to reuse them (prefill over a runtime length), packed panels as long as k.
  EXPECT_EQ(choose(withRuntime(matmulNest(4, r, 128), {false, false, true}), Target::avx512()),
            "contraction.outer m=d0 n=d1 k=d2 tile=4x4 lanes=16");
  EXPECT_EQ(choose(withRuntime(matmulNest(r, r, 128), {true, false, true})),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 pack=#1");
  EXPECT_EQ(
      choose(withRuntime(matmulNest(r, r, 128), {true, false, true}), Target::avx2(), "pack=0"),
      "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8");
  // A runtime n (outer's vectorized dim) takes the outer tile over its whole n blocks, B read
  // in place; a runtime k read contiguously by both inputs (dot's vectorized dim) leaves plain
  // loops.
  EXPECT_EQ(choose(withRuntime(matmulNest(64, 64, r), {false, true, false})),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8");
  EXPECT_EQ(choose(withRuntime(transposedNest(64, r, 64), {false, false, true})), "row-reduction");
  // Q x K^T over runtime keys, the output's contiguous dim n: at decode (one m block) dot takes
  // them, in a runtime number of n blocks, then one-column tiles; at prefill (queries runtime
  // too) outer packs their whole n blocks transposed, as it does over a constant key count.
  EXPECT_EQ(choose(withRuntime(transposedNest(4, 128, r), {false, true, false})),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  EXPECT_EQ(choose(withRuntime(transposedNest(r, 128, r), {true, true, false})),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x4 lanes=8 pack=#1^T");
  // Key rows 4 KiB apart: prefetched when one m block reads them (decode), not when the next
  // m blocks read them again from cache (prefill, dot by hand).
  NestShape keys = withRuntime(transposedNest(4, 128, r), {false, true, false});
  keys.strides = {{128, 0, 1}, {0, 1024, 1}, {r, 1, 0}};
  EXPECT_EQ(choose(keys), "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8 prefetch=4");
  keys = withRuntime(transposedNest(r, 128, r), {true, true, false});
  keys.strides = {{128, 0, 1}, {0, 1024, 1}, {r, 1, 0}};
  EXPECT_EQ(choose(keys, Target::avx2(), "pipeline=contraction.dot"),
            "contraction.dot m=d0 n=d1 k=d2 tile=4x2 lanes=8");
  // Any tile=MxN fits a runtime n; a constant one still needs N to divide it.
  EXPECT_EQ(choose(withRuntime(transposedNest(r, 128, r), {true, true, false}), Target::avx2(),
                   "tile=2x3"),
            "contraction.outer m=d0 n=d1 k=d2 tile=2x3 lanes=8 pack=#1^T");
  EXPECT_EQ(choose(withRuntime(transposedNest(r, 128, r), {true, true, false}), Target::avx2(),
                   "pipeline=contraction.dot,tile=2x3"),
            "contraction.dot m=d0 n=d1 k=d2 tile=2x3 lanes=8");
  // GEMV with a runtime K does not stream.
  EXPECT_EQ(choose(withRuntime(matmulNest(1, r, 4096), {false, false, true})),
            "contraction.outer m=- n=d1 k=d2 tile=1x4 lanes=8");
  // A runtime token count takes contraction.ranks, which counts its slots at run time
  // (contraction.gather sizes its vectors of pairs when it compiles); k blocks as for 256
  // tokens (2 KiB a k), of up to half of L2: none for 512 k (1 MiB), 512 k for 2048.
  // Runtime rows or a runtime reduction leave plain loops.
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(64, 512, 8, 2, r), {false, false, true, false}),
                   Target::avx2(), "ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=4x2 lanes=8");
  // The other gather pipelines, forced there, say so (their reason used to be empty).
  for (const char *pipeline : {"contraction.gather", "contraction.choices"})
    EXPECT_THROW(
        {
          try {
            loops::selectStrategy(
                withRuntime(mulMatIdNest(64, 512, 8, 2, r), {false, false, true, false}),
                Target::avx2(), loops::parseConfig(fmt::format("pipeline={}", pipeline)));
          } catch (const Error &e) {
            EXPECT_THAT(e.what(), testing::HasSubstr("does not apply: it counts its pairs at run "
                                                     "time, which only contraction.ranks takes"));
            throw;
          }
        },
        Error)
        << pipeline;
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(64, 2048, 8, 2, r), {false, false, true, false}),
                   Target::avx2(), "ranks=in-order"),
            "contraction.ranks m=d0 n=- k=d3 tile=4x2 lanes=8 k-block=512");
  // With 16 registers the ranks go by choice, those of even routing counted at run time, and
  // the tile takes its own k blocks, as for a constant count.
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(64, 2048, 8, 2, r), {false, true, true, false})),
            "contraction.ranks m=d0 n=- k=d3 tile=3x4 lanes=8 k-block=64 ranks=by-choice "
            "k-blocks=in-tile");
  // With 16 lanes, 4x4 tiles as for a constant count: a runtime count pads the last rank
  // block by up to three vectors of slots.
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(64, 2048, 8, 2, r), {false, false, true, false}),
                   Target::avx512()),
            "contraction.ranks m=d0 n=- k=d3 tile=4x4 lanes=16 k-block=512");
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(r, 128, 8, 2, 32), {true, false, false, false})),
            "row-reduction");
  EXPECT_EQ(choose(withRuntime(mulMatIdNest(64, r, 8, 2, 32), {false, false, false, true})),
            "row-reduction");
  EXPECT_THAT(
      [&] {
        loops::selectStrategy(withRuntime(matmulNest(64, r, 256), {false, false, true}),
                              Target::avx2(), loops::parseConfig("k-block=64"));
      },
      testing::ThrowsMessage<Error>(
          testing::HasSubstr("k blocks need constant extents (but for m)")));
  EXPECT_THAT(
      [&] {
        loops::selectStrategy(withRuntime(matmulNest(64, 64, r), {false, true, false}),
                              Target::avx2(), loops::parseConfig("pack=1"));
      },
      testing::ThrowsMessage<Error>(
          testing::HasSubstr("packing needs constant extents (but for m and k)")));
}

TEST(Strategy, OverridesApply) {
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx2(), "tile=6x2,k-block=0,pack=0"),
            "contraction.outer m=d0 n=d1 k=d2 tile=6x2 lanes=8");
  EXPECT_EQ(choose(matmulNest(128, 4096, 4096), Target::avx2(), "pipeline=loops"), "row-reduction");
  EXPECT_EQ(choose(transposedNest(64, 64, 64), Target::avx2(), "pipeline=contraction.dot,tile=2x2"),
            "contraction.dot m=d0 n=d1 k=d2 tile=2x2 lanes=8");
}

TEST(Strategy, BadConfigsAreErrors) {
  auto error = [](const std::string &config, const NestShape &nest) {
    try {
      loops::selectStrategy(nest, Target::avx2(), loops::parseConfig(config));
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  NestShape mm = matmulNest(64, 256, 256);
  EXPECT_THAT(error("tile=4", mm), testing::HasSubstr("is not MxN"));
  EXPECT_THAT(error("tile=0x2", mm), testing::HasSubstr("is not MxN"));
  EXPECT_THAT(error("colour=blue", mm), testing::HasSubstr("unknown key 'colour'"));
  EXPECT_THAT(error("pipeline=fast", mm), testing::HasSubstr("unknown pipeline 'fast'"));
  EXPECT_THAT(error("k-block=-3", mm), testing::HasSubstr("is not an integer from 0 to 2^63"));
  EXPECT_THAT(error("k-block=99999999999999999999", mm),
              testing::HasSubstr("is not an integer from 0 to 2^63"));
  // A key given twice is a typo to point out, not a choice to take the last of.
  EXPECT_THAT(error("tile=4x2,k-block=0,tile=6x1", mm), testing::HasSubstr("tile is given twice"));
  // Spaces around keys and values are the same to either side of '=', and the choices print in
  // one order and spelling (the kernel cache's key).
  EXPECT_EQ(error(" tile = 4x2 , k-block= 64", mm), "no error");
  EXPECT_EQ(loops::parseConfig(" k-block= 64, tile = 4x2 ,pack=1,ranks=in-order").str(),
            "tile=4x2,k-block=64,pack=1,ranks=in-order");
  EXPECT_EQ(loops::parseConfig("").str(), "");
  EXPECT_THAT(error("tile=4x2,=3", mm), testing::HasSubstr("'=3' is not key=value"));
  // Plain loops take no tiles or blocks: they would be dropped without a word.
  EXPECT_THAT(error("pipeline=loops,k-block=7", mm),
              testing::HasSubstr("pipeline=loops takes no other choices"));
  EXPECT_EQ(error("pipeline=loops", mm), "no error");
  EXPECT_THAT(error("pack=yes", mm), testing::HasSubstr("is not 0 or 1"));
  EXPECT_THAT(error("ranks=sorted", mm),
              testing::HasSubstr("ranks 'sorted' is not by-choice or in-order"));
  // Nests that take no contraction.ranks ignore `ranks=`: it may be set for a whole function.
  EXPECT_EQ(error("ranks=by-choice", mm), "no error");
  EXPECT_THAT(error("k-blocks=inside", mm),
              testing::HasSubstr("k-blocks 'inside' is not in-tile or outside"));
  EXPECT_EQ(error("k-blocks=in-tile", mm), "no error"); // as `ranks=`
  EXPECT_THAT(error("prefetch=-1", mm), testing::HasSubstr("is not an integer from 0 to 64"));
  EXPECT_THAT(error("prefetch=far", mm), testing::HasSubstr("is not an integer from 0 to 64"));
  EXPECT_THAT(error("key-chunks=0", mm), testing::HasSubstr("is not an integer from 1 to 64"));
  EXPECT_THAT(error("key-chunks=65", mm), testing::HasSubstr("is not an integer from 1 to 64"));
  EXPECT_EQ(error("key-chunks=4", mm), "no error"); // only attention takes it
  EXPECT_THAT(error("blocks-outside=2", mm), testing::HasSubstr("is not 0 or 1"));
  EXPECT_EQ(error("blocks-outside=1", mm), "no error"); // only contraction.dot takes it
  EXPECT_THAT(error("tile", mm), testing::HasSubstr("is not key=value"));
  // N need not divide n's 32 vectors (10 n blocks, then 2 vectors left over), but a transposed
  // B packs whole n blocks only, and N is at most n's vectors.
  EXPECT_EQ(error("tile=2x3", mm), "no error");
  EXPECT_THAT(error("pipeline=contraction.outer,tile=2x3", transposedNest(512, 128, 128)),
              testing::HasSubstr("nest: N 3 must divide its 16 vectors"));
  EXPECT_THAT(error("tile=2x5", matmulNest(64, 256, 32)),
              testing::HasSubstr("nest: N 5 must be at most its 4 vectors"));
  EXPECT_THAT(error("pipeline=contraction.outer,tile=5x1", matmulNest(4, 256, 256)),
              testing::HasSubstr("nest: M 5 is more than its 4 rows"));
  EXPECT_THAT(error("k-block=100", mm), testing::HasSubstr("k-block 100 does not divide"));
  // contraction.dot takes no k blocks at all (it used to say a dividing k-block did not divide).
  EXPECT_THAT(error("k-block=64", transposedNest(4, 128, 512)),
              testing::HasSubstr("k-block 64 does not apply: contraction.dot sums each tile's "
                                 "dot products over the whole reduction"));
  EXPECT_THAT(error("n-group=-2", mm), testing::HasSubstr("not a non-negative integer"));
  // Each condition of n blocks in groups, named as it fails.
  EXPECT_THAT(error("k-block=128,n-group=3", mm),
              testing::HasSubstr("n-group=3 does not divide the nest's 8 n blocks"));
  EXPECT_THAT(error("n-group=2", matmulNest(6, 128, 1024)),
              testing::HasSubstr("n-group=2 does not apply: groups need a packed B"));
  EXPECT_THAT(error("k-block=256,n-group=2", mm),
              testing::HasSubstr("n-group=2 does not apply: groups need two k blocks or more, "
                                 "and k-block 256 leaves 1"));
  EXPECT_THAT(error("pipeline=contraction.dot,n-group=2", transposedNest(64, 256, 256)),
              testing::HasSubstr("n-group=2 does not apply: groups need contraction.outer, not "
                                 "contraction.dot"));
  EXPECT_EQ(error("k-block=128,n-group=2", mm), "no error");
  // Only the reasons of the pipelines tried: a leading "; " was outer's empty one.
  EXPECT_THAT(error("pipeline=contraction.dot", mm),
              testing::HasSubstr("pipeline contraction.dot does not apply: no reduction dim"));
  EXPECT_THAT(error("pipeline=contraction.outer,pack=1", matmulNest(1, 256, 256)),
              testing::HasSubstr("pack=1 does not apply: too few m blocks read each panel (1 m "
                                 "block of 1 row)"));
  // S7's panels in k blocks of 1024, one region per n block: 16 MiB, over what a pack may use.
  EXPECT_THAT(error("k-block=1024,pack=1", matmulNest(128, 4096, 4096)),
              testing::HasSubstr("pack=1 does not apply: its panels of 1024 rows would take 16 "
                                 "MiB, over the 8 MiB a pack may use"));
  EXPECT_EQ(error("k-block=512,pack=1", matmulNest(128, 4096, 4096)), "no error");
  EXPECT_THAT(error("tile=4x16", matmulNest(1, 8, 136)),
              testing::HasSubstr("contraction.stream takes tile=RxP with P at most k (8) or "
                                 "dividing its 17 vectors"));
  // contraction.dot's tiles may leave columns over (one at a time after the n blocks), so an
  // override keeps or sets such a tile: its own over 31 columns had been refused for any
  // `--config`, `prefetch=1` too. Its NR is a power of two, whose rows' sums add up as one tree.
  EXPECT_EQ(choose(transposedNest(13, 32, 31), Target::avx512()),
            "contraction.dot m=d0 n=d1 k=d2 tile=5x4 lanes=16");
  EXPECT_EQ(choose(transposedNest(63, 128, 63), Target::avx512()),
            "contraction.dot m=d0 n=d1 k=d2 tile=5x4 lanes=16");
  EXPECT_EQ(error("prefetch=1", transposedNest(13, 32, 31)), "no error");
  EXPECT_EQ(error("tile=3x4", transposedNest(13, 32, 31)), "no error");
  EXPECT_THAT(error("tile=3x6", transposedNest(13, 32, 5)),
              testing::HasSubstr("N 6 must be at most its 5 columns"));
  // Parts need not divide k: the first takes the rows past the others'.
  EXPECT_EQ(error("tile=4x3", matmulNest(1, 256, 256)), "no error");
  // Parts of k need not divide the vectors; the columns past them take parts of k only.
  EXPECT_EQ(error("tile=4x2", matmulNest(1, 64, 1017)), "no error");
  EXPECT_EQ(error("tile=4x3", matmulNest(1, 64, 1015)), "no error");
  EXPECT_THAT(error("tile=2x5", matmulNest(1, 2, 1002)),
              testing::HasSubstr("contraction.stream over 1002 columns, 2 past its whole vectors, "
                                 "takes tile=RxP with P at most k (2)"));
  EXPECT_THAT(error("pack=1", matmulNest(1, 256, 256)),
              testing::HasSubstr("and no k-block or packing"));
  // contraction.stream forced where it does not fit says why (its reason used to be empty).
  EXPECT_THAT(error("pipeline=contraction.stream", matmulNest(65, 512, 1040)),
              testing::HasSubstr("does not apply: it has 65 rows of output, more than the 6 it "
                                 "streams B for"));
  EXPECT_THAT(error("pipeline=contraction.stream", matmulNest(4, 64, 64)),
              testing::HasSubstr("does not apply: its B of 16384 bytes is too small to stream for "
                                 "4 rows (from 1048576 bytes)"));
  NestShape runtimeRows = matmulNest(loops::kNominalExtent, 256, 256);
  runtimeRows.runtime = {true, false, false};
  EXPECT_THAT(error("pipeline=contraction.stream", runtimeRows),
              testing::HasSubstr("does not apply: it has runtime extents, and contraction.stream "
                                 "splits its work when it is compiled"));
  // A bad config is refused when the context is made.
  EXPECT_THROW(Context{withConfig("tile=x")}, Error);
}

// A zero extent anywhere leaves no whole tile to compute: the contraction pipelines used to emit
// a tile whose n-block loop had been dropped, so the LLVM IR read an unbound variable.
TEST(Strategy, EmptyNestsStayPlainLoops) {
  for (const NestShape &nest : {matmulNest(0, 64, 64), matmulNest(4, 0, 64), matmulNest(4, 64, 0),
                                transposedNest(4, 64, 0), transposedNest(0, 64, 64)}) {
    EXPECT_EQ(choose(nest), "row-reduction (the nest is empty)");
    // Overrides do not apply to an empty nest either (no tile fits, and none is needed).
    EXPECT_EQ(choose(nest, Target::avx2(), "pipeline=contraction.outer,tile=4x2,k-block=16"),
              "row-reduction (the nest is empty)");
    EXPECT_EQ(choose(nest, Target::avx512(), "pipeline=contraction.dot"),
              "row-reduction (the nest is empty)");
  }
}

TEST(Strategy, EmptyNestsLowerToLlvm) {
  Module attention = context().load(componentPath("attention/attention_gqa.mlir"));
  // Found by fuzz_specialize: the value head dim (P V's n) is 0.
  std::vector<std::string> types{"1x4x8x8xf32", "1x6x2x8xf32", "1x6x2x0xf32", "f32"};
  std::string loops = attention.function("attention_gqa").emit(Stage::Loops, types);
  EXPECT_THAT(loops, testing::HasSubstr("row-reduction (the nest is empty)"));
  EXPECT_THAT(attention.function("attention_gqa").emit(Stage::LLVM, types),
              testing::HasSubstr("define"));
  Module linear = context().load(componentPath("linear/matmul.mlir"));
  for (auto types : std::vector<std::vector<std::string>>{
           {"8x16xf32", "16x0xf32"}, {"8x0xf32", "0x16xf32"}, {"0x16xf32", "16x16xf32"}})
    EXPECT_THAT(linear.function("matmul").emit(Stage::LLVM, types), testing::HasSubstr("define"))
        << fmt::format("{}", fmt::join(types, ", "));
}

// The choices each target leads to in the loop IR, on any host (the golden tests above pin both
// targets without a JIT).
void checkLoopIrNamesEachNestsStrategy(const char *cpu) {
  const bool wide = jit::Engine::forCpu(cpu).target().vectorBits == 512;
  auto contextFor = [&](std::string config) {
    return std::make_unique<Context>(forCpu(cpu, std::move(config)));
  };
  std::unique_ptr<Context> plain = contextFor("");
  const int lanes = wide ? 16 : 8;
  Module attention = plain->load(componentPath("attention/attention_gqa.mlir"));
  std::string loops =
      attention.function("attention_gqa")
          .emit(Stage::Loops, {"1x128x32x128xf32", "1x128x8x128xf32", "1x128x8x128xf32", "f32"});
  EXPECT_THAT(loops, testing::HasSubstr("// iree_linalg_ext.attention at "));
  // Q K^T packs K transposed, P V packs V: both read in place, one head per packing region.
  EXPECT_THAT(loops, testing::HasSubstr(
                         wide ? ": contraction.outer m=d1 n=d2 k=d3 tile=4x4 lanes=16 pack=#1^T\n"
                              : ": contraction.outer m=d1 n=d2 k=d3 tile=2x4 lanes=8 pack=#1^T\n"));
  EXPECT_THAT(loops, testing::HasSubstr("panel of '%key_collapsed', transposed\n"));
  // Transposed in registers, in square blocks of 8: 3 rounds of 8 shuffles.
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("for column_block in 0..{} {{\n", wide ? 8 : 4)));
  EXPECT_EQ(count(loops, "shuffle("), 8 * 3) << loops;
  EXPECT_THAT(loops, testing::HasSubstr(": contraction.outer m=d1 n=d2 k=d3 tile="));
  EXPECT_THAT(loops, testing::HasSubstr(" pack=#1\n"));
  // At decode, four query rows per KV head share too little: Q K^T stays contraction.dot.
  std::string decode =
      attention.function("attention_gqa_decode")
          .emit(Stage::Loops, {"1x1x32x128xf32", "1x512x8x128xf32", "1x512x8x128xf32", "f32"});
  // (Per chunk of 256 keys, d0, and KV head, d1: generalize-attention splits the keys.)
  EXPECT_THAT(decode, testing::HasSubstr(": contraction.dot m=d2 n=d3 k=d4 tile=4x"));
  EXPECT_THAT(decode, testing::HasSubstr(" prefetch=4 blocks-outside=d1\n"));
  // P V's V, 128 KiB a KV head and chunk of keys, read in place, not packed. Its key rows are
  // 4 KiB apart, sharing L1 sets: one tile takes all 4 query rows, so that V is read once (with
  // 8 lanes, 4x2 rather than the 2x4 its loads alone would choose), and the keys run in blocks
  // of 16, each over every KV head.
  EXPECT_THAT(decode, testing::Not(testing::HasSubstr(" pack=#1\n")));
  EXPECT_THAT(decode, testing::HasSubstr(fmt::format(
                          ": contraction.outer m=d2 n=d3 k=d4 tile=4x{} lanes={} k-block=16 "
                          "blocks-outside=d1\n",
                          wide ? 4 : 2, wide ? 16 : 8)));
  EXPECT_THAT(decode,
              testing::ContainsRegex(fmt::format("for k_block_[0-9]+ in 0\\.\\.16 \\{{\n *for "
                                                 "d1_[0-9]+ in 0\\.\\.8 \\{{\n *for n_block_[0-9]+ "
                                                 "in 0\\.\\.{} ",
                                                 wide ? 2 : 8)));
  // The n blocks outside the KV heads: each block of keys reads its rows of K whole.
  EXPECT_THAT(decode, testing::HasSubstr(fmt::format(
                          "  for d0 in 0..2 parallel(chunks of at least 1) {{\n    for n_block in "
                          "0..{} {{\n      for d1 in 0..8 {{\n",
                          wide ? 64 : 128)));
  EXPECT_THAT(decode, testing::HasSubstr(
                          "// prefetch the rows of '%key_collapsed_expanded' 4 tiles ahead\n"));
  // The first line of the last key row 4 tiles ahead, one line of each 512-byte row: the L2's
  // own prefetchers bring the rest.
  EXPECT_THAT(decode,
              testing::HasSubstr(fmt::format("prefetch key[(((d1 * 128) + ((((n_block + 4) * {}) + "
                                             "{}) * 1024)) + (d0 * 262144))]\n",
                                             wide ? 4 : 2, wide ? 3 : 1)));
  EXPECT_EQ(count(decode, "prefetch key["), wide ? 4 : 2) << decode;
  EXPECT_THAT(decode, testing::HasSubstr(fmt::format(": f32x{0} = broadcast<{0}>(0f)\n", lanes)));
  EXPECT_THAT(decode, testing::HasSubstr(" + reduce_add(acc_"));

  Module linear = plain->load(componentPath("linear/matmul.mlir"));
  loops = linear.function("matmul").emit(Stage::Loops, {"128x4096xf32", "4096x4096xf32"});
  EXPECT_THAT(loops, testing::HasSubstr(wide ? "// pack this block's 256x64 panel of '%w'"
                                             : "// pack this block's 256x16 panel of '%w'"));
  // Groups of n blocks spanning 2 KiB of B's rows (8 blocks wide, 32 narrow: 8 groups either
  // way), the parallel loop; in each, the (k block, n block) pairs, k blocks outside. Two panel
  // slots per chunk of groups: the m blocks pack the next pair's panel into the other, a chunk
  // of rows after each tile, prefetched a line every few steps of its k loop: 21 tiles of 6 rows
  // (6x4 wide, 6x2 narrow), the first 16 of them 16 rows a chunk, in k blocks of 256.
  const int group = wide ? 8 : 32, knPairs = 16 * group;
  EXPECT_THAT(loops, testing::HasSubstr("  for n_group in 0..8 parallel(chunks of at least 1) "
                                        "chunk from pack_region {\n"));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(
                  "    for kn_pair in 0..{1} {{\n      let k_block: index = (kn_pair / {0})\n"
                  "      let n_block: index = ((n_group * {0}) + remui(kn_pair, {0}))\n"
                  "      for m_block in 0..21 {{\n",
                  group, knPairs)));
  EXPECT_THAT(loops, testing::HasSubstr("temp packed_w: f32[2097152]"));
  // One prefetch in the k loop, with no branch: the 64 lines of a chunk of 16 rows of 4 lines
  // (wide) one every 4 steps, the 16 of 16 rows of one line (narrow) one every 16; the m blocks
  // past the 16 chunks, and the last pair, prefetch the last chunk's lines again.
  EXPECT_THAT(loops, testing::HasSubstr("// prefetch a line of the next pair's panel's 16 rows\n"));
  EXPECT_EQ(count(loops, "prefetch w["), 1) << loops;
  EXPECT_THAT(loops,
              testing::HasSubstr(
                  wide ? "prefetch w[(((((n_group * 8) + remui(minsi((kn_pair + 1), 127), 8)) * "
                         "64) + (remui((d2 / 4), 4) * 16)) + ((((minsi((kn_pair + 1), 127) / 8) * "
                         "256) + ((minsi(m_block, 15) * 16) + ((d2 / 4) / 4))) * 4096))]\n"
                       : "prefetch w[((((n_group * 32) + remui(minsi((kn_pair + 1), 511), 32)) * "
                         "16) + ((((minsi((kn_pair + 1), 511) / 32) * 256) + ((minsi(m_block, 15) "
                         "* 16) + (d2 / 16))) * 4096))]\n"));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("if andi(cmp.slt((kn_pair + 1), {}), "
                                                    "cmp.slt(m_block, 16)) {{\n",
                                                    knPairs)));
  EXPECT_THAT(loops, testing::HasSubstr("// then pack them\n"));

  // GEMV: each part of the output adds four rows of the weights at a time; eight with 16-lane
  // vectors, each load prefetching the line eight rows further, its own at the end.
  loops = linear.function("matmul").emit(Stage::Loops, {"1x4096xf32", "4096x4096xf32"});
  EXPECT_THAT(loops, testing::HasSubstr(
                         wide ? ": contraction.stream m=- n=d1 k=d2 tile=8x2 lanes=16 split=k "
                                "prefetch=1\n"
                              : ": contraction.stream m=- n=d1 k=d2 tile=4x2 lanes=8 split=k\n"));
  EXPECT_THAT(loops, testing::HasSubstr("for part in 0..2 parallel"));
  EXPECT_THAT(loops,
              testing::HasSubstr(wide ? "for k_step in 0..256 {" : "for k_step in 0..512 {"));
  EXPECT_EQ(count(loops, "prefetch w["), wide ? 8 : 0) << loops;
  if (wide) {
    EXPECT_THAT(loops, testing::HasSubstr("prefetch w[((v * 16) + (minsi((((part * 2048) + "
                                          "(k_step * 8)) + 8), 4088) * 4096))]"));
  }
  EXPECT_THAT(loops, testing::HasSubstr("// add the parts' partial sums"));

  // mul_mat_id: the ids are checked once; each row's experts are loaded as one vector and
  // permuted by each vector of slots' experts; the rows after the tile's prefetched as it runs.
  // At 64 tokens the 128 pairs fill whole tiles of slots, and the ids, the input [32, 2, 64]
  // and the output [64, 2, 64] hold them in order: the tiles read and add to them in place.
  // contraction.ranks in order by hand: with 16 vector registers the strategy takes them by
  // choice at 64 tokens and contraction.gather at 60. With 16 lanes a vector holds 16 slots, and a
  // step takes two k: each row's 8 experts at either k, a vector of 8 each, permuted into the
  // slots' 16 lanes by the same vector of their experts.
  std::unique_ptr<Context> ranks = contextFor("pipeline=contraction.ranks,ranks=in-order");
  Module moe = ranks->load(componentPath("moe/mul_mat_id.mlir"));
  const std::vector<std::string> t64 = {"64x32x8xf32", "32x2x64xf32", "2x64xi32"};
  loops = moe.function("mul_mat_id").emit(Stage::Loops, t64);
  const std::string ranksTile = wide ? "4x4" : "4x2", nr = wide ? "4" : "2";
  // The first slot of the tile's vector n, its lanes, and the tile's first k.
  const std::string slot = fmt::format("((rank_block * {}) * {})", nr, lanes);
  const std::string vec = fmt::format("f32x{}", lanes), step = wide ? "(d3 * 2)" : "d3";
  auto at = [&](const std::string &index) { return fmt::format("[{} : {}]", index, lanes); };
  EXPECT_THAT(loops, testing::HasSubstr("check cmp.ult(index_cast<index>(ids[choice]), 8)"));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(": contraction.ranks m=d0 n=- k=d3 tile={} lanes={}\n",
                                             ranksTile, lanes)));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("temp "))) << loops;
  EXPECT_THAT(loops,
              testing::HasSubstr(wide ? "for rank_block in 0..2 {" : "for rank_block in 0..8 {"));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("let lanes: i{} = ids{}", vec.substr(1), at(slot))));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("var acc: {} = out0{}", vec,
                                                    at("(((m_block * 4) * 128) + " + slot + ")"))));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("let x: {} = input{}", vec,
                                                    at("((" + step + " * 128) + " + slot + ")"))));
  EXPECT_THAT(loops, testing::HasSubstr("let t: f32x8 = weights[(((m_block * 4) * 256) + (" + step +
                                        " * 8)) : 8]"));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("let prod: {} = (permute(t, lanes) * x)", vec)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("out0{} = acc",
                                                    at("(((m_block * 4) * 128) + " + slot + ")"))));
  if (wide) { // the next k step: the row's next 8 experts, the same lanes, the next k's input
    EXPECT_THAT(loops, testing::HasSubstr(
                           "let t_1: f32x8 = weights[((((m_block * 4) * 256) + ((d3 * 2) * 8)) + "
                           "8) : 8]"));
    EXPECT_THAT(loops, testing::HasSubstr("let x_1: f32x16 = input[((((d3 * 2) + 1) * 128) + " +
                                          slot + ") : 16]"));
    EXPECT_THAT(loops, testing::HasSubstr("let prod_4: f32x16 = (permute(t_1, lanes) * x_1)"));
    EXPECT_THAT(loops, testing::HasSubstr("let sum_4: f32x16 = (acc +[reassoc] prod_4)"));
    EXPECT_THAT(loops, testing::Not(testing::HasSubstr("broadcast<16>(8:i32)")));
  }
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("read each pair's sum back")));
  // A tile reads each row (1 KiB) in one run, shorter than a page: the rows after the tile's
  // are prefetched as it runs, the last tile's its own rather than past the weights. Their 64
  // lines take two lines a step over both passes of 16 steps (of two k each), or a line a step
  // over two of the eight passes of 32 steps, which the other passes take turns with.
  EXPECT_THAT(
      loops, testing::HasSubstr(wide ? "prefetch weights[((minsi(((m_block * 4) + 4), 60) * 256) + "
                                       "(((rank_block * 16) + d3) * 32))]"
                                     : "prefetch weights[((minsi(((m_block * 4) + 4), 60) "
                                       "* 256) + (((remui(rank_block, 2) * 32) + d3) * 16))]"));
  EXPECT_EQ(count(loops, "prefetch weights["), wide ? 2 : 1) << loops;
  // At 60 tokens the 120 pairs take 128 slots with 16 lanes (with 8 they are 15 vectors, and
  // tiles of 2x3 take them in place; at 62 the 124 pairs take 128): the slots' experts and input
  // go to temporaries, 0 in the padding, and each pair's sum is read back from its slot. The
  // input is packed vector of slots by vector of slots, each its run of 32 k rows and one line
  // more, so that a tile reads each of its vectors in one stream, the streams in different L1
  // sets.
  const int padded = wide ? 60 : 62, pairs = 2 * padded;
  const int64_t slotRun = 32 * lanes + 16;
  const std::vector<std::string> tPadded = {"64x32x8xf32", fmt::format("32x2x{}xf32", padded),
                                            fmt::format("2x{}xi32", padded)};
  loops = moe.function("mul_mat_id").emit(Stage::Loops, tPadded);
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         ": contraction.ranks m=d0 n=- k=d3 tile={} lanes={}: each slot's choice "
                         "and input\n",
                         ranksTile, lanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "slot_choice[(d2 + (d1 * {0}))] = ids[(d2 + (d1 * {0}))]", padded)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("slot_choice[({} + j)] = 0:i32", pairs)));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("temp packed_input: f32[{}]", 128 / lanes * slotRun)));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(
                  "packed_input[(((((d2 + (d1 * {0})) / {2}) * {3}) + (d3 * {2})) + "
                  "remui((d2 + (d1 * {0})), {2}))] = input[((d2 + (d1 * {0})) + (d3 * {1}))]",
                  padded, pairs, lanes, slotRun)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "packed_input[((((({0} + j) / {1}) * {2}) + (d3 * {1})) + remui(({0} + "
                         "j), {1}))] = 0f",
                         pairs, lanes, slotRun)));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(
                  "let x: {0} = packed_input[(((rank_block * {1}) * {2}) + ({3} * {4})) : {4}]",
                  vec, nr, slotRun, step, lanes)));
  EXPECT_THAT(loops, testing::HasSubstr(
                         fmt::format("let lanes: i{} = slot_choice{}", vec.substr(1), at(slot))));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("var acc: {0} = broadcast<{1}>(0f)", vec, lanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("by_slot{} = acc",
                                                    at("(((m_block * 4) * 128) + " + slot + ")"))));
  EXPECT_THAT(loops, testing::HasSubstr("// read each pair's sum back from its slot"));
  // k blocks by hand: in parallel over 8 parts of the rows, each part's m blocks run once per
  // block, each tile adding to its slots' sums (in place, the output's; in temporaries, 0 in the
  // first block), reading its block of the input and prefetching the next tile's rows of the
  // same block, row after row.
  // The loop IR of mul_mat_id under a --config override, at t64 unless told.
  auto configuredLoops = [&](const char *config, std::vector<std::string> shapes = {}) {
    return contextFor(config)
        ->load(componentPath("moe/mul_mat_id.mlir"))
        .function("mul_mat_id")
        .emit(Stage::Loops, shapes.empty() ? t64 : shapes);
  };
  loops = configuredLoops("pipeline=contraction.ranks,ranks=in-order,k-block=16");
  EXPECT_THAT(loops, testing::HasSubstr(
                         "  for m_part in 0..8 parallel(chunks of at least 1) {\n"
                         "    // each m block of the part adds the k block's products to its slots\n"
                         "    for k_block in 0..2 {\n"
                         "      for m_block in 0..2 {\n"));
  EXPECT_THAT(loops, testing::HasSubstr(
                         fmt::format("var acc: {} = out0[(((((m_part * 2) + m_block) * ", vec)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "let x: {} = input[((((k_block * 16) + {}) * 128) + ", vec, step)));
  EXPECT_THAT(loops, testing::HasSubstr(wide ? "for d3 in 0..8 {" : "for d3 in 0..16 {"));
  EXPECT_THAT(loops,
              testing::HasSubstr(
                  wide ? "prefetch weights[((((minsi(((((m_part * 2) + m_block) * 4) + 4), 60) + "
                         "divui((((rank_block * 8) + d3) * 2), 8)) * 256) + (k_block * 128)) + "
                         "(remui((((rank_block * 8) + d3) * 2), 8) * 16))]"
                       : "prefetch weights[((((minsi(((((m_part * 2) + m_block) * "
                         "4) + 4), 60) + divui(((remui(rank_block, 2) * 16) + d3), "
                         "8)) * 256) + (k_block * 128)) + (remui(((remui(rank_block, "
                         "2) * 16) + d3), 8) * 16))]"));
  loops = configuredLoops("pipeline=contraction.ranks,ranks=in-order,k-block=16", tPadded);
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         ": {0} = select(broadcast<{1}>(cmp.eq(k_block, 0)), broadcast<{1}>(0f), "
                         "by_slot[(((((m_part * 2) + m_block) * ",
                         vec, lanes)));
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(
                  "packed_input[(((rank_block * {}) * {}) + (((k_block * 16) + {}) * {})) : ", nr,
                  slotRun, step, lanes)));
  // By choice: the 16 ranks of even routing (128 pairs) take lane j for expert j mod 8, the
  // r-th pair of an expert slot r x 8 + its expert, 8 lanes a vector of slots with AVX2's
  // 256-bit vectors and 16 (two ranks, each row's experts loaded twice over) with AVX-512's;
  // the pairs past 16 of their expert follow in order (from slot 128), their experts in
  // slot_choice, in vectors of their own rounded up to whole tiles, counted at run time. Unused
  // slots take input 0; the tiles by choice multiply each row's experts as loaded, the others
  // permute them; each pair's sum is read back from its slot. Each pair's place in the packed
  // input is found once, for every k.
  const int byChoiceLanes = wide ? 16 : 8, byChoiceRun = 32 * byChoiceLanes + 16;
  const std::string byChoiceVec = fmt::format("f32x{}", byChoiceLanes);
  loops = configuredLoops("pipeline=contraction.ranks,ranks=by-choice,tile=3x4");
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format(
                  "lanes={} ranks=by-choice: each pair's slot by its choice", byChoiceLanes)));
  EXPECT_THAT(loops, testing::HasSubstr(
                         "slot[(d2 + (d1 * 64))] = index_cast<i32>(((index_cast<index>(rank_count["
                         "index_cast<index>(ids[(d2 + (d1 * 64))])]) * 8) + "
                         "index_cast<index>(ids[(d2 + (d1 * 64))])))"));
  EXPECT_THAT(loops,
              testing::HasSubstr("slot[(d2 + (d1 * 64))] = index_cast<i32>((128 + overflow))\n"
                                 "        slot_choice[(128 + overflow)] = ids[(d2 + (d1 * 64))]"));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "let slots: index = (128 + (permuted_vectors * {}))", byChoiceLanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "slot_place[(d2 + (d1 * 64))] = (((index_cast<index>(slot[(d2 + (d1 * "
                         "64))]) / {0}) * {1}) + remui(index_cast<index>(slot[(d2 + (d1 * 64))]), "
                         "{0}))",
                         byChoiceLanes, byChoiceRun)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "packed_input[(slot_place[(d2 + (d1 * 64))] + (d3 * {}))] = input[((d2 + "
                         "(d1 * 64)) + (d3 * 128))]",
                         byChoiceLanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "packed_input[(((((((minsi(index_cast<index>(rank_count[c]), 16) + rank) "
                         "* 8) + c) / {0}) * {1}) + (d3 * {0})) + "
                         "remui((((minsi(index_cast<index>(rank_count[c]), 16) + rank) * 8) + c), "
                         "{0}))] = 0f",
                         byChoiceLanes, byChoiceRun)));
  // The permuted vectors' run from vector 16 (8 lanes) or 8 (16 lanes) on (NR: 2 with 16
  // registers, 4 with 32).
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         "let x_4: {0} = packed_input[((({1} + (rank_block * {2})) * {3}) + (d3 * "
                         "{4})) : {4}]",
                         byChoiceVec, wide ? 8 : 16, wide ? 4 : 2, byChoiceRun, byChoiceLanes)));
  EXPECT_THAT(loops,
              testing::HasSubstr(wide ? "for rank_block in 0..2 {" : "for rank_block in 0..4 {"));
  // At most the vectors of every pair (128 pairs, 16 or 64 a tile): a bound for the cold-code
  // estimate.
  EXPECT_THAT(loops, testing::HasSubstr(
                         fmt::format("for rank_block in 0..minsi((permuted_vectors / {}), {})",
                                     wide ? 4 : 2, wide ? 2 : 8)));
  if (wide) {
    EXPECT_THAT(loops, testing::HasSubstr("let repeated: f32x16 = shuffle(t, t, [0 1 2 3 4 5 6 7 "
                                          "0 1 2 3 4 5 6 7])"));
    EXPECT_THAT(loops, testing::HasSubstr("let prod: f32x16 = (repeated * x)"));
  } else {
    EXPECT_THAT(loops, testing::HasSubstr("let prod: f32x8 = (t * x)"));
  }
  EXPECT_THAT(loops, testing::HasSubstr("permute("));
  EXPECT_THAT(loops, testing::HasSubstr("by_slot[((d0 * slots) + index_cast<index>(slot[(d2 + "
                                        "(d1 * 64))]))]"));
  // Forced contraction.gather: the pairs grouped by expert, each weight broadcast.
  loops = configuredLoops("pipeline=contraction.gather");
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         ": contraction.gather m=d0 n=- k=d3 tile=8x1 lanes={}: group the pairs by "
                         "choice\n",
                         lanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(
                         ": contraction.gather m=d0 n=- k=d3 tile=8x1 lanes={}\n", lanes)));
  // The input packed vector of slots by vector of slots, as contraction.ranks packs it.
  EXPECT_THAT(loops,
              testing::HasSubstr(fmt::format("temp packed_input: f32[{}]",
                                             loops::groupedVectors(128, 8, lanes) * slotRun)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format("= packed_input[((v * {}) + (d3 * {})) : {}]",
                                                    slotRun, lanes, lanes)));
  EXPECT_THAT(loops, testing::HasSubstr(fmt::format(": f32x{0} = (broadcast<{0}>(t_", lanes)));
  // At T = 1 every expert of a row is computed, the experts being the lanes.
  loops = plain->load(componentPath("moe/mul_mat_id.mlir"))
              .function("mul_mat_id")
              .emit(Stage::Loops, {"64x32x8xf32", "32x2x1xf32", "2x1xi32"});
  EXPECT_THAT(loops, testing::HasSubstr("check cmp.ult(index_cast<index>(ids[choice]), 8)"));
  EXPECT_THAT(loops, testing::HasSubstr(": contraction.choices m=d0 n=- k=d3 tile=4x1 lanes=8\n"));
  EXPECT_THAT(
      loops, testing::HasSubstr(": f32x8 = weights[((t + (d3 * 8)) + ((m_block * 4) * 256)) : 8]"));
  EXPECT_THAT(loops, testing::HasSubstr("temp by_choice: f32[1024]"));
  EXPECT_THAT(loops, testing::HasSubstr("// each pair takes the lane of its choice"));

  // rope: sin and cos vary with position and pair, not head: each is a table of S x D/2 computed
  // before the nest; the pair's two elements are unrolled so the pairs vectorize.
  Module rope = plain->load(componentPath("position/rope.mlir"));
  loops = rope.function("rope").emit(Stage::Loops,
                                     {"1x128x32x128xf32", "1x128xi64", "f32=10000", "f32=1"});
  EXPECT_THAT(loops, testing::HasSubstr("// 'math.cos' varies with 3 of the nest's 5 dims: a "
                                        "table of 8192\n"));
  EXPECT_THAT(loops, testing::HasSubstr("// 'math.sin' varies with 3 of the nest's 5 dims"));
  EXPECT_THAT(loops, testing::HasSubstr("for d3 in 0..64 vectorized {"));
  EXPECT_THAT(loops, testing::HasSubstr("= cmp.eq(1, 0)"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("for d4 in 0..2")));

  Module rms = plain->load(componentPath("normalization/rms_norm.mlir"));
  loops = rms.function("rms_norm_linalg").emit(Stage::Loops, {"32x4096xf32", "4096xf32", "f32"});
  EXPECT_THAT(loops, testing::HasSubstr(": row-reduction\n"));
  EXPECT_THAT(loops, testing::HasSubstr(": elementwise\n"));
  EXPECT_THAT(loops, testing::Not(testing::HasSubstr("contraction")));
  loops = rms.function("rms_norm_linalg")
              .emit(Stage::Loops, {"32x4096xf32", "4096xf32", "f32"}, Mode::Generic);
  EXPECT_THAT(loops, testing::HasSubstr("loops (its extents are runtime values)"));
}

TEST(Strategy, LoopIrNamesEachNestsStrategyAvx512) {
  checkLoopIrNamesEachNestsStrategy(kAvx512Cpu);
}
TEST(Strategy, LoopIrNamesEachNestsStrategyAvx2) { checkLoopIrNamesEachNestsStrategy(kAvx2Cpu); }

} // namespace
} // namespace frank::test
