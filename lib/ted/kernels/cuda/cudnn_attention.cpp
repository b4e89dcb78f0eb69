// cuDNN's fused attention through cudnn-frontend's graph API (cudnn_attention.hpp). The frontend
// loads cuDNN itself (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): nothing links against libcudnn, so
// a build with cuDNN runs anywhere, and the version found at run time is the one used (the
// frontend takes the lower of it and the headers' when it picks features).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "ted/kernels/cuda/cudnn_attention.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include <cudnn_frontend.h>

#include "ted/core/error.hpp"
#include "ted/device/cuda_check.hpp"
#include "ted/device/cuda_device.hpp"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's entry to the library it loads symbols from
}  // namespace cudnn_frontend

namespace ted::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;

// The library, loaded once per process: empty when it loads, else why it did not.
const std::string& load_problem() {
  static const std::string problem = []() -> std::string {
    if (const char* off = std::getenv("TED_CUDNN"); off && std::string(off) == "0")
      return "turned off by TED_CUDNN=0";
    // The frontend resolves a few CUDA runtime calls itself: the runtime this program runs on,
    // not another major version that happens to be on the library path.
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess && runtime > 0)
      setenv("CUDNN_FRONTEND_CUDART_LIB_NAME",
             ("libcudart.so." + std::to_string(runtime / 1000)).c_str(), 0);
    fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!fe::cudnn_dlhandle) {
      const char* why = dlerror();
      return std::string("libcudnn.so.9 not found at run time (") + (why ? why : "dlopen failed") +
             ")";
    }
    try {
      if (fe::detail::get_backend_version() < 90000) return "cuDNN older than 9.0 found";
    } catch (const std::exception& e) {
      return std::string("cuDNN did not answer: ") + e.what();
    }
    return "";
  }();
  return problem;
}

std::string version_text(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

fe::DataType_t fe_type(DataType dtype) {
  return dtype == DataType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// Tensor uids of the variant packs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Shape {
  DataType dtype;
  int batch, seq, heads, h;
  bool backward;
  bool operator<(const Shape& o) const {
    return std::tie(dtype, batch, seq, heads, h, backward) <
           std::tie(o.dtype, o.batch, o.seq, o.heads, o.h, o.backward);
  }
};

// q, k or v of qkv [b*s, 3h] as cuDNN's [b, heads, s, d] (strides in elements).
std::shared_ptr<fe::graph::Tensor_attributes> qkv_part(fe::graph::Graph& g, const Shape& s,
                                                       const char* name, std::int64_t uid) {
  const std::int64_t d = s.h / s.heads, row = 3 * static_cast<std::int64_t>(s.h);
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({s.batch, s.heads, s.seq, d})
                      .set_stride({s.seq * row, d, row, 1}));
}

// out or its gradient [b*s, h] as [b, heads, s, d].
std::vector<std::int64_t> out_stride(const Shape& s) {
  const std::int64_t d = s.h / s.heads;
  return {static_cast<std::int64_t>(s.seq) * s.h, d, s.h, 1};
}

std::string message(fe::error_t status) {
  return status.get_message();
}

}  // namespace

struct CudnnAttention::Impl {
  Device& device;
  cudnnHandle_t handle = nullptr;
  std::string handle_problem;  // why the handle could not be made
  std::map<Shape, std::shared_ptr<fe::graph::Graph>> graphs;
  std::map<std::tuple<DataType, int, int, int>, std::string> verdicts;  // (dtype, seq, heads, h)

  explicit Impl(Device& d) : device(d) {}
  ~Impl() {
    graphs.clear();
    if (handle) fe::detail::destroy_handle(handle);
  }

  // The handle on the device's stream, made on first use.
  std::string ensure_handle() {
    if (handle || !handle_problem.empty()) return handle_problem;
    if (!load_problem().empty()) return handle_problem = load_problem();
    try {
      // cuDNN takes memory of its own with cudaMalloc, which cannot use what the pool keeps.
      ted::cuda::release_cached_memory(device);
      if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
        handle = nullptr;
        return handle_problem = "cudnnCreate failed";
      }
      fe::detail::set_stream(handle, ted::cuda::stream_of(device));
    } catch (const std::exception& e) {
      handle = nullptr;
      handle_problem = std::string("cuDNN could not start: ") + e.what();
    }
    return handle_problem;
  }

  // Builds the graph of a shape: the operation graph, cuDNN's heuristic's plans, the first
  // one that builds. Returns why not, or "".
  std::string build(const Shape& s, std::shared_ptr<fe::graph::Graph>& out) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe_type(s.dtype))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.h / s.heads));
    auto q = qkv_part(*g, s, "Q", kQ), k = qkv_part(*g, s, "K", kK), v = qkv_part(*g, s, "V", kV);
    const std::int64_t d = s.h / s.heads;
    const std::vector<std::int64_t> dims{s.batch, s.heads, s.seq, d};
    const std::vector<std::int64_t> stats_dims{s.batch, s.heads, s.seq, 1};
    const std::vector<std::int64_t> stats_stride{static_cast<std::int64_t>(s.heads) * s.seq, s.seq,
                                                 1, 1};
    if (!s.backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("causal_attention")
                         .set_generate_stats(true)
                         .set_attn_scale(scale)
                         .set_causal_mask(true);
      auto [o, stats] = g->sdpa(q, k, v, options);
      o->set_output(true).set_uid(kO).set_dim(dims).set_stride(out_stride(s));
      stats->set_output(true)
          .set_uid(kStats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(stats_dims)
          .set_stride(stats_stride);
    } else {
      auto o = g->tensor(
          fe::graph::Tensor_attributes().set_name("O").set_uid(kO).set_dim(dims).set_stride(
              out_stride(s)));
      auto d_o = g->tensor(
          fe::graph::Tensor_attributes().set_name("dO").set_uid(kDO).set_dim(dims).set_stride(
              out_stride(s)));
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("Stats")
                                 .set_uid(kStats)
                                 .set_dim(stats_dims)
                                 .set_stride(stats_stride)
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("causal_attention_backward")
                         .set_attn_scale(scale)
                         .set_causal_mask(true);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
      const std::int64_t row = 3 * static_cast<std::int64_t>(s.h);
      const std::vector<std::int64_t> stride{s.seq * row, d, row, 1};
      dq->set_output(true).set_uid(kDQ).set_dim(dims).set_stride(stride);
      dk->set_output(true).set_uid(kDK).set_dim(dims).set_stride(stride);
      dv->set_output(true).set_uid(kDV).set_dim(dims).set_stride(stride);
    }
    try {
      if (auto st = g->validate(); st.is_bad()) return "graph: " + message(st);
      if (auto st = g->build_operation_graph(handle); st.is_bad()) return "graph: " + message(st);
      if (auto st = g->create_execution_plans({fe::HeurMode_t::A}); st.is_bad())
        return "plans: " + message(st);
      if (auto st = g->check_support(handle); st.is_bad()) return "support: " + message(st);
      if (auto st = g->build_plans(handle); st.is_bad()) return "build: " + message(st);
    } catch (const std::exception& e) {
      return std::string("cuDNN: ") + e.what();
    }
    out = std::move(g);
    return "";
  }

  fe::graph::Graph& graph(const Shape& s) {
    auto& slot = graphs[s];
    if (!slot) {
      const std::string why = build(s, slot);
      if (!why.empty())
        throw Error("cuDNN attention (batch " + std::to_string(s.batch) + ", seq " +
                    std::to_string(s.seq) + ", heads " + std::to_string(s.heads) + ", h " +
                    std::to_string(s.h) + (s.backward ? ", backward" : ", forward") + "): " + why);
    }
    return *slot;
  }

  void run(const Shape& s, std::unordered_map<std::int64_t, void*>& pack) {
    fe::graph::Graph& g = graph(s);
    std::int64_t bytes = 0;
    if (auto st = g.get_workspace_size(bytes); st.is_bad())
      throw Error("cuDNN attention: workspace size: " + message(st));
    DeviceBuffer workspace;
    if (bytes > 0) workspace = DeviceBuffer(device, static_cast<std::size_t>(bytes));
    if (auto st = g.execute(handle, pack, workspace.data()); st.is_bad())
      throw Error("cuDNN attention: " + message(st));
  }
};

CudnnAttention::CudnnAttention(Device& device) : impl_(std::make_unique<Impl>(device)) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::unsupported(DataType dtype, int seq, int heads, int h) {
  if (dtype != DataType::bf16 && dtype != DataType::f16)
    return "cuDNN's fused attention takes bf16 or fp16, not " + std::string(to_string(dtype));
  if (heads <= 0 || h % heads != 0) return "the hidden size does not split into the heads";
  const int d = h / heads;
  if (d % 8 != 0 || d > 128)
    return "head width " + std::to_string(d) + " (cuDNN's takes multiples of 8 up to 128)";
  if (const std::string why = impl_->ensure_handle(); !why.empty()) return why;
  auto [it, fresh] = impl_->verdicts.try_emplace({dtype, seq, heads, h});
  if (fresh) {  // both directions must build for one sequence; other batch sizes follow
    for (bool backward : {false, true}) {
      std::shared_ptr<fe::graph::Graph> g;
      const Shape shape{dtype, 1, seq, heads, h, backward};
      it->second = impl_->build(shape, g);
      if (!it->second.empty()) break;
      impl_->graphs[shape] = std::move(g);
    }
  }
  return it->second;
}

namespace {

void* at(const void* base, std::size_t elements) {
  return const_cast<char*>(static_cast<const char*>(base)) + 2 * elements;
}

void check_aligned(const void* p, const char* what) {
  TED_CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0,
            std::string("cuDNN attention: ") + what + " is not 16-byte aligned");
}

}  // namespace

void CudnnAttention::forward(DataType dtype, const void* qkv, void* out, float* lse, int batch,
                             int seq, int heads, int h) {
  if (batch == 0) return;
  check_aligned(qkv, "qkv");
  check_aligned(out, "the output");
  std::unordered_map<std::int64_t, void*> pack{{kQ, at(qkv, 0)},
                                               {kK, at(qkv, h)},
                                               {kV, at(qkv, 2 * static_cast<std::size_t>(h))},
                                               {kO, out},
                                               {kStats, lse}};
  impl_->run({dtype, batch, seq, heads, h, false}, pack);
}

void CudnnAttention::backward(DataType dtype, const void* qkv, const void* out, const float* lse,
                              const void* d_out, void* d_qkv, int batch, int seq, int heads,
                              int h) {
  if (batch == 0) return;
  check_aligned(d_qkv, "the qkv gradient");
  check_aligned(d_out, "the output gradient");
  const std::size_t two = 2 * static_cast<std::size_t>(h);
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, at(qkv, 0)},    {kK, at(qkv, h)},    {kV, at(qkv, two)},
      {kO, at(out, 0)},    {kDO, at(d_out, 0)}, {kStats, const_cast<float*>(lse)},
      {kDQ, at(d_qkv, 0)}, {kDK, at(d_qkv, h)}, {kDV, at(d_qkv, two)}};
  impl_->run({dtype, batch, seq, heads, h, true}, pack);
}

std::string CudnnAttention::describe() {
  const std::string frontend = std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
                               std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
                               std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
  if (!load_problem().empty()) return "cuDNN not used: " + load_problem();
  return "cuDNN " + version_text(fe::detail::get_backend_version()) + " (frontend " + frontend +
         ")";
}

}  // namespace ted::kernels::cuda
