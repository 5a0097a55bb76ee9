// The small ops of a CPU decode step, each one call instead of a handful of torch ops: RMSNorm (with the
// residual add in front), rotate-half RoPE in place, SiLU(gate) * up, writing new K/V into the paged cache and
// attention of one query token per sequence over its paged K/V. fp32 only (the CPU activation dtype); the
// Python side (kernels/decode_ops_cpu.py) sends anything else to the torch references. Each op beside its
// torch reference is tested in tests/kernels/test_decode_ops_cpu.py.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_ops.h"

namespace llmchat_decode {
namespace {

// Work (multiply-adds, or elements) below which a parallel region costs more than it saves: waking the second
// thread takes microseconds, and far more when another process holds the other core.
constexpr int64_t kMinWorkPerTask = 1 << 15;

// rows of a 2-D or 3-D tensor whose last dimension is contiguous: row r starts at base + offset(r)
struct Rows {
  float* base;
  int64_t inner, stride0, stride1;  // leading dims [n0, inner] (inner = 1 for 2-D)
  float* row(int64_t r) const { return base + (r / inner) * stride0 + (r % inner) * stride1; }
};

Rows rows_of(const torch::Tensor& t) {
  if (t.dim() == 2) return {t.data_ptr<float>(), 1, t.stride(0), 0};
  TORCH_CHECK(t.dim() == 3, "expected a 2-D or 3-D tensor");
  return {t.data_ptr<float>(), t.size(1), t.stride(0), t.stride(1)};
}

void normalize_row(const float* h, const float* w, float eps, int64_t n, float* out) {
  const float inv = 1.0f / std::sqrt(dot(h, h, n) / float(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (h[i] * inv);
}

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_f32_lastdim(x, "x");
  const int64_t n = x.size(-1), num_rows = x.numel() / std::max<int64_t>(n, 1);
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == n && weight.scalar_type() == torch::kFloat32);
  auto out = torch::empty(x.sizes(), x.options());
  const Rows src = rows_of(x);
  const float* w = weight.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, num_rows, std::max<int64_t>(1, kMinWorkPerTask / std::max<int64_t>(n, 1)), [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) normalize_row(src.row(r), w, float(eps), n, dst + r * n);
  });
  return out;
}

std::vector<torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                        const torch::Tensor& weight, double eps) {
  check_f32_lastdim(x, "x");
  check_f32_lastdim(residual, "residual");
  TORCH_CHECK(x.dim() == 2 && residual.sizes() == x.sizes(), "x and residual must be [rows, dim] alike");
  const int64_t num_rows = x.size(0), n = x.size(1);
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == n && weight.scalar_type() == torch::kFloat32);
  auto h = torch::empty({num_rows, n}, x.options());
  auto out = torch::empty({num_rows, n}, x.options());
  const float *xp = x.data_ptr<float>(), *rp = residual.data_ptr<float>(), *w = weight.data_ptr<float>();
  float *hp = h.data_ptr<float>(), *op = out.data_ptr<float>();
  const int64_t xs = x.stride(0), rs = residual.stride(0);
  at::parallel_for(0, num_rows, std::max<int64_t>(1, kMinWorkPerTask / std::max<int64_t>(n, 1)), [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      float* hr = hp + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) hr[i] = xp[r * xs + i] + rp[r * rs + i];
      normalize_row(hr, w, float(eps), n, op + r * n);
    }
  });
  return {out, h};
}

void rope_(torch::Tensor& q, torch::Tensor& k, const torch::Tensor& positions, const torch::Tensor& cos_sin) {
  check_f32_lastdim(q, "q");
  check_f32_lastdim(k, "k");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0), "q, k: [tokens, heads, dims]");
  TORCH_CHECK(positions.scalar_type() == torch::kInt64 && positions.is_contiguous(), "positions: int64");
  TORCH_CHECK(cos_sin.is_contiguous() && cos_sin.scalar_type() == torch::kFloat32, "cos_sin: contiguous fp32");
  const int64_t rot = cos_sin.size(1), half = rot / 2, num_tokens = q.size(0), max_pos = cos_sin.size(0);
  TORCH_CHECK(rot <= q.size(2) && rot <= k.size(2) && rot % 2 == 0, "the table is wider than the heads");
  const int64_t* pos = positions.data_ptr<int64_t>();
  const float* table = cos_sin.data_ptr<float>();
  for (int64_t t = 0; t < num_tokens; ++t) TORCH_CHECK(pos[t] >= 0 && pos[t] < max_pos, "position out of the table");
  auto turn = [&](torch::Tensor& x, int64_t t) {
    const float* cos = table + pos[t] * rot;
    const float* sin = cos + half;
    float* row = x.data_ptr<float>() + t * x.stride(0);
    for (int64_t hd = 0; hd < x.size(1); ++hd) {
      float* x1 = row + hd * x.stride(1);
      float* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i];
        x1[i] = a * cos[i] - b * sin[i];
        x2[i] = b * cos[i] + a * sin[i];
      }
    }
  };
  const int64_t work = (q.size(1) + k.size(1)) * rot;
  at::parallel_for(0, num_tokens, std::max<int64_t>(1, kMinWorkPerTask / std::max<int64_t>(work, 1)), [&](int64_t a, int64_t b) {
    for (int64_t t = a; t < b; ++t) {
      turn(q, t);
      turn(k, t);
    }
  });
}

torch::Tensor silu_and_mul(const torch::Tensor& gate_up) {
  check_f32_lastdim(gate_up, "gate_up");
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "gate_up: [rows, 2 * intermediate]");
  const int64_t num_rows = gate_up.size(0), n = gate_up.size(1) / 2, stride = gate_up.stride(0);
  auto out = torch::empty({num_rows, n}, gate_up.options());
  const float* src = gate_up.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, num_rows, std::max<int64_t>(1, kMinWorkPerTask / std::max<int64_t>(n, 1)), [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const float *gate = src + r * stride, *up = gate + n;
      float* out_row = dst + r * n;
      silu_mul_row(gate, up, n, out_row);
    }
  });
  return out;
}

void store_kv(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& k_cache, torch::Tensor& v_cache,
              const torch::Tensor& slot_mapping) {
  check_f32_lastdim(k, "k");
  check_f32_lastdim(v, "v");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.scalar_type() == torch::kFloat32 &&
              v_cache.scalar_type() == torch::kFloat32, "the caches must be contiguous fp32");
  TORCH_CHECK(slot_mapping.scalar_type() == torch::kInt64 && slot_mapping.is_contiguous(), "slot_mapping: int64");
  const int64_t num_tokens = k.size(0), heads = k.size(1), dims = k.size(2);
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1), row = heads * dims;
  TORCH_CHECK(k_cache.size(2) == heads && k_cache.size(3) == dims && v.sizes() == k.sizes());
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  float *kc = k_cache.data_ptr<float>(), *vc = v_cache.data_ptr<float>();
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    TORCH_CHECK(slot < num_slots, "slot ", slot, " is outside the cache");
    for (int64_t hd = 0; hd < heads; ++hd) {
      std::copy_n(k.data_ptr<float>() + t * k.stride(0) + hd * k.stride(1), dims, kc + slot * row + hd * dims);
      std::copy_n(v.data_ptr<float>() + t * v.stride(0) + hd * v.stride(1), dims, vc + slot * row + hd * dims);
    }
  }
}

}  // namespace llmchat_decode
