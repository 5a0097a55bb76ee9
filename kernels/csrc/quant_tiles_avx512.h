// Many activation rows against a tile of 8 weight rows with 512-bit vectors (AVX-512 BW + VNNI), for the block
// types whose generic path is us / ss groups (Q4_0, Q4_1, Q5_0, Q5_1, Q5_K, Q8_0). Why: the row-by-row loop
// (quant_linear.cpp linear_rows) unpacks every weight block again for each 4 activation rows and spends a
// 256-bit dot, a conversion and an FMA per (row, weight row, group), so prefill cost ~3x the fp32 GEMM. Here a
// tile's blocks are unpacked once into an L1-resident buffer and two weight rows share each 512-bit vector.
//
// Same bits as linear_rows, for any number of rows: every output keeps its own 8 fp32 lanes, and each lane
// sees the same operations in the same order — the exact integer sum of the same 4 byte products, converted,
// one FMA with fl(group scale * activation scale) per group in group order; the offset as one scalar FMA per
// group (what g++ contracts `offset += coef * s` into); then the same hsum + offset. Signed weights (Q8_0) go
// through dpbusd as (a + 128) * w with the sum starting at -128 * (sum of the 4 weights): the same integer.
#pragma once
#include "quant_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LLMCHAT_AVX512_TILES 1
#include <algorithm>
#include <vector>

namespace llmchat_quant {

constexpr int kTileCols = 8;  // weight rows per tile: 4 pairs, one 512-bit vector each
constexpr int kTileRows = 5;  // activation rows per pass over a tile: 20 accumulators + 8 weight vectors
// fewer activation rows: the row-by-row loop (unpacking a tile costs rows). The default model's Q4_1 layers / its
// Q8_0 head, AMD EPYC, 2 threads, tiles vs row by row: 4 rows 10.0 / 7.5 and 2.77 / 1.56 ms, 8 rows 14.7 / 14.2
// and 3.83 / 3.40, 16 rows 23.8 / 29.5 and 5.72 / 6.04
constexpr int kTileMinRows = 16;

template <int QT>
constexpr bool tiled_type() {
#if defined(LLMCHAT_AVX512_KQUANTS)
  if (QT == kQ4_K) return false;  // its own 512-bit kernel (another summation order)
#endif
  return QT == kQ4_0 || QT == kQ4_1 || QT == kQ5_0 || QT == kQ5_1 || QT == kQ8_0 || QT == kQ5_K || QT == kQ4_K;
}

struct alignas(64) TileGroup {  // one 32-weight group of a tile's 8 weight rows
  uint8_t w[4][64];  // pair p: weight row 2p in bytes 0..31, row 2p + 1 in 32..63
  float pair_scale[4][16];  // pair p: row 2p's scale in lanes 0..7, row 2p + 1's in 8..15
  float coef[8];  // weight = scale * u + coef (unsigned types)
  float scale[8];
  int32_t init[4][16];  // dpbusd's starting lanes: -128 * (sum of the lane's 4 weights), signed types only
};

struct TileUnpacker {  // a visitor writing one weight row (column `col` of the tile) into the tile buffer
  TileGroup* t;
  int col;
  inline void put(int g, V v, float scale, float coef) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(t[g].w[col / 2] + 32 * (col % 2)), v);
    t[g].scale[col] = scale;
    t[g].coef[col] = coef;
  }
  inline void us(int g, V u, float scale, float coef) { put(g, u, scale, coef); }
  inline void ss(int g, V w, float scale) { put(g, w, scale, 0.0f); }
  inline void s6(int, V, float, int, int) {}  // never called: tiled_type() admits no s6 / u2 type
  inline void u2(int, V, float, int, int, float, int, int) {}
};

inline __m512i pair_index(int p) {  // lanes 0..7 -> scale[2p], lanes 8..15 -> scale[2p + 1]
  return _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
}

// The 8 outputs' hsum (quant_simd.h) at once: for each 8 lanes v, ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)),
// the same additions (a + b is b + a in IEEE arithmetic) on four vectors of two outputs each
inline __m256 hsum8x(const __m512 (&pairs)[4]) {
  __m512 half[4];  // 128-bit blocks 0 and 2: v[i] + v[i + 4] of each output
  for (int p = 0; p < 4; ++p) half[p] = _mm512_add_ps(pairs[p], _mm512_shuffle_f32x4(pairs[p], pairs[p], 0xB1));
  const __m512 fours[2] = {_mm512_shuffle_f32x4(half[0], half[1], 0x88), _mm512_shuffle_f32x4(half[2], half[3], 0x88)};
  __m512 ones[2];  // lane 0 of each 128-bit block: output c's sum, c = 4 * j + block
  for (int j = 0; j < 2; ++j) {
    const __m512 t = _mm512_add_ps(fours[j], _mm512_permute_ps(fours[j], 0x4E));  // (s0 + s2, s1 + s3, ..)
    ones[j] = _mm512_add_ps(t, _mm512_movehdup_ps(t));
  }
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutex2var_ps(ones[0], pick, ones[1]));
}

// MT activation rows against one unpacked tile; y points at (first row, the tile's first weight row)
template <bool kSigned, int MT>
inline void tile_rows(const TileGroup* t, int num_groups, const ActRow* act, const uint8_t* const* shifted,
                      float* y, int64_t y_stride, int cols) {
  __m512 acc[MT][4];
  __m256 off[MT];
  for (int m = 0; m < MT; ++m) {
    off[m] = _mm256_setzero_ps();
    for (int p = 0; p < 4; ++p) acc[m][p] = _mm512_setzero_ps();
  }
  for (int g = 0; g < num_groups; ++g) {
    const TileGroup& tg = t[g];
    __m512 sv[4];
    __m512i wv[4];
    for (int p = 0; p < 4; ++p) {
      sv[p] = _mm512_load_ps(tg.pair_scale[p]);
      wv[p] = _mm512_load_si512(tg.w[p]);
    }
    for (int m = 0; m < MT; ++m) {
      const uint8_t* a = kSigned ? shifted[m] + 32 * g : reinterpret_cast<const uint8_t*>(act[m].q + 32 * g);
      const __m512i av = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
      const __m512 dm = _mm512_set1_ps(act[m].d[g]);
      for (int p = 0; p < 4; ++p) {
        const __m512i dot = kSigned ? _mm512_dpbusd_epi32(_mm512_load_si512(tg.init[p]), av, wv[p])
                                    : _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[p], av);
        acc[m][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[p], dm), acc[m][p]);
      }
      if (!kSigned) off[m] = _mm256_fmadd_ps(_mm256_load_ps(tg.coef), _mm256_set1_ps(act[m].s[g]), off[m]);
    }
  }
  const __mmask8 keep = __mmask8((1u << cols) - 1);
  for (int m = 0; m < MT; ++m) _mm256_mask_storeu_ps(y + m * y_stride, keep, _mm256_add_ps(hsum8x(acc[m]), off[m]));
}

// y[:, 8 * t0 .. 8 * t1) for all rows: each tile of weight rows unpacked once, then every activation row
template <int QT>
void linear_tiles(const uint8_t* w, int64_t row_bytes, int num_blocks, const std::vector<ActRow>& act,
                  const uint8_t* const* shifted, float* y, int64_t n_out, int64_t t0, int64_t t1) {
  constexpr bool kSigned = QT == kQ8_0;
  const int num_groups = num_blocks * (block_weights(QT) / 32);
  const int64_t num_rows = int64_t(act.size());
  std::vector<TileGroup> tile(num_groups);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = kTileCols * t;
    const int cols = int(std::min<int64_t>(kTileCols, n_out - n0));
    for (int c = 0; c < kTileCols; ++c) {
      TileUnpacker u{tile.data(), c};
      if (c < cols) {
        visit_row<QT>(w + (n0 + c) * row_bytes, num_blocks, u);
      } else {
        for (int g = 0; g < num_groups; ++g) u.put(g, _mm256_setzero_si256(), 0.0f, 0.0f);
      }
    }
    const __m512i idx[4] = {pair_index(0), pair_index(1), pair_index(2), pair_index(3)};
    for (int g = 0; g < num_groups; ++g) {
      const __m512 scales = _mm512_castps256_ps512(_mm256_load_ps(tile[g].scale));
      for (int p = 0; p < 4; ++p) _mm512_store_ps(tile[g].pair_scale[p], _mm512_permutexvar_ps(idx[p], scales));
    }
    if constexpr (kSigned) {
      const __m512i bias = _mm512_set1_epi8(char(0x80));  // 128 as unsigned bytes
      for (int g = 0; g < num_groups; ++g)
        for (int p = 0; p < 4; ++p) {
          const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, _mm512_load_si512(tile[g].w[p]));
          _mm512_store_si512(tile[g].init[p], _mm512_sub_epi32(_mm512_setzero_si512(), sums));
        }
    }
    int64_t m = 0;
    for (; m + kTileRows <= num_rows; m += kTileRows)
      tile_rows<kSigned, kTileRows>(tile.data(), num_groups, &act[m], shifted + m, y + m * n_out + n0, n_out, cols);
    const ActRow* a = act.data() + m;
    float* ym = y + m * n_out + n0;
    switch (num_rows - m) {  // the rows left: fewer accumulators, the same per-output operations
      case 4: tile_rows<kSigned, 4>(tile.data(), num_groups, a, shifted + m, ym, n_out, cols); break;
      case 3: tile_rows<kSigned, 3>(tile.data(), num_groups, a, shifted + m, ym, n_out, cols); break;
      case 2: tile_rows<kSigned, 2>(tile.data(), num_groups, a, shifted + m, ym, n_out, cols); break;
      case 1: tile_rows<kSigned, 1>(tile.data(), num_groups, a, shifted + m, ym, n_out, cols); break;
      default: break;
    }
  }
}

}  // namespace llmchat_quant
#endif
