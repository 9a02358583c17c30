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

TEST(AttentionItemsTest, QuerySideCoversEveryCausalPairOnce) {
  for (int T = 1; T <= 4096; ++T) {
    const int tiles = AttentionTiles(T);
    const int items = NumAttentionItems(tiles);
    std::set<std::pair<int, int>> pairs;
    std::map<int, std::set<int>> chunks_of_tile;
    for (int i = 0; i < items; ++i) {
      int qt = -1, chunk = -1, kt0 = -1, kt1 = -1;
      QueryItem(i, tiles, &qt, &chunk, &kt0, &kt1);
      ASSERT_GE(qt, 0) << "T=" << T << " item " << i;
      ASSERT_LT(qt, tiles);
      ASSERT_GE(chunk, 0);
      ASSERT_LT(chunk, QueryTileChunks(qt)) << "T=" << T << " item " << i;
      ASSERT_EQ(kt0, chunk * kAttentionSplit);
      ASSERT_LE(kt0, kt1);
      ASSERT_LE(kt1, qt);
      ASSERT_LE(kt1 - kt0 + 1, kAttentionSplit);
      ASSERT_TRUE(chunks_of_tile[qt].insert(chunk).second) << "repeated item";
      for (int kt = kt0; kt <= kt1; ++kt) {
        ASSERT_TRUE(pairs.insert({qt, kt}).second)
            << "T=" << T << " pair (" << qt << ", " << kt << ") twice";
      }
    }
    ASSERT_EQ(static_cast<int>(pairs.size()), tiles * (tiles + 1) / 2) << "T=" << T;
    for (int qt = 0; qt < tiles; ++qt) {
      ASSERT_EQ(static_cast<int>(chunks_of_tile[qt].size()), QueryTileChunks(qt));
    }
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
    const int items = NumAttentionItems(tiles);
    std::set<std::pair<int, int>> pairs;
    std::map<int, std::set<int>> chunks_of_tile;
    for (int i = 0; i < items; ++i) {
      int kt = -1, chunk = -1, qt0 = -1, qt1 = -1;
      KeyItem(i, tiles, &kt, &chunk, &qt0, &qt1);
      ASSERT_GE(kt, 0) << "T=" << T << " item " << i;
      ASSERT_LT(kt, tiles);
      ASSERT_GE(chunk, 0);
      ASSERT_LT(chunk, KeyTileChunks(kt, tiles)) << "T=" << T << " item " << i;
      ASSERT_EQ(qt0, kt + chunk * kAttentionSplit);
      ASSERT_LE(qt0, qt1);
      ASSERT_LT(qt1, tiles);
      ASSERT_LE(qt1 - qt0 + 1, kAttentionSplit);
      ASSERT_TRUE(chunks_of_tile[kt].insert(chunk).second) << "repeated item";
      for (int qt = qt0; qt <= qt1; ++qt) {
        ASSERT_TRUE(pairs.insert({qt, kt}).second)
            << "T=" << T << " pair (" << qt << ", " << kt << ") twice";
      }
    }
    ASSERT_EQ(static_cast<int>(pairs.size()), tiles * (tiles + 1) / 2) << "T=" << T;
    for (int kt = 0; kt < tiles; ++kt) {
      ASSERT_EQ(static_cast<int>(chunks_of_tile[kt].size()), KeyTileChunks(kt, tiles));
    }
  }
}

}  // namespace
}  // namespace coppelius
