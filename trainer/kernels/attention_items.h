// File: trainer/kernels/attention_items.h
//
// The work decomposition of the fused attention kernels (attention.cu), in
// host-and-device code so that CPU tests can check it. Positions come in
// tiles of kAttentionTile = 64; a causal head of T positions has
// num_tiles = ⌈T / 64⌉ query tiles and as many key tiles, and query tile qt
// attends to key tiles 0..qt.
//
// Every kernel splits the key range of a query tile (or the query range of
// a key tile) into chunks of at most `split` tiles, its own split (the
// forward, dq and dk/dv kernels may use different ones).
// Query-side items (forward and backward dq kernels): one per
// (query tile qt, chunk), the chunk covering key tiles
// split·chunk .. min(qt, split·chunk + split − 1);
// item index i = 0, 1, … enumerates query tiles from the last (longest
// rows) to the first, chunks in order within a tile.
// Key-side items (backward dk/dv kernel): one per (key tile kt, chunk), the
// chunk covering query tiles kt + split·chunk .. at most split of them, up
// to num_tiles − 1; enumerated from key tile 0
// (the most query tiles) up.
// Both enumerations have NumAttentionItems(num_tiles, split) items (the
// causal pairs (qt, kt ≤ qt) grouped by rows or by columns).
#ifndef COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_
#define COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_

#include "trainer/kernels/host_device.h"

namespace coppelius {

constexpr int kAttentionTile = 64;

// The default split, 16 tiles per chunk: at T = 1024 (16 tiles) every
// query tile is one chunk and so is every key tile, so nothing is combined
// through scratch (128 items at NH = 8), the forward's chunk shared by 4
// warpgroups (AttentionSplits). Measured on the H200 (2026-12-01,
// docs/PERFORMANCE.md run 20): 2.236–2.237 ms/step against 2.355 for 6
// tiles (240 items, 3 chunks for the longest rows; runs 5–19's default).
constexpr int kAttentionSplit = 16;

// The default warpgroups per forward CTA (attention.h AttentionSplits):
// at the default split, 4 (128 CTAs of 512 threads, one per SM; each
// warpgroup 4 of the longest rows' 16 key tiles) measured 0.738–0.739 ms
// of forward per step against 0.751–0.752 for 2 and 0.765–0.766 for 1
// (H200, 2026-12-01, docs/PERFORMANCE.md run 20).
constexpr int kAttentionForwardWarpgroups = 4;

// Tiles covering T positions.
COPPELIUS_HOST_DEVICE int AttentionTiles(int T) {
  return (T + kAttentionTile - 1) / kAttentionTile;
}

// Chunks of a run of `tiles` tiles (≥ 1), `split` (≥ 1) tiles per chunk.
COPPELIUS_HOST_DEVICE int AttentionChunks(int tiles, int split) {
  return (tiles - 1) / split + 1;
}

// Chunks of query tile qt (its key tiles 0..qt) and of key tile kt (its
// query tiles kt..num_tiles − 1).
COPPELIUS_HOST_DEVICE int QueryTileChunks(int qt, int split) {
  return AttentionChunks(qt + 1, split);
}
COPPELIUS_HOST_DEVICE int KeyTileChunks(int kt, int num_tiles, int split) {
  return AttentionChunks(num_tiles - kt, split);
}

// Items of either enumeration: Σ over query tiles of QueryTileChunks.
COPPELIUS_HOST_DEVICE int NumAttentionItems(int num_tiles, int split) {
  int n = 0;
  for (int t = 0; t < num_tiles; ++t) n += QueryTileChunks(t, split);
  return n;
}

// Query-side item i → (qt, chunk) and the chunk's key tiles [kt0, kt1].
COPPELIUS_HOST_DEVICE void QueryItem(int i, int num_tiles, int split,
                                     int* qt, int* chunk, int* kt0, int* kt1) {
  int t = num_tiles - 1;
  for (; t > 0; --t) {
    const int n = QueryTileChunks(t, split);
    if (i < n) break;
    i -= n;
  }
  *qt = t;
  *chunk = i;
  *kt0 = i * split;
  const int last = *kt0 + split - 1;
  *kt1 = last < t ? last : t;
}

// Key-side item i → (kt, chunk) and the chunk's query tiles [qt0, qt1].
COPPELIUS_HOST_DEVICE void KeyItem(int i, int num_tiles, int split, int* kt,
                                   int* chunk, int* qt0, int* qt1) {
  int t = 0;
  for (; t < num_tiles - 1; ++t) {
    const int n = KeyTileChunks(t, num_tiles, split);
    if (i < n) break;
    i -= n;
  }
  *kt = t;
  *chunk = i;
  *qt0 = t + i * split;
  const int last = *qt0 + split - 1;
  *qt1 = last < num_tiles - 1 ? last : num_tiles - 1;
}

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_
