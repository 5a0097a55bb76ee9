// The small ops of a CPU decode step (decode_ops.cpp, decode_attention.cpp), bound in quant_linear.cpp's module.
#pragma once
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmchat_decode {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

#if defined(__AVX512F__)
// e^x for 16 lanes, |x| clamped to 88 (e^88 < FLT_MAX): 2^n * e^r with n = round(x / ln 2) and Cephes' expf
// polynomial for e^r (a relative error of ~1e-7, as libm's expf; libm has no vector form without -ffast-math)
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln 2 in two parts: r exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}
#endif

// x[i] = e^(x[i] - shift) for i < n; returns their sum
inline float exp_shifted(float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  const __m512 s = _mm512_set1_ps(shift);
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  sum = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i]
inline void silu_mul_row(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

inline void check_f32_lastdim(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32, name, " must be a CPU float32 tensor");
  TORCH_CHECK(t.size(-1) == 1 || t.stride(-1) == 1, name, "'s last dimension must be contiguous");
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// (weight * h / rms(h), h) with h = x + residual
std::vector<torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                        const torch::Tensor& weight, double eps);
// rotate-half RoPE of the first cos_sin.size(1) dims of every head of q and k, in place
void rope_(torch::Tensor& q, torch::Tensor& k, const torch::Tensor& positions, const torch::Tensor& cos_sin);
torch::Tensor silu_and_mul(const torch::Tensor& gate_up);
void store_kv(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& k_cache, torch::Tensor& v_cache,
              const torch::Tensor& slot_mapping);
// one query token per sequence over its paged K/V (decode_attention.cpp)
torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& seq_lens, double scale, int64_t window, double softcap);
// the class DecodeStack (decode_stack.cpp): a decode step's decoder layers in one call
void bind_decode_stack(pybind11::module& m);

}  // namespace llmchat_decode
