// MoE on the GPU: gate softmax and top-k, capacity with positional or random (RTS) priority,
// the aux loss, the token permutation (gathers and scatters by index, not one-hot matmuls) and
// the experts as batched GEMMs. Semantics: routing/gating.hpp, with kernels/cpu/gating.cpp as
// the reference the tests hold it to.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cfloat>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "ted/core/random.hpp"
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {
namespace {

// One thread per token: softmax, first choice (argmax of the logits, lowest index on ties, as
// std::max_element; not of the probabilities, which can round two near logits equal), second
// choice (argmax of the other logits, plus Gumbel noise if asked), the chosen probabilities,
// and the first-choice counts.
__global__ void gate_kernel(const float* logits, int tokens, int experts, int top_k,
                            routing::GateConfig config, routing::RoutingKey key, float* probs,
                            std::int32_t* expert, std::int32_t* slot, float* gate_value,
                            std::int32_t* first_count) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= tokens) return;
  const float* row = logits + static_cast<std::size_t>(s) * experts;
  float* p = probs + static_cast<std::size_t>(s) * experts;
  int largest = 0;
  for (int e = 1; e < experts; ++e)
    if (row[e] > row[largest]) largest = e;
  const float max = row[largest];
  const int first = key.forced ? key.forced[s * top_k] : largest;
  float sum = 0;
  for (int e = 0; e < experts; ++e) sum += (p[e] = expf(row[e] - max));
  for (int e = 0; e < experts; ++e) p[e] /= sum;
  expert[s * top_k] = first;
  slot[s * top_k] = -1;
  gate_value[s * top_k] = p[first];
  atomicAdd(first_count + first, 1);
  if (top_k == 2 && key.forced) {
    const int second = key.forced[s * top_k + 1];
    expert[s * top_k + 1] = second;
    slot[s * top_k + 1] = -1;
    gate_value[s * top_k + 1] = p[second];
  } else if (top_k == 2) {
    int second = -1;
    double best = -INFINITY;
    for (int e = 0; e < experts; ++e) {
      if (e == first) continue;
      double score = static_cast<double>(row[e]);
      if (config.second_choice_noise)
        score += random::gumbel(random::hash(key.seed, random::kSecondNoise, key.step, key.layer,
                                             (key.first_token + s) * experts + e));
      if (score > best) best = score, second = e;
    }
    expert[s * top_k + 1] = second;  // -1 when every score is NaN (an overflowed forward)
    slot[s * top_k + 1] = -1;
    gate_value[s * top_k + 1] = second >= 0 ? p[second] : 0.0f;
  }
}

__global__ void priority_kernel(int tokens, routing::RoutingKey key, std::uint64_t* score,
                                std::int32_t* order) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= tokens) return;
  score[s] =
      random::hash(key.seed, random::kTokenSelection, key.step, key.layer, key.first_token + s);
  order[s] = s;
}

__global__ void iota_kernel(std::int32_t* order, int tokens) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < tokens) order[s] = s;
}

__global__ void load_kernel(const std::int32_t* expert, int choices, std::int32_t* load) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < choices && expert[i] >= 0) atomicAdd(load + expert[i], 1);
}

// One block per expert. Round k gives every thread a contiguous run of the tokens in priority
// order; a block-wide scan of how many of each run's tokens chose the expert gives every matching
// choice its place among the matches, so slots are handed out in exactly the order of the CPU's
// sequential loop, and an expert's fill stops at the capacity.
__global__ void slot_kernel(const std::int32_t* __restrict__ expert,
                            const std::int32_t* __restrict__ order, int tokens, int top_k,
                            int capacity, std::int32_t* __restrict__ slot) {
  int* scan = dynamic_shared<int>();  // one count per thread
  const int e = blockIdx.x, t = threadIdx.x, threads = blockDim.x;
  const int per = (tokens + threads - 1) / threads;
  const int first = min(tokens, t * per), last = min(tokens, first + per);
  int fill = 0;
  for (int k = 0; k < top_k; ++k) {
    int count = 0;
    for (int i = first; i < last; ++i) count += expert[order[i] * top_k + k] == e;
    scan[t] = count;
    __syncthreads();
    for (int offset = 1; offset < threads; offset <<= 1) {  // inclusive scan over the threads
      const int before = t >= offset ? scan[t - offset] : 0;
      __syncthreads();
      scan[t] += before;
      __syncthreads();
    }
    int place = fill + scan[t] - count;
    const int matched = scan[threads - 1];
    for (int i = first; i < last; ++i) {
      const int s = order[i];
      if (expert[s * top_k + k] != e) continue;
      slot[s * top_k + k] = place < capacity ? place : -1;
      ++place;
    }
    fill = min(fill + matched, capacity);
    __syncthreads();  // the scan's buffer is the next round's
  }
}

__global__ void weight_kernel(const std::int32_t* slot, const float* gate_value, int tokens,
                              int top_k, float* weight) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= tokens) return;
  const int base = s * top_k;
  if (top_k == 1) {
    weight[base] = slot[base] >= 0 ? gate_value[base] : 0.0f;
  } else {
    float a = slot[base] >= 0 ? gate_value[base] : 0.0f;
    float b = slot[base + 1] >= 0 ? gate_value[base + 1] : 0.0f;
    float denominator = fmaxf(a + b, FLT_EPSILON);
    weight[base] = a / denominator;
    weight[base + 1] = b / denominator;
  }
}

// One block: for each expert, the threads sum strided shares of its column of probs and a fixed
// tree adds the shares, then thread 0 adds the experts' terms in expert order, all in double as
// the CPU does (a float running sum over the tokens drifts by about 1e-5 relative at S = 1000).
// blockDim.x is a power of two.
__global__ void aux_kernel(const float* probs, const std::int32_t* first_count, int tokens,
                           int experts, double* term, float* aux) {
  __shared__ double shares[kThreads];
  const int t = threadIdx.x;
  for (int e = 0; e < experts; ++e) {
    double sum = 0;
    for (int s = t; s < tokens; s += blockDim.x)
      sum += probs[static_cast<std::size_t>(s) * experts + e];
    shares[t] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
      if (t < half) shares[t] += shares[t + half];
      __syncthreads();
    }
    if (t == 0)
      term[e] =
          tokens ? (shares[0] / tokens) * (static_cast<double>(first_count[e]) / tokens) : 0.0;
    __syncthreads();
  }
  if (t == 0) {
    double total = 0;
    for (int e = 0; e < experts; ++e) total += term[e];
    *aux = static_cast<float>(total * experts);
  }
}

// d logits of one token, as model::route_backward.
template <typename T>
__global__ void route_backward_kernel(const float* probs, const std::int32_t* expert,
                                      const std::int32_t* slot, const float* gate_value,
                                      const std::int32_t* first_count, const float* d_weight,
                                      int tokens, int experts, int top_k, float aux_scale,
                                      T* d_logits) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= tokens) return;
  const int base = s * top_k;
  int e1 = expert[base], e2 = -1;
  float c1 = 0, c2 = 0;  // d weight-path contributions to d probs[e1], d probs[e2]
  if (top_k == 1) {
    if (slot[base] >= 0) c1 = d_weight[base];
  } else {
    e2 = expert[base + 1];
    float k1 = slot[base] >= 0 ? 1.0f : 0.0f, k2 = slot[base + 1] >= 0 ? 1.0f : 0.0f;
    float a = gate_value[base] * k1, b = gate_value[base + 1] * k2, sum = a + b;
    float dw1 = d_weight[base], dw2 = d_weight[base + 1];
    if (sum >= FLT_EPSILON) {
      float inv2 = 1.0f / (sum * sum);
      c1 = k1 * b * (dw1 - dw2) * inv2;
      c2 = k2 * a * (dw2 - dw1) * inv2;
    } else {
      c1 = k1 * dw1 / FLT_EPSILON;
      c2 = k2 * dw2 / FLT_EPSILON;
    }
  }
  const float* p = probs + static_cast<std::size_t>(s) * experts;
  auto d_prob = [&](int e) {
    float d = aux_scale * static_cast<float>(experts) *
              (static_cast<float>(first_count[e]) / tokens) / tokens;
    if (e == e1) d += c1;
    if (e == e2) d += c2;
    return d;
  };
  float dot = 0;
  for (int e = 0; e < experts; ++e) dot += p[e] * d_prob(e);
  T* out = d_logits + static_cast<std::size_t>(s) * experts;
  for (int e = 0; e < experts; ++e) out[e] = store<T>(p[e] * (d_prob(e) - dot));
}

// The token permutation, one block per row, N elements of T per load and store (a Pack where
// the rows allow it, else 1): a kept choice's row copied to its slot (dispatch); a token's row
// gathered from its kept slots, summed with the combine weights (combine) or added to dx
// (dispatch backward); a kept choice's slot gradient w dy[s] and its weight's gradient
// dy[s] . out[slot] (combine backward). Each token owns its row: no atomics.
template <typename T, int N>
__global__ void dispatch_kernel(const T* x, const std::int32_t* expert, const std::int32_t* slot,
                                int top_k, int capacity, int h, T* buffer) {
  const int c = blockIdx.x;
  if (slot[c] < 0) return;
  const T* from = x + static_cast<std::size_t>(c / top_k) * h;
  T* to = buffer + (static_cast<std::size_t>(expert[c]) * capacity + slot[c]) * h;
  for (int j = threadIdx.x * N; j < h; j += blockDim.x * N)
    store_pack(to + j, load_pack<T, N>(from + j));
}

template <typename T, int N, bool kCombine>
__global__ void gather_kernel(const T* rows, const std::int32_t* expert, const std::int32_t* slot,
                              const float* weight, int top_k, int capacity, int h, T* y) {
  const int s = blockIdx.x;
  // The token's kept choices (top_k is 1 or 2), in choice order: their rows and weights.
  const T* from[2] = {nullptr, nullptr};
  float w[2] = {0.0f, 0.0f};
  for (int k = 0; k < 2; ++k) {
    const int c = s * top_k + k;
    if (k >= top_k || slot[c] < 0) continue;
    from[k] = rows + (static_cast<std::size_t>(expert[c]) * capacity + slot[c]) * h;
    w[k] = kCombine ? weight[c] : 1.0f;
  }
  T* out = y + static_cast<std::size_t>(s) * h;
  for (int j = threadIdx.x * N; j < h; j += blockDim.x * N) {
    float acc[N];
    if (kCombine) {
      for (int q = 0; q < N; ++q) acc[q] = 0.0f;
    } else {
      const Chunk<T, N> old = load_pack<T, N>(out + j);
      for (int q = 0; q < N; ++q) acc[q] = load(old.v[q]);
    }
    for (int k = 0; k < 2; ++k) {
      if (!from[k]) continue;
      const Chunk<T, N> r = load_pack<T, N>(from[k] + j);
      for (int q = 0; q < N; ++q) acc[q] += w[k] * load(r.v[q]);
    }
    Chunk<T, N> result;
    for (int q = 0; q < N; ++q) result.v[q] = store<T>(acc[q]);
    store_pack(out + j, result);
  }
}

template <typename T, int N>
__global__ void combine_backward_kernel(const T* expert_out, const T* dy,
                                        const std::int32_t* expert, const std::int32_t* slot,
                                        const float* weight, int top_k, int capacity, int h,
                                        T* d_expert_out, float* d_weight) {
  __shared__ float shared[32];
  const int c = blockIdx.x;
  if (slot[c] < 0) {
    if (threadIdx.x == 0) d_weight[c] = 0;
    return;
  }
  const std::size_t row = static_cast<std::size_t>(expert[c]) * capacity + slot[c];
  const T* g = dy + static_cast<std::size_t>(c / top_k) * h;
  const float w = weight[c];
  float dot = 0;
  for (int j = threadIdx.x * N; j < h; j += blockDim.x * N) {
    const Chunk<T, N> gj = load_pack<T, N>(g + j), out = load_pack<T, N>(expert_out + row * h + j);
    Chunk<T, N> d;
    for (int q = 0; q < N; ++q) {
      d.v[q] = store<T>(w * load(gj.v[q]));
      dot += load(gj.v[q]) * load(out.v[q]);
    }
    store_pack(d_expert_out + row * h + j, d);
  }
  dot = block_sum(dot, shared);
  if (threadIdx.x == 0) d_weight[c] = dot;
}

// Calls launch_with(width) with the elements a row kernel moves at once: a Pack of T where the
// rows allow it (h a multiple of it, every row pointer 16-byte aligned), else 1.
template <typename T, typename Launch>
void by_width(int h, std::initializer_list<const void*> pointers, Launch&& launch_with) {
  if (packable<T>(h, pointers))
    launch_with(std::integral_constant<int, Pack<T>::kSize>{});
  else
    launch_with(std::integral_constant<int, 1>{});
}

__global__ void count_dropped_kernel(const std::int32_t* slot, int choices, std::int32_t* dropped) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < choices && slot[i] < 0) atomicAdd(dropped, 1);
}

unsigned token_blocks(int tokens) {
  return static_cast<unsigned>((tokens + kThreads - 1) / kThreads);
}

template <typename T>
void ensure(Context& ctx, Tensor<T>& tensor, std::size_t size) {
  if (tensor.size() != size) tensor = Tensor<T>(ctx.device(), size);
}

// The routing's workspace, carved out of one buffer: RTS keys (before and after the sort),
// token indices (identity and priority order), expert loads, aux terms, CUB's temporaries.
struct Workspace {
  std::uint64_t *scores, *sorted_scores;
  std::int32_t *identity, *order, *load;
  double* aux_terms;
  void* sort_temp;
  std::size_t sort_bytes;
};

std::size_t aligned(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

Workspace workspace(Context& ctx, DeviceBuffer& buffer, int tokens, int experts, bool rts) {
  std::size_t sort_bytes = 0;
  if (rts)
    TED_CHECK_CUDA(cub::DeviceRadixSort::SortPairsDescending(
        nullptr, sort_bytes, static_cast<const std::uint64_t*>(nullptr),
        static_cast<std::uint64_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
        static_cast<std::int32_t*>(nullptr), tokens, 0, 64, stream(ctx)));
  const std::size_t n = static_cast<std::size_t>(tokens), e = static_cast<std::size_t>(experts);
  const std::size_t sizes[] = {8 * n, 8 * n, 4 * n, 4 * n, 4 * e, 8 * e, sort_bytes};
  std::size_t total = 0;
  for (std::size_t bytes : sizes) total += aligned(bytes);
  if (buffer.bytes() < total) buffer = DeviceBuffer(ctx.device(), total);
  char* at = static_cast<char*>(buffer.data());
  auto take = [&](std::size_t bytes) {
    void* p = at;
    at += aligned(bytes);
    return p;
  };
  Workspace w;
  w.scores = static_cast<std::uint64_t*>(take(sizes[0]));
  w.sorted_scores = static_cast<std::uint64_t*>(take(sizes[1]));
  w.identity = static_cast<std::int32_t*>(take(sizes[2]));
  w.order = static_cast<std::int32_t*>(take(sizes[3]));
  w.load = static_cast<std::int32_t*>(take(sizes[4]));
  w.aux_terms = static_cast<double*>(take(sizes[5]));
  w.sort_temp = take(sort_bytes);
  w.sort_bytes = sort_bytes;
  return w;
}

}  // namespace

void route(Context& ctx, const float* logits, int tokens, const routing::GateConfig& config,
           const routing::RoutingKey& key, routing::Routing<float>& r) {
  const int E = config.experts, K = config.top_k;
  const std::size_t choices = static_cast<std::size_t>(tokens) * K;
  r.tokens = tokens;
  r.experts = E;
  r.top_k = K;
  ensure(ctx, r.probs, static_cast<std::size_t>(tokens) * E);
  ensure(ctx, r.expert, choices);
  ensure(ctx, r.slot, choices);
  ensure(ctx, r.gate_value, choices);
  ensure(ctx, r.weight, choices);
  ensure(ctx, r.first_count, E);
  ensure(ctx, r.aux, 1);
  cudaStream_t s = stream(ctx);
  TED_CHECK_CUDA(cudaMemsetAsync(r.first_count.data(), 0, E * sizeof(std::int32_t), s));
  if (tokens == 0) {
    r.capacity = config.dropless ? 0 : routing::expert_capacity(config, 0);
    TED_CHECK_CUDA(cudaMemsetAsync(r.aux.data(), 0, sizeof(float), s));
    return;
  }
  Workspace w = workspace(ctx, r.workspace, tokens, E, config.random_token_selection);
  launch<gate_kernel>(token_blocks(tokens), kThreads, 0, s, logits, tokens, E, K, config, key,
                      r.probs.data(), r.expert.data(), r.slot.data(), r.gate_value.data(),
                      r.first_count.data());

  if (config.random_token_selection) {  // stable sort by descending random score
    launch<priority_kernel>(token_blocks(tokens), kThreads, 0, s, tokens, key, w.scores,
                            w.identity);
    std::size_t temp_bytes = w.sort_bytes;
    TED_CHECK_CUDA(cub::DeviceRadixSort::SortPairsDescending(
        w.sort_temp, temp_bytes, w.scores, w.sorted_scores, w.identity, w.order, tokens, 0, 64, s));
  } else {
    launch<iota_kernel>(token_blocks(tokens), kThreads, 0, s, w.order, tokens);
  }

  // Dropless: capacity = the largest load, read back (the one allowed wait). It is this
  // group's own; with expert parallelism the MoE layer (model/moe.cpp) then agrees the largest
  // over the expert group before the buffers are sized, as for the CPU's routing.
  if (config.dropless) {
    TED_CHECK_CUDA(cudaMemsetAsync(w.load, 0, E * sizeof(std::int32_t), s));
    launch<load_kernel>(blocks_for(choices), kThreads, 0, s, r.expert.data(),
                        static_cast<int>(choices), w.load);
    std::vector<std::int32_t> host(E);
    ctx.device().copy_to_host(host.data(), w.load, E * sizeof(std::int32_t));
    r.capacity = 0;
    for (int v : host) r.capacity = std::max(r.capacity, v);
  } else {
    r.capacity = routing::expert_capacity(config, tokens);
  }
  // About 8 tokens per thread, whole warps, at most 1024 threads.
  const unsigned slot_threads =
      static_cast<unsigned>(std::clamp((tokens + 255) / 256 * 32, 32, 1024));
  launch<slot_kernel>(E, slot_threads, slot_threads * sizeof(int), s, r.expert.data(), w.order,
                      tokens, K, r.capacity, r.slot.data());
  launch<weight_kernel>(token_blocks(tokens), kThreads, 0, s, r.slot.data(), r.gate_value.data(),
                        tokens, K, r.weight.data());
  launch<aux_kernel>(1, kThreads, 0, s, r.probs.data(), r.first_count.data(), tokens, E,
                     w.aux_terms, r.aux.data());
}

template <typename T>
void route_backward(Context& ctx, const routing::Routing<float>& r, const float* d_weight,
                    float aux_scale, T* d_logits) {
  if (r.tokens == 0) return;
  launch<route_backward_kernel<T>>(token_blocks(r.tokens), kThreads, 0, stream(ctx), r.probs.data(),
                                   r.expert.data(), r.slot.data(), r.gate_value.data(),
                                   r.first_count.data(), d_weight, r.tokens, r.experts, r.top_k,
                                   aux_scale, d_logits);
}

routing::RoutingStats routing_stats(Context& ctx, const routing::Routing<float>& r) {
  routing::RoutingStats stats;
  const int choices = r.tokens * r.top_k;
  if (choices == 0) return stats;
  Tensor<std::int32_t> dropped = zeros<std::int32_t>(ctx.device(), 1);
  launch<count_dropped_kernel>(token_blocks(choices), kThreads, 0, stream(ctx), r.slot.data(),
                               choices, dropped.data());
  float aux = 0;
  std::int32_t count = 0;
  ctx.device().copy_to_host(&aux, r.aux.data(), sizeof aux);
  ctx.device().copy_to_host(&count, dropped.data(), sizeof count);
  stats.aux = aux;
  stats.dropped = count;
  // Each expert's load before drops, counted on the device: E integers read back.
  Tensor<std::int32_t> load = zeros<std::int32_t>(ctx.device(), r.experts);
  launch<load_kernel>(blocks_for(choices), kThreads, 0, stream(ctx), r.expert.data(), choices,
                      load.data());
  std::vector<std::int32_t> host(static_cast<std::size_t>(r.experts));
  ctx.device().copy_to_host(host.data(), load.data(), host.size() * sizeof(std::int32_t));
  stats.load.assign(host.begin(), host.end());
  return stats;
}

template <typename T>
void dispatch(Context& ctx, const T* x, const routing::Routing<float>& r, T* buffer, int h,
              int capacity) {
  const std::size_t full = static_cast<std::size_t>(r.experts) * capacity * h;
  if (!full) return;
  TED_CHECK_CUDA(cudaMemsetAsync(buffer, 0, full * sizeof(T), stream(ctx)));
  if (!r.tokens || !h) return;
  by_width<T>(h, {x, buffer}, [&](auto width) {
    launch<dispatch_kernel<T, decltype(width)::value>>(r.tokens * r.top_k, row_threads(h, width), 0,
                                                       stream(ctx), x, r.expert.data(),
                                                       r.slot.data(), r.top_k, capacity, h, buffer);
  });
}

template <typename T>
void dispatch_backward(Context& ctx, const T* d_buffer, const routing::Routing<float>& r, T* dx,
                       int h, int capacity) {
  if (!r.tokens || !h) return;
  by_width<T>(h, {d_buffer, dx}, [&](auto width) {
    launch<gather_kernel<T, decltype(width)::value, false>>(
        r.tokens, row_threads(h, width), 0, stream(ctx), d_buffer, r.expert.data(), r.slot.data(),
        nullptr, r.top_k, capacity, h, dx);
  });
}

template <typename T>
void combine(Context& ctx, const T* expert_out, const routing::Routing<float>& r, T* y, int h,
             int capacity) {
  if (!r.tokens || !h) return;
  by_width<T>(h, {expert_out, y}, [&](auto width) {
    launch<gather_kernel<T, decltype(width)::value, true>>(
        r.tokens, row_threads(h, width), 0, stream(ctx), expert_out, r.expert.data(), r.slot.data(),
        r.weight.data(), r.top_k, capacity, h, y);
  });
}

template <typename T>
void combine_backward(Context& ctx, const T* expert_out, const T* dy,
                      const routing::Routing<float>& r, T* d_expert_out, float* d_weight, int h,
                      int capacity) {
  const std::size_t full = static_cast<std::size_t>(r.experts) * capacity * h;
  if (full) TED_CHECK_CUDA(cudaMemsetAsync(d_expert_out, 0, full * sizeof(T), stream(ctx)));
  const int choices = r.tokens * r.top_k;
  if (!choices) return;
  by_width<T>(h, {expert_out, dy, d_expert_out}, [&](auto width) {
    launch<combine_backward_kernel<T, decltype(width)::value>>(
        choices, row_threads(h, width), 0, stream(ctx), expert_out, dy, r.expert.data(),
        r.slot.data(), r.weight.data(), r.top_k, capacity, h, d_expert_out, d_weight);
  });
}

// Per source s, the experts' blocks [experts, rows, .] are one strided batch of GEMMs. The first
// layer's bias and GeLU are its epilogue: hidden (the GeLU input, bias included) and act are
// rounded to T once from the fp32 sum.
template <typename T>
void experts_forward(Context& ctx, const T* in, const T* w1, const T* b1, const T* w2, T* hidden,
                     T* act, T* out, int sources, int experts, int rows, int h, int f) {
  if (sources == 0 || experts == 0 || rows == 0) return;
  const std::int64_t in_stride = static_cast<std::int64_t>(rows) * h;
  const std::int64_t mid_stride = static_cast<std::int64_t>(rows) * f;
  const std::int64_t w_stride = static_cast<std::int64_t>(h) * f;
  for (int s = 0; s < sources; ++s) {
    const std::int64_t first = static_cast<std::int64_t>(s) * experts;
    GemmEpilogue<T> e;
    e.kind = Epilogue::gelu_aux_bias;
    e.bias = b1;
    e.bias_stride = f;
    e.aux = hidden + first * mid_stride;
    e.ld_aux = f;
    e.aux_stride = mid_stride;
    gemm_fused<T>(ctx, false, false, rows, f, h, in + first * in_stride, h, in_stride, w1, f,
                  w_stride, act + first * mid_stride, f, mid_stride, experts, e);
  }
  for (int s = 0; s < sources; ++s) {
    const std::int64_t first = static_cast<std::int64_t>(s) * experts;
    gemm_batched<T>(ctx, false, false, rows, h, f, 1.0f, act + first * mid_stride, f, mid_stride,
                    w2, h, w_stride, 0.0f, out + first * in_stride, h, in_stride, experts);
  }
}

// The hidden layer's gradient leaves the second layer's GEMM through the GeLU gradient epilogue,
// rounded to T once (fp32 for fp32 storage); db1, dW1 and dIn all take it from there, so every
// GEMM of a 16-bit step multiplies 16-bit operands on the tensor cores and accumulates in fp32,
// as DeepSpeed and Megatron do. Weight gradients come out fp32, or with 16-bit gradients in T,
// each source's GEMM rounded once into them.
template <typename T>
void experts_backward(Context& ctx, const T* in, const T* w1, const T* w2, const T* hidden,
                      const T* act, const T* d_out, T* d_in, GradOut<T> dw1, GradOut<T> db1,
                      GradOut<T> dw2, GradOut<T> db2, int sources, int experts, int rows, int h,
                      int f) {
  if (sources == 0 || experts == 0 || rows == 0) return;
  const std::int64_t in_stride = static_cast<std::int64_t>(rows) * h;
  const std::int64_t mid_stride = static_cast<std::int64_t>(rows) * f;
  const std::int64_t w_stride = static_cast<std::int64_t>(h) * f;
  const int blocks = sources * experts;
  Tensor<T> d_hidden(ctx.device(), static_cast<std::size_t>(blocks) * mid_stride);
  // A weight gradient's strided batch over the experts: into fp32, or 16-bit (beta = 1).
  auto weight_gemms = [&](int m, int n, const T* a, int lda, std::int64_t stride_a, const T* b,
                          int ldb, std::int64_t stride_b, GradOut<T> c, int ldc) {
    if (c.low)
      gemm_batched<T>(ctx, true, false, m, n, rows, 1.0f, a, lda, stride_a, b, ldb, stride_b, 1.0f,
                      c.low, ldc, w_stride, experts);
    else
      gemm_batched_f32_out<T>(ctx, true, false, m, n, rows, 1.0f, a, lda, stride_a, b, ldb,
                              stride_b, 1.0f, c.master, ldc, w_stride, experts);
  };
  // Second layer: dW2 += act^T dOut (every source adds into the same experts), db2 += sums,
  // dHidden = (dOut W2^T) * gelu'(hidden).
  for (int s = 0; s < sources; ++s) {
    const std::int64_t first = static_cast<std::int64_t>(s) * experts;
    weight_gemms(f, h, act + first * mid_stride, f, mid_stride, d_out + first * in_stride, h,
                 in_stride, dw2, h);
    GemmEpilogue<T> e;
    e.kind = Epilogue::dgelu;
    e.aux = const_cast<T*>(hidden + first * mid_stride);  // read only: dgelu reads its aux
    e.ld_aux = f;
    e.aux_stride = mid_stride;
    gemm_fused<T>(ctx, false, true, rows, f, h, d_out + first * in_stride, h, in_stride, w2, h,
                  w_stride, d_hidden.data() + first * mid_stride, f, mid_stride, experts, e);
  }
  bias_grad_into<T>(ctx, d_out, db2, blocks * rows, h, rows, experts);
  bias_grad_into<T>(ctx, d_hidden.data(), db1, blocks * rows, f, rows, experts);
  // First layer: dW1 += in^T dHidden, dIn = dHidden W1^T.
  for (int s = 0; s < sources; ++s) {
    const std::int64_t first = static_cast<std::int64_t>(s) * experts;
    weight_gemms(h, f, in + first * in_stride, h, in_stride, d_hidden.data() + first * mid_stride,
                 f, mid_stride, dw1, f);
    gemm_batched<T>(ctx, false, true, rows, h, f, 1.0f, d_hidden.data() + first * mid_stride, f,
                    mid_stride, w1, f, w_stride, 0.0f, d_in + first * in_stride, h, in_stride,
                    experts);
  }
}

#define TED_INSTANTIATE_MOE(T)                                                                    \
  template void route_backward<T>(Context&, const routing::Routing<float>&, const float*, float,  \
                                  T*);                                                            \
  template void dispatch<T>(Context&, const T*, const routing::Routing<float>&, T*, int, int);    \
  template void dispatch_backward<T>(Context&, const T*, const routing::Routing<float>&, T*, int, \
                                     int);                                                        \
  template void combine<T>(Context&, const T*, const routing::Routing<float>&, T*, int, int);     \
  template void combine_backward<T>(Context&, const T*, const T*, const routing::Routing<float>&, \
                                    T*, float*, int, int);                                        \
  template void experts_forward<T>(Context&, const T*, const T*, const T*, const T*, T*, T*, T*,  \
                                   int, int, int, int, int);                                      \
  template void experts_backward<T>(Context&, const T*, const T*, const T*, const T*, const T*,   \
                                    const T*, T*, GradOut<T>, GradOut<T>, GradOut<T>, GradOut<T>, \
                                    int, int, int, int, int);
TED_INSTANTIATE_MOE(float)
TED_INSTANTIATE_MOE(Half)
TED_INSTANTIATE_MOE(BFloat16)

}  // namespace ted::kernels::cuda
