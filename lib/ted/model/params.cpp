#include "ted/model/params.hpp"

#include <algorithm>
#include <type_traits>

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/model/config.hpp"

namespace ted::model {

std::vector<int> ParamSpec::local_shape() const {
  std::vector<int> local = shape;
  for (std::size_t d = 0; d < slice.size() && d < shape.size(); ++d) {
    if (slice[d].empty()) continue;
    local[d] = 0;
    for (auto [start, length] : slice[d]) local[d] += length;
  }
  return local;
}

std::size_t ParamSpec::size() const {
  std::size_t n = 1;
  for (int d : local_shape()) n *= static_cast<std::size_t>(d);
  return n;
}

SliceMap ParamSpec::slice_map() const {
  SliceMap map;
  TED_CHECK(shape.size() <= static_cast<std::size_t>(SliceMap::kMaxDims),
            "parameter " + name + " has more dimensions than a SliceMap holds");
  map.dims = static_cast<int>(shape.size());
  const std::vector<int> local = local_shape();
  for (int d = 0; d < map.dims; ++d) {
    map.shape[d] = shape[d];
    map.local[d] = local[d];
    if (static_cast<std::size_t>(d) >= slice.size() || slice[d].empty()) continue;
    TED_CHECK(slice[d].size() <= static_cast<std::size_t>(SliceMap::kMaxSegments),
              "parameter " + name + " is cut into more segments than a SliceMap holds");
    map.sliced = true;
    map.segments[d] = static_cast<int>(slice[d].size());
    for (std::size_t s = 0; s < slice[d].size(); ++s) {
      map.start[d][s] = slice[d][s].first;
      map.length[d][s] = slice[d][s].second;
    }
  }
  return map;
}

std::uint64_t name_key(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

int ParamLayout::add(ParamSpec spec) {
  TED_CHECK(!laid_out_, "ParamLayout::add after lay_out");
  specs_.push_back(std::move(spec));
  return static_cast<int>(specs_.size()) - 1;
}

void ParamLayout::lay_out(std::size_t dense_pad, std::size_t expert_pad) {
  total_ = 0;
  for (ParamKind kind : {ParamKind::dense, ParamKind::expert}) {
    std::size_t start = total_;
    for (auto& spec : specs_)
      if (spec.kind == kind) {
        spec.offset = total_;
        total_ += spec.size();
      }
    std::size_t pad = kind == ParamKind::dense ? dense_pad : expert_pad;
    total_ = start + (total_ - start + pad - 1) / pad * pad;
    (kind == ParamKind::dense ? dense_range_ : expert_range_) = {start, total_ - start};
  }
  laid_out_ = true;
}

template <typename T>
void ParamSet<T>::allocate(Ops<T>& ops, std::uint64_t seed, double init_std, std::size_t dense_pad,
                           std::size_t expert_pad, DataType grad_dtype) {
  Device& device = ops.device();
  device_ = &device;
  storage_gradients_ = model::gradient_type(dtype_of<T>::value, grad_dtype) != dtype_of<M>::value;
  layout_.lay_out(dense_pad, expert_pad);
  {
    MemoryScope scope(device, MemoryCategory::parameters);
    values_ = zeros<T>(device, total());  // padding stays 0
  }
  {
    MemoryScope scope(device, MemoryCategory::gradients);
    if (storage_gradients_)
      low_grads_ = zeros<T>(device, total());
    else
      grads_ = zeros<M>(device, total());
  }
  for (const auto& spec : specs()) {
    T* v = values_.data() + spec.offset;
    switch (spec.init) {
      case ParamInit::normal:  // the padding stays 0
        ops.init_normal(v, std::min(spec.size(), spec.padding_from), seed, name_key(spec.name),
                        init_std, spec.slice_map());
        break;
      case ParamInit::zeros:
        break;
      case ParamInit::ones:
        device.fill(v, spec.size(), dtype_of<T>::value, 1.0);
        break;
    }
  }
}

template <typename T>
void ParamSet<T>::zero_grads() {
  if (total()) device_->fill(gradient_data(), total(), gradient_type(), 0.0);
}

template <typename T>
GradOut<T> ParamSet<T>::gradient(int id) {
  const std::size_t offset = layout_.specs()[id].offset;
  if (!storage_gradients_) return GradOut<T>(grads_.data() + offset);
  return GradOut<T>::storage(low_grads_.data() + offset);
}

template class ParamSet<float>;
template class ParamSet<double>;
template class ParamSet<Half>;
template class ParamSet<BFloat16>;

}  // namespace ted::model
