// Decode attention on the CPU: one query token per sequence over its K/V in the paged cache, fp32.
//
// Work is split as flash-decoding splits it: a task is one sequence's KV head and one chunk of its keys, with
// all the query heads of that KV head's group (GQA) against each key row read once. A task leaves, per query
// head, the chunk's max score, its sum of exp(score - max) and its unnormalized sum of exp(...) * v; the
// chunks of a head are then merged by rescaling to the largest max. The chunking depends on the sequence's
// length only, never on the batch or the thread count, so a sequence gets the same bits whatever runs
// beside it. Sliding windows read only the last `window` keys; soft-capping caps each score at
// softcap * tanh(s / softcap). Stale slots past each length are never read.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_ops.h"

namespace llmchat_decode {
namespace {

constexpr int64_t kChunk = 256;  // keys per task
constexpr int64_t kMinTaskWork = 1 << 18;  // multiply-adds per parallel share (smaller: one thread runs it all)

struct Task {
  int64_t seq, kv_head, chunk, begin, end;  // keys [begin, end) of the sequence
};

}  // namespace

torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                     const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& seq_lens, double scale, int64_t window, double softcap) {
  check_f32_lastdim(q, "q");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.scalar_type() == torch::kFloat32 &&
              v_cache.scalar_type() == torch::kFloat32, "the caches must be contiguous fp32");
  TORCH_CHECK(block_tables.scalar_type() == torch::kInt32 && block_tables.is_contiguous(), "block_tables: int32");
  TORCH_CHECK(seq_lens.scalar_type() == torch::kInt32 && seq_lens.is_contiguous(), "seq_lens: int32");
  const int64_t num_seqs = q.size(0), num_q_heads = q.size(1), dims = q.size(2);
  const int64_t num_blocks = k_cache.size(0), block_size = k_cache.size(1), num_kv_heads = k_cache.size(2);
  TORCH_CHECK(num_q_heads % num_kv_heads == 0 && k_cache.size(3) == dims, "heads or dims do not match the cache");
  const int64_t group = num_q_heads / num_kv_heads, max_blocks = block_tables.size(1);
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  std::vector<Task> tasks;
  std::vector<int64_t> first_chunk(num_seqs + 1, 0);  // sequence s's chunks: [first_chunk[s], first_chunk[s+1])
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = lens[s], used = (len + block_size - 1) / block_size;
    TORCH_CHECK(len >= 1 && used <= max_blocks, "bad seq_len ", len);
    for (int64_t b = 0; b < used; ++b) {
      const int32_t id = tables[s * max_blocks + b];
      TORCH_CHECK(id >= 0 && id < num_blocks, "block id ", id, " is outside the cache");
    }
    const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
    const int64_t num_chunks = (len - start + kChunk - 1) / kChunk;
    first_chunk[s + 1] = first_chunk[s] + num_chunks;
    for (int64_t h = 0; h < num_kv_heads; ++h)
      for (int64_t c = 0; c < num_chunks; ++c)
        tasks.push_back({s, h, c, start + c * kChunk, std::min(len, start + (c + 1) * kChunk)});
  }
  const int64_t total_chunks = first_chunk[num_seqs];
  // per (chunk, query head of the sequence): [max, sum] and the unnormalized output
  std::vector<float> stats(total_chunks * num_q_heads * 2), partial(total_chunks * num_q_heads * dims);
  const float *kc = k_cache.data_ptr<float>(), *vc = v_cache.data_ptr<float>(), *qp = q.data_ptr<float>();
  const int64_t token_row = num_kv_heads * dims;
  auto slot = [&](int64_t s, int64_t t) {
    return (int64_t(tables[s * max_blocks + t / block_size]) * block_size + t % block_size) * token_row;
  };
  int64_t work = 0;  // multiply-adds in all
  for (const Task& task : tasks) work += (task.end - task.begin) * group * dims * 2;
  const int64_t num_tasks = int64_t(tasks.size());
  const int64_t grain = std::max<int64_t>(1, kMinTaskWork * num_tasks / std::max<int64_t>(work, 1));
  at::parallel_for(0, num_tasks, grain, [&](int64_t a, int64_t b) {
    std::vector<float> scores(group * kChunk), acc(group * dims);
    for (int64_t i = a; i < b; ++i) {
      const Task& task = tasks[i];
      const int64_t n = task.end - task.begin, head0 = task.kv_head * group;
      const float* qrow = qp + task.seq * q.stride(0) + head0 * q.stride(1);
      for (int64_t t = 0; t < n; ++t) {
        const float* key = kc + slot(task.seq, task.begin + t) + task.kv_head * dims;
        for (int64_t g = 0; g < group; ++g) {
          float score = dot(qrow + g * q.stride(1), key, dims) * float(scale);
          if (softcap > 0) score = float(softcap) * std::tanh(score / float(softcap));
          scores[g * kChunk + t] = score;
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int64_t row = (first_chunk[task.seq] + task.chunk) * num_q_heads + head0;  // (chunk, head) index
      for (int64_t g = 0; g < group; ++g) {
        float* sc = scores.data() + g * kChunk;
        const float top = *std::max_element(sc, sc + n);
        stats[(row + g) * 2] = top;
        stats[(row + g) * 2 + 1] = exp_shifted(sc, n, top);
      }
      for (int64_t t = 0; t < n; ++t) {
        const float* value = vc + slot(task.seq, task.begin + t) + task.kv_head * dims;
        for (int64_t g = 0; g < group; ++g) {
          const float p = scores[g * kChunk + t];
          float* out = acc.data() + g * dims;
#pragma omp simd
          for (int64_t d = 0; d < dims; ++d) out[d] += p * value[d];
        }
      }
      std::copy(acc.begin(), acc.end(), partial.begin() + row * dims);
    }
  });
  auto out = torch::empty({num_seqs, num_q_heads, dims}, q.options());
  float* op = out.data_ptr<float>();
  for (int64_t s = 0; s < num_seqs; ++s) {  // merge each head's chunks
    for (int64_t h = 0; h < num_q_heads; ++h) {
      float top = -INFINITY;
      for (int64_t c = first_chunk[s]; c < first_chunk[s + 1]; ++c) top = std::max(top, stats[(c * num_q_heads + h) * 2]);
      float sum = 0.0f;
      float* orow = op + (s * num_q_heads + h) * dims;
      std::fill_n(orow, dims, 0.0f);
      for (int64_t c = first_chunk[s]; c < first_chunk[s + 1]; ++c) {
        const int64_t row = c * num_q_heads + h;
        const float w = std::exp(stats[row * 2] - top);
        sum += stats[row * 2 + 1] * w;
        const float* part = partial.data() + row * dims;
#pragma omp simd
        for (int64_t d = 0; d < dims; ++d) orow[d] += w * part[d];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t d = 0; d < dims; ++d) orow[d] *= inv;
    }
  }
  return out;
}

}  // namespace llmchat_decode
