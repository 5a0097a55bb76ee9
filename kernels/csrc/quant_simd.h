// Primitives of the quantized CPU linear: 32 weight bytes as one vector (AVX2, with AVX-512 VNNI's dpbusd where
// the compiler targets it) or as a plain array (the scalar fallback), fp16 reads and the integer dot products.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace llmchat_quant {

inline float fp16_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const int exp = (h >> 10) & 31, mant = h & 1023;
  float v = exp == 0 ? std::ldexp(float(mant), -24)
          : exp == 31 ? (mant ? NAN : INFINITY)
                      : std::ldexp(float(mant | 1024), exp - 25);
  return (h & 0x8000) ? -v : v;
#endif
}

#if defined(__AVX2__)
constexpr const char* kSimd =
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    "avx512-vnni";
#else
    "avx2";
#endif
using V = __m256i;   // 32 bytes of weights: unsigned 0..63 for the offset types, int8 for Q8_0 / Q6_K
using I = __m256i;   // 8 int32 partial sums of a 32-byte dot product
using F = __m256;    // 8 float partial sums

inline V load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline V vor(V a, V b) { return _mm256_or_si256(a, b); }
inline V sub_bytes(V a, int c) { return _mm256_sub_epi8(a, _mm256_set1_epi8(char(c))); }
// 16 bytes -> low nibbles (weights 0..15) then high nibbles (16..31): the Q4_0/Q4_1/Q5_x layout
inline V nibbles16(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}
inline V nibbles32_lo(const uint8_t* p) { return _mm256_and_si256(load32(p), _mm256_set1_epi8(15)); }
inline V nibbles32_hi(const uint8_t* p) {
  return _mm256_and_si256(_mm256_srli_epi16(load32(p), 4), _mm256_set1_epi8(15));
}
// qh: 4 bytes, bit i -> 16 in byte i (the 5th bit of Q5_0/Q5_1 weight i)
inline V bits32(const uint8_t* qh) {
  uint32_t word;
  std::memcpy(&word, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(word)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}
// qh: 32 bytes, ((qh[l] >> shift) & mask) << 4 in byte l (the high bits of Q5_K / Q6_K)
inline V high_bits(const uint8_t* qh, int shift, int mask) {
  const __m256i q = _mm256_srl_epi16(load32(qh), _mm_cvtsi32_si128(shift));
  return _mm256_slli_epi16(_mm256_and_si256(q, _mm256_set1_epi8(char(mask))), 4);
}
// 32 bytes, ((p[l] >> shift) & (bit count 2: 3, else 1)) << up in byte l (Q2_K / Q3_K quants and hmask bits):
// mask 3 for up = 0 (two quant bits), 1 otherwise (one hmask bit)
inline V crumbs32(const uint8_t* p, int shift, int up) {
  const __m256i q = _mm256_srl_epi16(load32(p), _mm_cvtsi32_si128(shift));
  return _mm256_sll_epi16(_mm256_and_si256(q, _mm256_set1_epi8(up ? 1 : 3)), _mm_cvtsi32_si128(up));
}
inline I dot_u8_s8(V u, V a) {  // sum of u[i] * a[i] in 8 lanes; u <= 128 keeps maddubs' int16 pairs exact
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
#endif
}
inline I dot_unsigned(V u, const int8_t* a) { return dot_u8_s8(u, load32(reinterpret_cast<const uint8_t*>(a))); }
inline I dot_signed(V w, const int8_t* a) {
  const V av = load32(reinterpret_cast<const uint8_t*>(a));
  return dot_u8_s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(av, w));
}
// Q6_K: weights -32..31 with one scale for bytes 0..15 and another for 16..31
inline I dot_signed_2scales(V w, const int8_t* a, int s0, int s1) {
  const V av = load32(reinterpret_cast<const uint8_t*>(a));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(av, w));
  return _mm256_madd_epi16(pairs, _mm256_setr_m128i(_mm_set1_epi16(short(s0)), _mm_set1_epi16(short(s1))));
}
// Q2_K: unsigned weights 0..3 with one scale for bytes 0..15 and another for 16..31
inline I dot_unsigned_2scales(V u, const int8_t* a, int s0, int s1) {
  const __m256i pairs = _mm256_maddubs_epi16(u, load32(reinterpret_cast<const uint8_t*>(a)));
  return _mm256_madd_epi16(pairs, _mm256_setr_m128i(_mm_set1_epi16(short(s0)), _mm_set1_epi16(short(s1))));
}
inline F fzero() { return _mm256_setzero_ps(); }
inline F fma_dot(I dot, float scale, F acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc);
}
inline float hsum(F v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// 32 unsigned bytes -> out[i] = scale * u[i] + coef
inline void to_floats_unsigned(V u, float scale, float coef, float* out) {
  const __m256 s = _mm256_set1_ps(scale), c = _mm256_set1_ps(coef);
  const __m128i halves[2] = {_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)};
  for (int j = 0; j < 4; ++j) {
    const __m128i part = (j & 1) ? _mm_srli_si128(halves[j / 2], 8) : halves[j / 2];
    _mm256_storeu_ps(out + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part)), s, c));
  }
}
// 32 unsigned bytes -> out[i] = scale * u[i] + coef, (scale, coef) = lo for i < 16, hi for 16..31
inline void to_floats_unsigned2(V u, float scale_lo, float coef_lo, float scale_hi, float coef_hi, float* out) {
  const __m128i halves[2] = {_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)};
  for (int j = 0; j < 4; ++j) {
    const __m128i part = (j & 1) ? _mm_srli_si128(halves[j / 2], 8) : halves[j / 2];
    const __m256 s = _mm256_set1_ps(j < 2 ? scale_lo : scale_hi), c = _mm256_set1_ps(j < 2 ? coef_lo : coef_hi);
    _mm256_storeu_ps(out + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part)), s, c));
  }
}
// 32 int8 -> out[i] = (i < 16 ? scale_lo : scale_hi) * w[i]
inline void to_floats_signed(V w, float scale_lo, float scale_hi, float* out) {
  const __m128i halves[2] = {_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)};
  for (int j = 0; j < 4; ++j) {
    const __m128i part = (j & 1) ? _mm_srli_si128(halves[j / 2], 8) : halves[j / 2];
    const __m256 s = _mm256_set1_ps(j < 2 ? scale_lo : scale_hi);
    _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), s));
  }
}

#else  // scalar fallback: the same operations on plain arrays
constexpr const char* kSimd = "scalar";
struct V { uint8_t b[32]; };
using I = int32_t;
using F = float;

inline V load32(const uint8_t* p) { V v; std::memcpy(v.b, p, 32); return v; }
inline V vor(V a, V b) { for (int i = 0; i < 32; ++i) a.b[i] |= b.b[i]; return a; }
inline V sub_bytes(V a, int c) { for (int i = 0; i < 32; ++i) a.b[i] = uint8_t(a.b[i] - c); return a; }
inline V nibbles16(const uint8_t* p) {
  V v;
  for (int i = 0; i < 16; ++i) { v.b[i] = p[i] & 15; v.b[i + 16] = p[i] >> 4; }
  return v;
}
inline V nibbles32_lo(const uint8_t* p) { V v; for (int i = 0; i < 32; ++i) v.b[i] = p[i] & 15; return v; }
inline V nibbles32_hi(const uint8_t* p) { V v; for (int i = 0; i < 32; ++i) v.b[i] = p[i] >> 4; return v; }
inline V bits32(const uint8_t* qh) {
  V v;
  for (int i = 0; i < 32; ++i) v.b[i] = ((qh[i / 8] >> (i % 8)) & 1) << 4;
  return v;
}
inline V high_bits(const uint8_t* qh, int shift, int mask) {
  V v;
  for (int i = 0; i < 32; ++i) v.b[i] = uint8_t(((qh[i] >> shift) & mask) << 4);
  return v;
}
inline V crumbs32(const uint8_t* p, int shift, int up) {
  V v;
  for (int i = 0; i < 32; ++i) v.b[i] = uint8_t(((p[i] >> shift) & (up ? 1 : 3)) << up);
  return v;
}
inline I dot_unsigned_2scales(V u, const int8_t* a, int s0, int s1) {
  I lo = 0, hi = 0;
  for (int i = 0; i < 16; ++i) { lo += int(u.b[i]) * a[i]; hi += int(u.b[i + 16]) * a[i + 16]; }
  return lo * s0 + hi * s1;
}
inline I dot_unsigned(V u, const int8_t* a) { I s = 0; for (int i = 0; i < 32; ++i) s += int(u.b[i]) * a[i]; return s; }
inline I dot_signed(V w, const int8_t* a) {
  I s = 0;
  for (int i = 0; i < 32; ++i) s += int(int8_t(w.b[i])) * a[i];
  return s;
}
inline I dot_signed_2scales(V w, const int8_t* a, int s0, int s1) {
  I lo = 0, hi = 0;
  for (int i = 0; i < 16; ++i) { lo += int(int8_t(w.b[i])) * a[i]; hi += int(int8_t(w.b[i + 16])) * a[i + 16]; }
  return lo * s0 + hi * s1;
}
inline F fzero() { return 0.0f; }
inline F fma_dot(I dot, float scale, F acc) { return acc + float(dot) * scale; }
inline float hsum(F v) { return v; }
inline void to_floats_unsigned(V u, float scale, float coef, float* out) {
  for (int i = 0; i < 32; ++i) out[i] = scale * float(u.b[i]) + coef;
}
inline void to_floats_unsigned2(V u, float scale_lo, float coef_lo, float scale_hi, float coef_hi, float* out) {
  for (int i = 0; i < 32; ++i) out[i] = i < 16 ? scale_lo * float(u.b[i]) + coef_lo : scale_hi * float(u.b[i]) + coef_hi;
}
inline void to_floats_signed(V w, float scale_lo, float scale_hi, float* out) {
  for (int i = 0; i < 32; ++i) out[i] = (i < 16 ? scale_lo : scale_hi) * float(int8_t(w.b[i]));
}
#endif

}  // namespace llmchat_quant
