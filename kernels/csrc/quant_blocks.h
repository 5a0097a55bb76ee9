// Each GGUF block type as a walk over its 32-weight groups (layouts in kernels/quant_blocks.py). A visitor gets
//   us(group, u, scale, coef): weight = scale * u + coef, u unsigned bytes (Q4_0, Q4_1, Q5_x, Q4_K, Q5_K)
//   ss(group, w, scale):       weight = scale * w, w int8 (Q8_0)
//   s6(group, w, d, s0, s1):   weight = d * s * w, w int8, s = s0 for bytes 0..15, s1 for 16..31 (Q6_K, Q3_K)
//   u2(group, u, d, s0, s1, dmin, m0, m1): weight = d * s * u - dmin * m, u unsigned, (s, m) = (s0, m0) for
//                              bytes 0..15, (s1, m1) for 16..31 (Q2_K)
// where `group` counts 32-weight groups from the start of the row.
#pragma once
#include "quant_simd.h"

namespace llmchat_quant {

// ggml's type numbers, as the `gguf` package names them
enum QType : int {
  kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14
};

struct ActRow {  // one activation row, quantized to int8 per 32 values
  const int8_t* q;  // [K]
  const float* d;   // [K / 32] scales
  const float* s;   // [K / 32] d * sum of the block's q
  const float* h;   // [K / 32] d * sum of the block's first 16 q (Q2_K's per-16 mins)
};

inline int block_weights(int qtype) { return qtype >= kQ2_K ? 256 : 32; }
inline int block_bytes(int qtype) {
  switch (qtype) {
    case kQ4_0: return 18; case kQ4_1: return 20; case kQ5_0: return 22; case kQ5_1: return 24;
    case kQ8_0: return 34; case kQ2_K: return 84; case kQ3_K: return 110; case kQ4_K: return 144; case kQ5_K: return 176; case kQ6_K: return 210;
    default: return 0;
  }
}

// Q4_K / Q5_K: the 12 scale bytes -> eight 6-bit scales and eight 6-bit mins
inline void k_scales(const uint8_t* q, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
    sc[j + 4] = (q[j + 8] & 15) | ((q[j] >> 6) << 4);
    mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
  }
}

// Q3_K: the 12 scale bytes -> sixteen 6-bit scales minus 32
inline void q3_k_scales(const uint8_t* q, int* sc) {
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? q[s] & 15 : q[s - 8] >> 4;
    sc[s] = (low | (((q[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
  }
}

template <int QT, typename Visitor>
inline void visit_row(const uint8_t* w, int num_blocks, Visitor& v) {
  constexpr int kBytes = QT == kQ4_0 ? 18 : QT == kQ4_1 ? 20 : QT == kQ5_0 ? 22 : QT == kQ5_1 ? 24
                       : QT == kQ8_0 ? 34 : QT == kQ2_K ? 84 : QT == kQ3_K ? 110
                       : QT == kQ4_K ? 144 : QT == kQ5_K ? 176 : 210;
  for (int b = 0; b < num_blocks; ++b, w += kBytes) {
    if constexpr (QT == kQ8_0) {
      v.ss(b, load32(w + 2), fp16_to_float(w));
    } else if constexpr (QT == kQ4_0) {
      const float d = fp16_to_float(w);
      v.us(b, nibbles16(w + 2), d, -8.0f * d);
    } else if constexpr (QT == kQ4_1) {
      v.us(b, nibbles16(w + 4), fp16_to_float(w), fp16_to_float(w + 2));
    } else if constexpr (QT == kQ5_0) {
      const float d = fp16_to_float(w);
      v.us(b, vor(nibbles16(w + 6), bits32(w + 2)), d, -16.0f * d);
    } else if constexpr (QT == kQ5_1) {
      v.us(b, vor(nibbles16(w + 8), bits32(w + 4)), fp16_to_float(w), fp16_to_float(w + 2));
    } else if constexpr (QT == kQ4_K || QT == kQ5_K) {
      const float d = fp16_to_float(w), dmin = fp16_to_float(w + 2);
      int sc[8], mn[8];
      k_scales(w + 4, sc, mn);
      const uint8_t* qs = w + (QT == kQ4_K ? 16 : 48);
      for (int c = 0; c < 4; ++c) {
        V lo = nibbles32_lo(qs + 32 * c), hi = nibbles32_hi(qs + 32 * c);
        if constexpr (QT == kQ5_K) {
          lo = vor(lo, high_bits(w + 16, 2 * c, 1));
          hi = vor(hi, high_bits(w + 16, 2 * c + 1, 1));
        }
        v.us(8 * b + 2 * c, lo, d * float(sc[2 * c]), -dmin * float(mn[2 * c]));
        v.us(8 * b + 2 * c + 1, hi, d * float(sc[2 * c + 1]), -dmin * float(mn[2 * c + 1]));
      }
    } else if constexpr (QT == kQ2_K) {
      const float d = fp16_to_float(w + 80), dmin = fp16_to_float(w + 82);
      for (int g = 0; g < 8; ++g) {
        const uint8_t s0 = w[2 * g], s1 = w[2 * g + 1];
        v.u2(8 * b + g, crumbs32(w + 16 + 32 * (g / 4), 2 * (g % 4), 0), d, s0 & 15, s1 & 15, dmin, s0 >> 4,
             s1 >> 4);
      }
    } else if constexpr (QT == kQ3_K) {
      const float d = fp16_to_float(w + 108);
      int sc[16];
      q3_k_scales(w + 96, sc);
      for (int g = 0; g < 8; ++g) {  // q = crumb + 4 * hmask bit - 4
        const V u = vor(crumbs32(w + 32 + 32 * (g / 4), 2 * (g % 4), 0), crumbs32(w, g, 2));
        v.s6(8 * b + g, sub_bytes(u, 4), d, sc[2 * g], sc[2 * g + 1]);
      }
    } else {  // Q6_K
      static_assert(QT == kQ6_K, "unknown block type");
      const float d = fp16_to_float(w + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = w + 64 * h;
        const uint8_t* qh = w + 128 + 32 * h;
        for (int g = 0; g < 4; ++g) {
          const V low = g < 2 ? nibbles32_lo(ql + 32 * g) : nibbles32_hi(ql + 32 * (g - 2));
          const V q = sub_bytes(vor(low, high_bits(qh, 2 * g, 3)), 32);
          v.s6(8 * b + 4 * h + g, q, d, sc[8 * h + 2 * g], sc[8 * h + 2 * g + 1]);
        }
      }
    }
  }
}

}  // namespace llmchat_quant
