// Many activation rows against a tile of 4 weight rows for Q4_K and Q6_K (AVX-512 BW + VNNI), the bulk of a
// Q4_K_M file. Why: their row-by-row kernels (quant_kquants_avx512.h) unpack every block again for each 4
// activation rows and stream all activation rows through once per weight row, which at hundreds of rows no
// longer fit L2. Here a tile's blocks are unpacked once per chunk of activation rows that stays in L2, and each
// weight and activation vector loaded serves 3-4 products from registers.
//
// Same bits as dot_rows_q4k / dot_rows_q6k, for any number of rows: every output keeps its own 16 fp32 lanes
// and each lane sees the same operations in the same order. Step s (64 weights: groups 2s, 2s + 1 of the row)
// gives lane L the exact integer sum of the same 4 byte products, converted, then one FMA with
// fl(fl(sub-scale * d) * activation d of group 2s + L / 8), steps in order; then _mm512_reduce_add_ps, plus (Q4_K)
// hsum8 of the mins' per-block FMAs. Q6_K's signed weights go through dpbusd as (a + 128) * q with the sum
// starting at -128 * (sum of the 4 weights): the same integer as |q| * (a with q's sign).
#pragma once
#include "quant_kquants_avx512.h"

#if defined(LLMCHAT_AVX512_KQUANTS) && defined(__AVX512VL__)
#define LLMCHAT_AVX512_KTILES 1
#include <algorithm>
#include <vector>

namespace llmchat_quant {

constexpr int kKTileCols = 4;  // weight rows per tile
constexpr int kKTileRows = 3;  // activation rows per pass over a tile: 12 accumulators
// Fewer rows: the row-by-row kernel, whose activations then still fit L2. Its 512-bit loop already does the same
// arithmetic per product (dpbusd, convert, scale product, FMA per 64 weights and row); the tile saves only the
// re-reads of the activations. One Llama-3.2-1B-shape Q4_K_M layer (kernels/quant_bench.py --synthetic), AMD EPYC
// with AVX-512 VNNI, 2 threads, tiles / row by row: 8 rows 6.14 / 6.09 ms, 256 rows 189.8 / 177.6, 512 rows
// 386.6 / 411.6 (a later run: 512 rows 454.7 / 445.2; a busier one: 128 rows 236.8 / 209.8, 512 rows 786.1 /
// 839.3): at 512 rows level to 6% faster, below it slower.
constexpr int kKTileMinRows = 512;
constexpr int64_t kKChunkBytes = 1 << 19;  // activation bytes (int8 + expanded scales) per chunk of rows

template <int QT>
constexpr bool ktiled_type() { return QT == kQ4_K || QT == kQ6_K; }

struct Zmm { __m512i v; };  // vector elements (a bare __m512i as a template argument loses its attributes)
struct Zmmf { __m512 v; };
struct Ymmf { __m256 v; };

struct KTile {  // kKTileCols weight rows, step-major: element s * kKTileCols + c is step s of weight row c
  std::vector<Zmm> w;       // the step's 64 weights (Q4_K: 0..15 unsigned; Q6_K: -32..31)
  std::vector<Zmmf> scale;  // lane L: fl(sub-scale * d) of the sub-block lane L reads
  std::vector<Zmm> init;    // Q6_K: -128 * (sum of the lane's 4 weights)
  std::vector<Ymmf> mins;   // Q4_K, block-major: -dmin * min of each of the block's 8 groups
};

// weight row `c` of the tile from `w` (nullptr: an all-zero row past the matrix's end)
template <int QT>
inline void unpack_krow(const uint8_t* w, int num_blocks, int c, KTile& t) {
  constexpr int NT = kKTileCols;
  if (w == nullptr) {
    for (int s = 0; s < 4 * num_blocks; ++s) {
      t.w[s * NT + c].v = _mm512_setzero_si512();
      t.scale[s * NT + c].v = _mm512_setzero_ps();
      if (QT == kQ6_K) t.init[s * NT + c].v = _mm512_setzero_si512();
    }
    if (QT == kQ4_K)
      for (int b = 0; b < num_blocks; ++b) t.mins[b * NT + c].v = _mm256_setzero_ps();
    return;
  }
  if constexpr (QT == kQ4_K) {
    const __m512i nibble_shift = split_shift(0, 4), low4 = _mm512_set1_epi8(15);
    const __m512i idx[4] = {lane_index(0, 8), lane_index(2, 8), lane_index(4, 8), lane_index(6, 8)};
    for (int b = 0; b < num_blocks; ++b, w += 144) {
      __m256 scv;
      q4k_block_scales(w, &scv, &t.mins[b * NT + c].v);
      for (int k = 0; k < 4; ++k) {
        const int s = 4 * b + k;
        t.w[s * NT + c].v = _mm512_and_si512(_mm512_srlv_epi16(broadcast32(w + 16 + 32 * k), nibble_shift), low4);
        t.scale[s * NT + c].v = _mm512_permutexvar_ps(idx[k], _mm512_castps256_ps512(scv));
      }
    }
  } else {
    static_assert(QT == kQ6_K, "Q4_K or Q6_K");
    const __m512i low4 = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3), m32 = _mm512_set1_epi8(32);
    const __m512i bias = _mm512_set1_epi8(char(0x80));  // 128 as unsigned bytes
    const __m512i crumb_shift[2] = {split_shift(0, 2), split_shift(4, 6)};
    __m512i scale_idx[4];
    for (int p = 0; p < 4; ++p) scale_idx[p] = lane_index(4 * p, 4);
    for (int b = 0; b < num_blocks; ++b, w += 210) {
      const __m512 dsc = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)))),
          _mm512_set1_ps(fp16_to_float(w + 208)));
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(w + 64 * h);
        const __m512i qh = broadcast32(w + 128 + 32 * h);
        for (int k = 0; k < 2; ++k) {
          const int s = 4 * b + 2 * h + k;
          const __m512i low = _mm512_and_si512(k ? _mm512_srli_epi16(ql, 4) : ql, low4);
          const __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, crumb_shift[k]), three), 4);
          const __m512i q = _mm512_sub_epi8(_mm512_or_si512(low, high), m32);
          t.w[s * NT + c].v = q;
          t.init[s * NT + c].v = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, q));
          t.scale[s * NT + c].v = _mm512_permutexvar_ps(scale_idx[2 * h + k], dsc);
        }
      }
    }
  }
}

// activation row `a` into the chunk buffer: per step, its 64 int8 (Q6_K: + 128, as unsigned bytes) and the
// 16-lane scale vector (lanes 0..7: d of group 2s, lanes 8..15: d of group 2s + 1)
template <int QT>
inline void pack_act_row(const ActRow& a, int num_steps, Zmm* out) {
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  const __m512i pair = lane_index(0, 8);
  for (int s = 0; s < num_steps; ++s) {
    const __m512i q = _mm512_loadu_si512(a.q + 64 * s);
    out[2 * s].v = QT == kQ6_K ? _mm512_xor_si512(q, flip) : q;
    const __m512 d2 = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a.d + 2 * s))));
    out[2 * s + 1].v = _mm512_castps_si512(_mm512_permutexvar_ps(pair, d2));
  }
}

// MT packed activation rows (`packed`, `stride` vectors apart) against one unpacked tile; y points at (first
// row, the tile's first weight row)
template <int QT, int MT>
inline void ktile_rows(const KTile& t, int num_blocks, const Zmm* packed, int64_t stride, const ActRow* act,
                       float* y, int64_t y_stride, int cols) {
  constexpr int NT = kKTileCols;
  __m512 acc[MT][NT];
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm512_setzero_ps();
  const Zmm* tw = t.w.data();
  const Zmmf* ts = t.scale.data();
  const Zmm* ti = t.init.data();
  for (int s = 0; s < 4 * num_blocks; ++s) {
    __m512i wv[NT];
    __m512 sv[NT];
    for (int n = 0; n < NT; ++n) {
      wv[n] = tw[s * NT + n].v;
      sv[n] = ts[s * NT + n].v;
      asm("" : "+v"(wv[n]), "+v"(sv[n]));  // held in registers: g++ would reload them for every row (L1 port-bound)
    }
    for (int m = 0; m < MT; ++m) {
      __m512i a = packed[m * stride + 2 * s].v;
      __m512 ad = _mm512_castsi512_ps(packed[m * stride + 2 * s + 1].v);
      asm("" : "+v"(a), "+v"(ad));
      for (int n = 0; n < NT; ++n) {
        const __m512i dot = QT == kQ6_K ? _mm512_dpbusd_epi32(ti[s * NT + n].v, a, wv[n])
                                        : _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[n], a);
        acc[m][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[n], ad), acc[m][n]);
      }
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < cols; ++n) {
      if constexpr (QT == kQ4_K) {
        __m256 off = _mm256_setzero_ps();
        for (int b = 0; b < num_blocks; ++b) off = _mm256_fmadd_ps(t.mins[b * NT + n].v, _mm256_loadu_ps(act[m].s + 8 * b), off);
        y[m * y_stride + n] = _mm512_reduce_add_ps(acc[m][n]) + hsum8(off);
      } else {
        y[m * y_stride + n] = _mm512_reduce_add_ps(acc[m][n]);
      }
    }
}

// y[:, n0 .. n1) for all rows: activation rows in chunks that stay in L2; per chunk, each tile of weight rows
// unpacked once, then every row of the chunk against it
template <int QT>
void linear_ktiles(const uint8_t* w, int64_t row_bytes, int num_blocks, const std::vector<ActRow>& act, float* y,
                   int64_t n_out, int64_t n0, int64_t n1) {
  constexpr int NT = kKTileCols, MT = kKTileRows;
  const int num_steps = 4 * num_blocks;
  const int64_t num_rows = int64_t(act.size()), stride = 2 * num_steps;
  const int64_t chunk = std::max<int64_t>(MT, kKChunkBytes / (64 * stride) / MT * MT);
  KTile t;
  t.w.resize(num_steps * NT);
  t.scale.resize(num_steps * NT);
  if (QT == kQ6_K) t.init.resize(num_steps * NT);
  if (QT == kQ4_K) t.mins.resize(num_blocks * NT);
  std::vector<Zmm> packed(std::min(chunk, num_rows) * stride);
  for (int64_t r0 = 0; r0 < num_rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, num_rows - r0);
    for (int64_t m = 0; m < rows; ++m) pack_act_row<QT>(act[r0 + m], num_steps, packed.data() + m * stride);
    for (int64_t c0 = n0; c0 < n1; c0 += NT) {
      const int cols = int(std::min<int64_t>(NT, n1 - c0));
      for (int c = 0; c < NT; ++c) unpack_krow<QT>(c < cols ? w + (c0 + c) * row_bytes : nullptr, num_blocks, c, t);
      int64_t m = 0;
      for (; m + MT <= rows; m += MT)
        ktile_rows<QT, MT>(t, num_blocks, packed.data() + m * stride, stride, &act[r0 + m],
                           y + (r0 + m) * n_out + c0, n_out, cols);
      const Zmm* p = packed.data() + m * stride;
      const ActRow* a = &act[r0 + m];
      float* ym = y + (r0 + m) * n_out + c0;
      switch (rows - m) {  // the rows left: fewer accumulators, the same per-output operations
        case 2: ktile_rows<QT, 2>(t, num_blocks, p, stride, a, ym, n_out, cols); break;
        case 1: ktile_rows<QT, 1>(t, num_blocks, p, stride, a, ym, n_out, cols); break;
        default: break;
      }
    }
  }
}

}  // namespace llmchat_quant
#endif
