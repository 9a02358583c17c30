// File: trainer/kernels/attention_items.h
//
// The work decomposition of the fused attention kernels (attention.cu), in
// host-and-device code so that CPU tests can check it. Positions come in
// tiles of kAttentionTile = 64; a causal head of T positions has
// num_tiles = ⌈T / 64⌉ query tiles and as many key tiles, and query tile qt
// attends to key tiles 0..qt.
//
// A range of tiles is split in chunks of at most `split` tiles (each kernel
// has its split: kAttentionSerialSplit or kAttentionConcurrentSplit below).
// Query-side items (forward kernels, backward D and dq kernels): one per
// (query tile qt, chunk), the chunk covering key tiles
// split·chunk .. min(qt, split·chunk + split − 1); item index i = 0, 1, …
// enumerates query tiles from the last (longest rows) to the first, chunks
// in order within a tile.
// Key-side items (backward dk/dv kernel): one per (key tile kt, chunk), the
// chunk covering query tiles kt + split·chunk .. at most split of them, up
// to num_tiles − 1; enumerated from key tile 0 (the most query tiles) up.
// Both enumerations have NumAttentionItems(num_tiles, split) items (the
// causal pairs (qt, kt ≤ qt) grouped by rows or by columns).
#ifndef COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_
#define COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_

#if defined(__CUDACC__)
#define COPPELIUS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define COPPELIUS_HOST_DEVICE inline
#endif

namespace coppelius {

constexpr int kAttentionTile = 64;

// Chunk sizes (every attention kernel runs 2 CTAs per SM at its register
// use: 264 slots on the H200's 132 SMs). A kernel that runs alone on the
// step's critical path (statistics, output, D) lasts about as long as its
// longest CTA: chunks of 5 tiles give 34 items per head at T = 1024 (16
// tiles), 272 for NH = 8, and the 8 beyond one wave are 1-tile items
// (enumerated last) that fit in the time the first wave's short items
// leave. The dq and dk/dv kernels run side by side and share the slots:
// chunks of 6 (240 items each). Measured on the H200: docs/PERFORMANCE.md
// runs 5 and 6 (chunks of 4 for all: two waves, slower; chunks of 3 at 3
// CTAs per SM for the serial kernels: slower, registers spilled).
constexpr int kAttentionSerialSplit = 5;
constexpr int kAttentionConcurrentSplit = 6;

// Tiles covering T positions.
COPPELIUS_HOST_DEVICE int AttentionTiles(int T) {
  return (T + kAttentionTile - 1) / kAttentionTile;
}

// Chunks of a run of `tiles` tiles (≥ 1).
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

#undef COPPELIUS_HOST_DEVICE

#endif  // COPPELIUS_TRAINER_KERNELS_ATTENTION_ITEMS_H_
