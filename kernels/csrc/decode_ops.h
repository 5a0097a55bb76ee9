// The small ops of a CPU decode step (decode_ops.cpp, decode_attention.cpp), bound in quant_linear.cpp's module.
#pragma once
#include <torch/extension.h>

#include <vector>

namespace llmchat_decode {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
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
