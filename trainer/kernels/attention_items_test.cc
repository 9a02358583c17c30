// File: trainer/kernels/attention_items_test.cc
//
// The fused attention's work decomposition (attention_items.h) against a
// brute-force enumeration of the causal tile pairs: for every T from 1 to
// 4,096 positions and every split from 1 to 8 tiles, the query-side items
// cover each pair (query tile qt, key tile kt ≤ qt) exactly once, in chunks
// of at most `split` key tiles numbered 0, 1, … in key order; the key-side
// items cover each pair exactly once the same way from the columns' side;
// both enumerations have NumAttentionItems items, and the chunk counts the
// kernels use to combine partials (QueryTileChunks, KeyTileChunks) match
// the items that exist.
#include "trainer/kernels/attention_items.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

TEST(AttentionItemsTest, TilesOfT) {
  EXPECT_EQ(AttentionTiles(1), 1);
  EXPECT_EQ(AttentionTiles(64), 1);
  EXPECT_EQ(AttentionTiles(65), 2);
  EXPECT_EQ(AttentionTiles(1024), 16);
}

TEST(AttentionItemsTest, CoppeliusSizeHasOneItemPerTile) {
  // The default split (16) at T = 1,024: one chunk per tile, 16 items per
  // head (128 CTAs for 8 heads), nothing to combine.
  EXPECT_EQ(NumAttentionItems(16, kAttentionSplit), 16);
  EXPECT_EQ(QueryTileChunks(15, kAttentionSplit), 1);
  EXPECT_EQ(KeyTileChunks(0, 16, kAttentionSplit), 1);
  // T = 1,100 (18 tiles): the last two query tiles and the first two key
  // tiles have two chunks.
  EXPECT_EQ(NumAttentionItems(18, kAttentionSplit), 16 + 2 * 2);
  EXPECT_EQ(QueryTileChunks(17, kAttentionSplit), 2);
  EXPECT_EQ(KeyTileChunks(1, 18, kAttentionSplit), 2);
}

TEST(AttentionItemsTest, CoppeliusSizeHas30ItemsPerHeadAtSplit6) {
  // Runs 5–19's split: query tiles 0..5 one chunk, 6..11 two, 12..15
  // three (240 CTAs for 8 heads).
  EXPECT_EQ(NumAttentionItems(16, 6), 6 * 1 + 6 * 2 + 4 * 3);
  EXPECT_EQ(QueryTileChunks(15, 6), 3);
  EXPECT_EQ(KeyTileChunks(0, 16, 6), 3);
  EXPECT_EQ(KeyTileChunks(15, 16, 6), 1);
}

TEST(AttentionItemsTest, CoppeliusSizeWithOtherSplits) {
  // 4 tiles per chunk: query tiles 0..3 one chunk, 4..7 two, 8..11 three,
  // 12..15 four; 3 tiles: 0..2 one, … 12..14 five, 15 six.
  EXPECT_EQ(NumAttentionItems(16, 4), 4 * (1 + 2 + 3 + 4));
  EXPECT_EQ(NumAttentionItems(16, 3), 3 * (1 + 2 + 3 + 4 + 5) + 6);
  EXPECT_EQ(NumAttentionItems(16, 1), 16 * 17 / 2);
  EXPECT_EQ(QueryTileChunks(15, 3), 6);
  EXPECT_EQ(KeyTileChunks(1, 16, 4), 4);
}

// One enumeration of `tiles` tiles: item(i, &tile, &chunk, &lo, &hi) names
// a tile of its side and the range [lo, hi] of the other side's tiles;
// first(tile) is where chunk 0 starts, last(tile) the other side's last
// tile for it, chunks(tile) its chunk count, and pair(tile, other) the
// causal pair (query tile, key tile). Checks that the items cover every
// causal pair exactly once, each chunk of each tile once, chunk c starting
// at first + c · split and spanning at most split tiles.
template <typename Item, typename First, typename Last, typename Chunks,
          typename Pair>
void CheckCoversEveryCausalPairOnce(int T, int tiles, int split, Item item,
                                    First first, Last last, Chunks chunks,
                                    Pair pair) {
  std::set<std::pair<int, int>> pairs;
  std::map<int, std::set<int>> chunks_of_tile;
  for (int i = 0; i < NumAttentionItems(tiles, split); ++i) {
    int tile = -1, chunk = -1, lo = -1, hi = -1;
    item(i, &tile, &chunk, &lo, &hi);
    ASSERT_GE(tile, 0) << "T=" << T << " item " << i;
    ASSERT_LT(tile, tiles);
    ASSERT_GE(chunk, 0);
    ASSERT_LT(chunk, chunks(tile)) << "T=" << T << " item " << i;
    ASSERT_EQ(lo, first(tile) + chunk * split);
    ASSERT_LE(lo, hi);
    ASSERT_LE(hi, last(tile));
    ASSERT_LE(hi - lo + 1, split);
    ASSERT_TRUE(chunks_of_tile[tile].insert(chunk).second) << "repeated item";
    for (int other = lo; other <= hi; ++other) {
      ASSERT_TRUE(pairs.insert(pair(tile, other)).second)
          << "T=" << T << " tile " << tile << ", other " << other << " twice";
    }
  }
  ASSERT_EQ(static_cast<int>(pairs.size()), tiles * (tiles + 1) / 2) << "T=" << T;
  for (int tile = 0; tile < tiles; ++tile) {
    ASSERT_EQ(static_cast<int>(chunks_of_tile[tile].size()), chunks(tile));
  }
}

// T from 1 to 4,096 in steps of 64 positions (each tile count; the items
// depend on T only through it), and its first few values.
std::vector<int> TestLengths() {
  std::vector<int> lengths = {1, 2, 63, 65, 127};
  for (int T = 64; T <= 4096; T += 64) lengths.push_back(T);
  return lengths;
}

TEST(AttentionItemsTest, QuerySideCoversEveryCausalPairOnce) {
  for (int split = 1; split <= 8; ++split) {
    for (int T : TestLengths()) {
      const int tiles = AttentionTiles(T);
      CheckCoversEveryCausalPairOnce(
          T, tiles, split,
          [&](int i, int* qt, int* chunk, int* kt0, int* kt1) {
            QueryItem(i, tiles, split, qt, chunk, kt0, kt1);
          },
          [](int) { return 0; }, [](int qt) { return qt; },
          [&](int qt) { return QueryTileChunks(qt, split); },
          [](int qt, int kt) { return std::make_pair(qt, kt); });
      if (HasFatalFailure()) return;
      // Longest rows first: the first item is the last query tile's chunk 0.
      int qt = -1, chunk = -1, kt0 = -1, kt1 = -1;
      QueryItem(0, tiles, split, &qt, &chunk, &kt0, &kt1);
      ASSERT_EQ(qt, tiles - 1);
      ASSERT_EQ(chunk, 0);
    }
  }
}

TEST(AttentionItemsTest, KeySideCoversEveryCausalPairOnce) {
  for (int split = 1; split <= 8; ++split) {
    for (int T : TestLengths()) {
      const int tiles = AttentionTiles(T);
      CheckCoversEveryCausalPairOnce(
          T, tiles, split,
          [&](int i, int* kt, int* chunk, int* qt0, int* qt1) {
            KeyItem(i, tiles, split, kt, chunk, qt0, qt1);
          },
          [](int kt) { return kt; }, [&](int) { return tiles - 1; },
          [&](int kt) { return KeyTileChunks(kt, tiles, split); },
          [](int kt, int qt) { return std::make_pair(qt, kt); });
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace coppelius
