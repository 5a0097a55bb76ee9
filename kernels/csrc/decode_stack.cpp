// A decode step's whole decoder stack in one call: every layer's norms, quantized projections, RoPE, KV store
// and paged attention, then the final norm, with no Python between the ops. It calls the same kernels in the
// same order as the model's Python forward on the C++ kernels (core/model/model.py with kernels/ops.py), so its
// output is the same bits (tests/test_decode_stack.py); it only saves the interpreter's time per op, which at
// one token per sequence is a third of the step on a small model. Built from a model by
// core/model/decode_stack.py, for the layer kinds it knows: pre-norm blocks with SwiGLU on GGUF-quantized
// weights (optional q/k/v biases, q/k norms, partial or no RoPE, sliding windows, soft-capped scores).
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>
#include <vector>

#include "decode_ops.h"

namespace llmchat_quant {  // quant_linear.cpp
torch::Tensor quant_linear(const torch::Tensor& x, const torch::Tensor& w, int64_t qtype, int64_t n_out,
                           int64_t k, bool tiles);
}

namespace llmchat_decode {
namespace {

struct Part {  // one GGUF-quantized weight, rows of a projection
  torch::Tensor data;
  int64_t qtype, out_features, in_features;
};

struct Projection {
  std::vector<Part> parts;
  std::optional<torch::Tensor> bias;

  torch::Tensor operator()(const torch::Tensor& x) const {
    std::vector<torch::Tensor> outs;
    for (const Part& p : parts)
      outs.push_back(llmchat_quant::quant_linear(x, p.data, p.qtype, p.out_features, p.in_features, true));
    torch::Tensor y = outs.size() == 1 ? outs[0] : torch::cat(outs, -1);
    return bias ? y.add_(*bias) : y;
  }
};

struct Layer {
  torch::Tensor input_norm, post_attention_norm;
  Projection qkv, o, gate_up, down;
  std::optional<torch::Tensor> q_norm, k_norm, rope_table;  // no table: a layer without RoPE
  int64_t window;
  double softcap;
};

std::vector<Part> parts_of(const pybind11::list& parts) {  // [(data, qtype, out_features, in_features)]
  std::vector<Part> out;
  for (const auto& item : parts) {
    auto t = item.cast<pybind11::tuple>();
    out.push_back({t[0].cast<torch::Tensor>(), t[1].cast<int64_t>(), t[2].cast<int64_t>(), t[3].cast<int64_t>()});
  }
  return out;
}

}  // namespace

class DecodeStack {
 public:
  DecodeStack(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps, double scale,
              torch::Tensor final_norm)
      : num_heads_(num_heads), num_kv_heads_(num_kv_heads), head_dim_(head_dim), eps_(eps), scale_(scale),
        final_norm_(std::move(final_norm)) {}

  void add_layer(torch::Tensor input_norm, torch::Tensor post_attention_norm, const pybind11::list& qkv,
                 std::optional<torch::Tensor> qkv_bias, const pybind11::list& o, const pybind11::list& gate_up,
                 const pybind11::list& down, std::optional<torch::Tensor> q_norm, std::optional<torch::Tensor> k_norm,
                 std::optional<torch::Tensor> rope_table, int64_t window, double softcap) {
    layers_.push_back({std::move(input_norm), std::move(post_attention_norm), {parts_of(qkv), std::move(qkv_bias)},
                       {parts_of(o), std::nullopt}, {parts_of(gate_up), std::nullopt}, {parts_of(down), std::nullopt},
                       std::move(q_norm), std::move(k_norm), std::move(rope_table), window, softcap});
  }

  // x [num_seqs, hidden] (the embedded tokens, one per sequence) -> the final norm's output [num_seqs, hidden]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& slot_mapping,
                        const torch::Tensor& block_tables, const torch::Tensor& seq_lens,
                        const std::vector<torch::Tensor>& k_caches, const std::vector<torch::Tensor>& v_caches) {
    TORCH_CHECK(k_caches.size() == layers_.size() && v_caches.size() == layers_.size(), "one cache per layer");
    const int64_t n = x.size(0), q_size = num_heads_ * head_dim_, kv_size = num_kv_heads_ * head_dim_;
    torch::Tensor h, residual = x, hidden = x;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& L = layers_[i];
      if (i == 0) {
        h = rms_norm(x, L.input_norm, eps_);
      } else {
        auto out = add_rms_norm(hidden, residual, L.input_norm, eps_);
        h = out[0], residual = out[1];
      }
      torch::Tensor qkv = L.qkv(h);
      torch::Tensor q = qkv.narrow(1, 0, q_size).view({n, num_heads_, head_dim_});
      torch::Tensor k = qkv.narrow(1, q_size, kv_size).view({n, num_kv_heads_, head_dim_});
      torch::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size).view({n, num_kv_heads_, head_dim_});
      if (L.q_norm && L.k_norm) q = rms_norm(q, *L.q_norm, eps_), k = rms_norm(k, *L.k_norm, eps_);
      if (L.rope_table) rope_(q, k, positions, *L.rope_table);
      torch::Tensor k_cache = k_caches[i], v_cache = v_caches[i];
      store_kv(k, v, k_cache, v_cache, slot_mapping);
      torch::Tensor attn = paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale_, L.window,
                                                  L.softcap);
      auto out = add_rms_norm(L.o(attn.view({n, q_size})), residual, L.post_attention_norm, eps_);
      h = out[0], residual = out[1];
      hidden = L.down(silu_and_mul(L.gate_up(h)));
    }
    return add_rms_norm(hidden, residual, final_norm_, eps_)[0];
  }

  int64_t num_layers() const { return int64_t(layers_.size()); }

 private:
  int64_t num_heads_, num_kv_heads_, head_dim_;
  double eps_, scale_;
  torch::Tensor final_norm_;
  std::vector<Layer> layers_;
};

void bind_decode_stack(pybind11::module& m) {
  pybind11::class_<DecodeStack>(m, "DecodeStack", pybind11::module_local())  // one per build (tests load several)
      .def(pybind11::init<int64_t, int64_t, int64_t, double, double, torch::Tensor>())
      .def("add_layer", &DecodeStack::add_layer)
      .def("forward", &DecodeStack::forward)
      .def("num_layers", &DecodeStack::num_layers);
}

}  // namespace llmchat_decode
