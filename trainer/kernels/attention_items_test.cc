// File: trainer/kernels/attention_items_test.cc
//
// The fused attention's work decomposition (attention_items.h) against a
// brute-force enumeration of the causal tile pairs: for every T from 1 to
// 4,096 positions, the query-side items cover each pair (query tile qt, key
// tile kt ≤ qt) exactly once, in chunks of at most kAttentionSplit key
// tiles numbered 0, 1, … in key order; the key-side items cover each pair
// exactly once the same way from the columns' side; both enumerations have
// NumAttentionItems items, and the chunk counts the kernels use to combine
// partials (QueryTileChunks, KeyTileChunks) match the items that exist.
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

TEST(AttentionItemsTest, CoppeliusSizeHas30ItemsPerHead) {
  // 16 tiles: query tiles 0..5 one chunk, 6..11 two, 12..15 three (240
  // CTAs for 8 heads).
  EXPECT_EQ(NumAttentionItems(16), 6 * 1 + 6 * 2 + 4 * 3);
  EXPECT_EQ(QueryTileChunks(15), 3);
  EXPECT_EQ(KeyTileChunks(0, 16), 3);
  EXPECT_EQ(KeyTileChunks(15, 16), 1);
}

// One enumeration of `tiles` tiles: item(i, &tile, &chunk, &lo, &hi) names
// a tile of its side and the range [lo, hi] of the other side's tiles;
// first(tile) is where chunk 0 starts, last(tile) the other side's last
// tile for it, chunks(tile) its chunk count, and pair(tile, other) the
// causal pair (query tile, key tile). Checks that the items cover every
// causal pair exactly once, each chunk of each tile once, chunk c starting
// at first + c · kAttentionSplit and spanning at most kAttentionSplit tiles.
template <typename Item, typename First, typename Last, typename Chunks,
          typename Pair>
void CheckCoversEveryCausalPairOnce(int T, int tiles, Item item, First first,
                                    Last last, Chunks chunks, Pair pair) {
  std::set<std::pair<int, int>> pairs;
  std::map<int, std::set<int>> chunks_of_tile;
  for (int i = 0; i < NumAttentionItems(tiles); ++i) {
    int tile = -1, chunk = -1, lo = -1, hi = -1;
    item(i, &tile, &chunk, &lo, &hi);
    ASSERT_GE(tile, 0) << "T=" << T << " item " << i;
    ASSERT_LT(tile, tiles);
    ASSERT_GE(chunk, 0);
    ASSERT_LT(chunk, chunks(tile)) << "T=" << T << " item " << i;
    ASSERT_EQ(lo, first(tile) + chunk * kAttentionSplit);
    ASSERT_LE(lo, hi);
    ASSERT_LE(hi, last(tile));
    ASSERT_LE(hi - lo + 1, kAttentionSplit);
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

TEST(AttentionItemsTest, QuerySideCoversEveryCausalPairOnce) {
  for (int T = 1; T <= 4096; ++T) {
    const int tiles = AttentionTiles(T);
    CheckCoversEveryCausalPairOnce(
        T, tiles,
        [&](int i, int* qt, int* chunk, int* kt0, int* kt1) {
          QueryItem(i, tiles, qt, chunk, kt0, kt1);
        },
        [](int) { return 0; }, [](int qt) { return qt; },
        [](int qt) { return QueryTileChunks(qt); },
        [](int qt, int kt) { return std::make_pair(qt, kt); });
    if (HasFatalFailure()) return;
    // Longest rows first: the first item is the last query tile's chunk 0.
    int qt = -1, chunk = -1, kt0 = -1, kt1 = -1;
    QueryItem(0, tiles, &qt, &chunk, &kt0, &kt1);
    ASSERT_EQ(qt, tiles - 1);
    ASSERT_EQ(chunk, 0);
  }
}

TEST(AttentionItemsTest, KeySideCoversEveryCausalPairOnce) {
  for (int T = 1; T <= 4096; ++T) {
    const int tiles = AttentionTiles(T);
    CheckCoversEveryCausalPairOnce(
        T, tiles,
        [&](int i, int* kt, int* chunk, int* qt0, int* qt1) {
          KeyItem(i, tiles, kt, chunk, qt0, qt1);
        },
        [](int kt) { return kt; }, [&](int) { return tiles - 1; },
        [&](int kt) { return KeyTileChunks(kt, tiles); },
        [](int kt, int qt) { return std::make_pair(qt, kt); });
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace coppelius
