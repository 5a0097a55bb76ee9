// y = x @ W.T for a GGUF-quantized W on the CPU, reading only the quantized bytes (llama.cpp's scheme): each
// activation row is quantized to int8 per 32 values (scale d = max|x| / 127, plus d * sum(q) for the offset
// and min terms), each 32-weight group is an integer dot product scaled in fp32. Also: W dequantized to fp32
// (for many rows, where a GEMM wins) and single rows of W dequantized (an embedding lookup).
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <vector>

#include "decode_ops.h"
#include "quant_blocks.h"
#include "quant_kquants_avx512.h"
#include "quant_ktiles_avx512.h"
#include "quant_tiles_avx512.h"

namespace llmchat_quant {
namespace {

void quantize_row(const float* x, int64_t k, int8_t* q, float* d, float* s, float* h) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    int sum = 0, half = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = int(std::nearbyint(xb[i] * inv));
      q[32 * b + i] = int8_t(v);
      sum += v;
      if (i == 15) half = sum;
    }
    d[b] = scale;
    s[b] = scale * float(sum);
    h[b] = scale * float(half);
  }
}

template <int MT>
struct DotVisitor {  // MT activation rows against one weight row
  const ActRow* act;
  F acc[MT];
  float offset[MT];
  DotVisitor(const ActRow* a) : act(a) {
    for (int m = 0; m < MT; ++m) { acc[m] = fzero(); offset[m] = 0.0f; }
  }
  inline void us(int g, V u, float scale, float coef) {
    for (int m = 0; m < MT; ++m) {
      acc[m] = fma_dot(dot_unsigned(u, act[m].q + 32 * g), scale * act[m].d[g], acc[m]);
      offset[m] += coef * act[m].s[g];
    }
  }
  inline void ss(int g, V w, float scale) {
    for (int m = 0; m < MT; ++m) acc[m] = fma_dot(dot_signed(w, act[m].q + 32 * g), scale * act[m].d[g], acc[m]);
  }
  inline void s6(int g, V w, float d, int s0, int s1) {
    for (int m = 0; m < MT; ++m)
      acc[m] = fma_dot(dot_signed_2scales(w, act[m].q + 32 * g, s0, s1), d * act[m].d[g], acc[m]);
  }
  inline void u2(int g, V u, float d, int s0, int s1, float dmin, int m0, int m1) {
    for (int m = 0; m < MT; ++m) {
      acc[m] = fma_dot(dot_unsigned_2scales(u, act[m].q + 32 * g, s0, s1), d * act[m].d[g], acc[m]);
      offset[m] -= dmin * (float(m0) * act[m].h[g] + float(m1) * (act[m].s[g] - act[m].h[g]));
    }
  }
};

struct DequantVisitor {  // one weight row -> fp32
  float* out;
  inline void us(int g, V u, float scale, float coef) { to_floats_unsigned(u, scale, coef, out + 32 * g); }
  inline void ss(int g, V w, float scale) { to_floats_signed(w, scale, scale, out + 32 * g); }
  inline void s6(int g, V w, float d, int s0, int s1) {
    to_floats_signed(w, d * float(s0), d * float(s1), out + 32 * g);
  }
  inline void u2(int g, V u, float d, int s0, int s1, float dmin, int m0, int m1) {
    to_floats_unsigned2(u, d * float(s0), -dmin * float(m0), d * float(s1), -dmin * float(m1), out + 32 * g);
  }
};

template <int QT, int MT>
void dot_rows(const uint8_t* wrow, int num_blocks, const ActRow* act, float* y, int64_t y_stride) {
#if defined(LLMCHAT_AVX512_KQUANTS)
  if constexpr (QT == kQ4_K) {
    dot_rows_q4k<MT>(wrow, num_blocks, act, y, y_stride);
    return;
  } else if constexpr (QT == kQ6_K) {
    dot_rows_q6k<MT>(wrow, num_blocks, act, y, y_stride);
    return;
  }
#endif
  DotVisitor<MT> v(act);
  visit_row<QT>(wrow, num_blocks, v);
  for (int m = 0; m < MT; ++m) y[m * y_stride] = hsum(v.acc[m]) + v.offset[m];
}

template <int QT>
void linear_rows(const uint8_t* w, int64_t row_bytes, int num_blocks, const std::vector<ActRow>& act,
                 float* y, int64_t n_out, int64_t n0, int64_t n1) {
  const int64_t num_rows = int64_t(act.size());
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wrow = w + n * row_bytes;
    int64_t m = 0;
    for (; m + 4 <= num_rows; m += 4) dot_rows<QT, 4>(wrow, num_blocks, &act[m], y + m * n_out + n, n_out);
    switch (num_rows - m) {
      case 3: dot_rows<QT, 3>(wrow, num_blocks, &act[m], y + m * n_out + n, n_out); break;
      case 2: dot_rows<QT, 2>(wrow, num_blocks, &act[m], y + m * n_out + n, n_out); break;
      case 1: dot_rows<QT, 1>(wrow, num_blocks, &act[m], y + m * n_out + n, n_out); break;
      default: break;
    }
  }
}

// columns [n0, n1): the tiled kernel where this build and block type have one and enough rows came, else row by
// row (the two give the same bits; `tiles` false forces the row-by-row loop, the reference the tests compare)
template <int QT>
void linear_cols(const uint8_t* w, int64_t row_bytes, int num_blocks, const std::vector<ActRow>& act,
                 const uint8_t* const* shifted, bool tiles, float* y, int64_t n_out, int64_t n0, int64_t n1) {
#if defined(LLMCHAT_AVX512_KTILES)
  if constexpr (ktiled_type<QT>()) {
    if (tiles && int64_t(act.size()) >= kKTileMinRows) {
      linear_ktiles<QT>(w, row_bytes, num_blocks, act, y, n_out, n0, n1);
      return;
    }
  }
#endif
#if defined(LLMCHAT_AVX512_TILES)
  if constexpr (tiled_type<QT>()) {
    if (tiles && int64_t(act.size()) >= kTileMinRows) {  // n0 is a multiple of kTileCols
      linear_tiles<QT>(w, row_bytes, num_blocks, act, shifted, y, n_out, n0 / kTileCols,
                       (n1 + kTileCols - 1) / kTileCols);
      return;
    }
  }
#endif
  (void)shifted;
  (void)tiles;
  linear_rows<QT>(w, row_bytes, num_blocks, act, y, n_out, n0, n1);
}

template <int QT>
void dequant_rows(const uint8_t* w, int64_t row_bytes, int num_blocks, const int64_t* ids, float* out, int64_t k,
                  int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    DequantVisitor v{out + r * k};
    visit_row<QT>(w + (ids ? ids[r] : r) * row_bytes, num_blocks, v);
  }
}

#define LLMCHAT_DISPATCH(qtype, FN, ...)                                     \
  switch (qtype) {                                                           \
    case kQ4_0: FN<kQ4_0>(__VA_ARGS__); break;                               \
    case kQ4_1: FN<kQ4_1>(__VA_ARGS__); break;                               \
    case kQ5_0: FN<kQ5_0>(__VA_ARGS__); break;                               \
    case kQ5_1: FN<kQ5_1>(__VA_ARGS__); break;                               \
    case kQ8_0: FN<kQ8_0>(__VA_ARGS__); break;                               \
    case kQ2_K: FN<kQ2_K>(__VA_ARGS__); break;                               \
    case kQ3_K: FN<kQ3_K>(__VA_ARGS__); break;                               \
    case kQ4_K: FN<kQ4_K>(__VA_ARGS__); break;                               \
    case kQ5_K: FN<kQ5_K>(__VA_ARGS__); break;                               \
    case kQ6_K: FN<kQ6_K>(__VA_ARGS__); break;                               \
    default: TORCH_CHECK(false, "unsupported GGUF block type ", qtype);      \
  }

void check_weight(const torch::Tensor& w, int64_t qtype, int64_t n_out, int64_t k) {
  TORCH_CHECK(block_bytes(int(qtype)) > 0, "unsupported GGUF block type ", qtype);
  TORCH_CHECK(k % block_weights(int(qtype)) == 0, "in_features must be whole blocks");
  TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == torch::kUInt8 && w.is_contiguous() && w.dim() == 2 &&
                  w.size(0) == n_out && w.size(1) == k / block_weights(int(qtype)) * block_bytes(int(qtype)),
              "weight must be contiguous uint8 [out_features, row_bytes] on the CPU");
}

}  // namespace

torch::Tensor quant_linear(const torch::Tensor& x, const torch::Tensor& w, int64_t qtype, int64_t n_out,
                           int64_t k, bool tiles) {
  check_weight(w, qtype, n_out, k);
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.dim() == 2 && x.size(1) == k,
              "x must be fp32 [num_rows, in_features] on the CPU");
  const torch::Tensor xc = x.contiguous();
  const int64_t num_rows = xc.size(0);
  auto y = torch::empty({num_rows, n_out}, xc.options());  // [num_rows, out_features]
  if (num_rows == 0 || n_out == 0) return y;
  auto q = torch::empty({num_rows, k}, xc.options().dtype(torch::kChar));  // [num_rows, in_features]
  auto ds = torch::empty({3, num_rows, k / 32}, xc.options());  // scales, scaled sums, first-half sums
  const float* xp = xc.data_ptr<float>();
  int8_t* qp = q.data_ptr<int8_t>();
  float* dp = ds.data_ptr<float>();
  std::vector<ActRow> act(num_rows);
  for (int64_t m = 0; m < num_rows; ++m) {
    act[m] = {qp + m * k, dp + m * (k / 32), dp + (num_rows + m) * (k / 32), dp + (2 * num_rows + m) * (k / 32)};
  }
  at::parallel_for(0, num_rows, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) quantize_row(xp + m * k, k, qp + m * k, dp + m * (k / 32),
                                                   dp + (num_rows + m) * (k / 32), dp + (2 * num_rows + m) * (k / 32));
  });
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int64_t row_bytes = w.size(1);
  const int num_blocks = int(k / block_weights(int(qtype)));
  float* yp = y.data_ptr<float>();
  std::vector<const uint8_t*> shifted(num_rows, nullptr);  // Q8_0's activations + 128, for the tiled kernel
  torch::Tensor shifted_q;
#if defined(LLMCHAT_AVX512_TILES)
  if (qtype == kQ8_0 && tiles && num_rows >= kTileMinRows) {
    shifted_q = q.view(torch::kByte).bitwise_xor(128);
    for (int64_t m = 0; m < num_rows; ++m) shifted[m] = shifted_q.data_ptr<uint8_t>() + m * k;
  }
#endif
  const int64_t num_tiles = (n_out + 7) / 8;  // work is split at whole tiles of 8 weight rows
  at::parallel_for(0, num_tiles, 2, [&](int64_t t0, int64_t t1) {
    LLMCHAT_DISPATCH(int(qtype), linear_cols, wp, row_bytes, num_blocks, act, shifted.data(), tiles, yp, n_out,
                     8 * t0, std::min(n_out, 8 * t1));
  });
  return y;
}

torch::Tensor dequantize(const torch::Tensor& w, int64_t qtype, int64_t n_out, int64_t k,
                         const c10::optional<torch::Tensor>& row_ids, const c10::optional<torch::Tensor>& out_buf) {
  check_weight(w, qtype, n_out, k);
  torch::Tensor ids;
  int64_t num_rows = n_out;
  if (row_ids.has_value()) {
    ids = row_ids->to(torch::kLong).contiguous();
    num_rows = ids.numel();
    if (num_rows) {
      TORCH_CHECK(ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < n_out, "row id out of range");
    }
  }
  torch::Tensor out;  // [num_rows, in_features]
  if (out_buf.has_value()) {  // a scratch buffer the caller keeps (no page faults of a fresh allocation)
    TORCH_CHECK(out_buf->scalar_type() == torch::kFloat && out_buf->is_contiguous() &&
                    out_buf->numel() >= num_rows * k, "out must be a contiguous fp32 buffer of num_rows * k");
    out = out_buf->view(-1).narrow(0, 0, num_rows * k).view({num_rows, k});
  } else {
    out = torch::empty({num_rows, k}, w.options().dtype(torch::kFloat));
  }
  const int64_t* idp = row_ids.has_value() ? ids.data_ptr<int64_t>() : nullptr;
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int num_blocks = int(k / block_weights(int(qtype)));
  float* op = out.data_ptr<float>();
  at::parallel_for(0, num_rows, 8, [&](int64_t r0, int64_t r1) {
    LLMCHAT_DISPATCH(int(qtype), dequant_rows, wp, w.size(1), num_blocks, idp, op, k, r0, r1);
  });
  return out;
}

std::string simd() { return kSimd; }

}  // namespace llmchat_quant

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("quant_linear", &llmchat_quant::quant_linear, "y = x @ dequantize(w).T from the quantized bytes",
        pybind11::arg("x"), pybind11::arg("w"), pybind11::arg("qtype"), pybind11::arg("n_out"), pybind11::arg("k"),
        pybind11::arg("tiles") = true);
  m.def("dequantize", &llmchat_quant::dequantize, "w (or its rows row_ids) as fp32",
        pybind11::arg("w"), pybind11::arg("qtype"), pybind11::arg("n_out"), pybind11::arg("k"),
        pybind11::arg("row_ids") = pybind11::none(), pybind11::arg("out") = pybind11::none());
  m.def("simd", &llmchat_quant::simd, "the instruction set this build uses");
  // the small ops of a decode step (decode_ops.cpp)
  m.def("rms_norm", &llmchat_decode::rms_norm);
  m.def("add_rms_norm", &llmchat_decode::add_rms_norm);
  m.def("rope_", &llmchat_decode::rope_);
  m.def("silu_and_mul", &llmchat_decode::silu_and_mul);
  m.def("store_kv", &llmchat_decode::store_kv);
  m.def("paged_decode_attention", &llmchat_decode::paged_decode_attention);
  llmchat_decode::bind_decode_stack(m);
}
