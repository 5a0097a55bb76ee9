// Q4_K and Q6_K dot products with 512-bit vectors (AVX-512 F/BW + VNNI): two 32-weight groups per dpbusd, each
// block's scales applied as one vector, the mins as one FMA per block. The same sums as the generic visitor path
// (quant_blocks.h visit_row + the DotVisitor of quant_linear.cpp) in another order: exact integer dots of 4
// bytes per lane, then fp32. The generic path does 32 weights per 256-bit dot and a scalar scale per group,
// which left these two types, the bulk of a Q4_K_M file, compute-bound at half the memory bandwidth.
#pragma once
#include "quant_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define LLMCHAT_AVX512_KQUANTS 1

namespace llmchat_quant {

inline __m512i lane_index(int first, int per) {  // lane L -> first + L / per
  alignas(64) int idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = first + l / per;
  return _mm512_load_si512(idx);
}

// shift counts per 16-bit lane: `lo` for the lower 32 bytes, `hi` for the upper 32
inline __m512i split_shift(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(short(lo))), _mm256_set1_epi16(short(hi)), 1);
}

inline __m512i broadcast32(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Q4_K: d, dmin, 12 scale bytes (eight 6-bit scales and mins), qs[128]: 32 bytes hold group 2c in their low
// nibbles and group 2c + 1 in their high nibbles, so one broadcast load shifted by 0 | 4 is two groups.
// A Q4_K block's 8 group scales (d * scale) and negated mins (-dmin * min), as fp32 lanes.
inline void q4k_block_scales(const uint8_t* w, __m256* scales, __m256* neg_mins) {
  int sc[8], mn[8];
  k_scales(w + 4, sc, mn);
  *scales = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc))),
                          _mm256_set1_ps(fp16_to_float(w)));
  *neg_mins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mn))),
                            _mm256_set1_ps(-fp16_to_float(w + 2)));
}

template <int MT>
inline void dot_rows_q4k(const uint8_t* w, int num_blocks, const ActRow* act, float* y, int64_t y_stride) {
  __m512 acc[MT];
  __m256 off[MT];
  for (int m = 0; m < MT; ++m) { acc[m] = _mm512_setzero_ps(); off[m] = _mm256_setzero_ps(); }
  const __m512i nibble_shift = split_shift(0, 4), low4 = _mm512_set1_epi8(15);
  const __m512i idx[4] = {lane_index(0, 8), lane_index(2, 8), lane_index(4, 8), lane_index(6, 8)};
  for (int b = 0; b < num_blocks; ++b, w += 144) {
    __m256 scv, mnv;
    q4k_block_scales(w, &scv, &mnv);
    __m512 comb[MT];  // lanes 0..7: group g's weight scale times the activation's
    for (int m = 0; m < MT; ++m) {
      comb[m] = _mm512_castps256_ps512(_mm256_mul_ps(scv, _mm256_loadu_ps(act[m].d + 8 * b)));
      off[m] = _mm256_fmadd_ps(mnv, _mm256_loadu_ps(act[m].s + 8 * b), off[m]);
    }
    for (int c = 0; c < 4; ++c) {
      const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(broadcast32(w + 16 + 32 * c), nibble_shift), low4);
      for (int m = 0; m < MT; ++m) {
        const __m512i a = _mm512_loadu_si512(act[m].q + 32 * (8 * b + 2 * c));
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx[c], comb[m]), acc[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) y[m * y_stride] = _mm512_reduce_add_ps(acc[m]) + hsum8(off[m]);
}

// Q6_K: ql[128], qh[64], int8 scales[16] (one per 16 weights), d. Half h (128 weights) has groups g = 0..3:
// low nibbles of ql[64h + 32g] (g < 2) or high nibbles of ql[64h + 32(g - 2)], plus crumb g of qh[32h..] << 4,
// minus 32. Groups (0, 1) and (2, 3) are two 64-byte loads. Signed weights go through dpbusd as |q| against
// the activation negated where q < 0 (|q| <= 32).
template <int MT>
inline void dot_rows_q6k(const uint8_t* w, int num_blocks, const ActRow* act, float* y, int64_t y_stride) {
  __m512 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3), m32 = _mm512_set1_epi8(32);
  const __m512i crumb_shift[2] = {split_shift(0, 2), split_shift(4, 6)};
  __m512i scale_idx[4], act_idx[4];  // pair p = 2h + g0 / 2: lane L uses scale 8h + g0 * 2 + L / 4, group 4h + g0 + L / 8
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k) {
      scale_idx[2 * h + k] = lane_index(8 * h + 4 * k, 4);
      act_idx[2 * h + k] = lane_index(4 * h + 2 * k, 8);
    }
  for (int b = 0; b < num_blocks; ++b, w += 210) {
    const __m512 dsc = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)))),
        _mm512_set1_ps(fp16_to_float(w + 208)));
    __m512 act_d[MT];
    for (int m = 0; m < MT; ++m) act_d[m] = _mm512_castps256_ps512(_mm256_loadu_ps(act[m].d + 8 * b));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(w + 64 * h);
      const __m512i qh = broadcast32(w + 128 + 32 * h);
      for (int k = 0; k < 2; ++k) {  // groups (2k, 2k + 1) of this half
        const __m512i low = _mm512_and_si512(k ? _mm512_srli_epi16(ql, 4) : ql, low4);
        const __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, crumb_shift[k]), three), 4);
        const __m512i q = _mm512_sub_epi8(_mm512_or_si512(low, high), m32);
        const __m512i mag = _mm512_abs_epi8(q);
        const __mmask64 neg = _mm512_movepi8_mask(q);
        const __m512 scale = _mm512_permutexvar_ps(scale_idx[2 * h + k], dsc);
        for (int m = 0; m < MT; ++m) {
          const __m512i a = _mm512_loadu_si512(act[m].q + 32 * (8 * b + 4 * h + 2 * k));
          const __m512i signed_a = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), mag, signed_a);
          const __m512 lane_scale = _mm512_mul_ps(scale, _mm512_permutexvar_ps(act_idx[2 * h + k], act_d[m]));
          acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), lane_scale, acc[m]);
        }
      }
    }
  }
  for (int m = 0; m < MT; ++m) y[m * y_stride] = _mm512_reduce_add_ps(acc[m]);
}

}  // namespace llmchat_quant
#endif
