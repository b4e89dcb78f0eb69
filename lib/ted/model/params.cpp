#include "ted/model/params.hpp"

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/model/random.hpp"

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

std::size_t ParamSpec::global_index(std::size_t i) const {
  if (slice.empty()) return i;
  std::vector<int> local = local_shape();
  std::size_t global = 0;
  std::size_t rest = i;
  std::vector<int> coordinate(local.size());
  for (std::size_t d = local.size(); d-- > 0;) {  // row-major: last dimension fastest
    coordinate[d] = static_cast<int>(rest % static_cast<std::size_t>(local[d]));
    rest /= static_cast<std::size_t>(local[d]);
  }
  for (std::size_t d = 0; d < local.size(); ++d) {
    int c = coordinate[d];
    if (d < slice.size() && !slice[d].empty()) {
      for (auto [start, length] : slice[d]) {
        if (c < length) {
          c += start;
          break;
        }
        c -= length;
      }
    }
    global = global * static_cast<std::size_t>(shape[d]) + static_cast<std::size_t>(c);
  }
  return global;
}

std::uint64_t name_key(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

template <typename T>
int ParamSet<T>::add(ParamSpec spec) {
  TED_CHECK(values_.empty(), "ParamSet::add after allocate");
  specs_.push_back(std::move(spec));
  return static_cast<int>(specs_.size()) - 1;
}

template <typename T>
void ParamSet<T>::allocate(Device& device, std::uint64_t seed, double init_std,
                           std::size_t dense_pad, std::size_t expert_pad) {
  device_ = &device;
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
  {
    MemoryScope scope(device, MemoryCategory::parameters);
    values_ = zeros<T>(device, total_);  // padding stays 0
  }
  MemoryScope scope(device, MemoryCategory::gradients);
  grads_ = zeros<T>(device, total_);
  for (const auto& spec : specs_) {
    T* v = values_.data() + spec.offset;
    std::uint64_t key = name_key(spec.name);
    for (std::size_t i = 0; i < spec.size(); ++i) {
      switch (spec.init) {
        case ParamInit::normal:
          v[i] = static_cast<T>(init_std *
                                random::normal(seed, random::kInit, key, spec.global_index(i)));
          break;
        case ParamInit::zeros:
          v[i] = T(0);
          break;
        case ParamInit::ones:
          v[i] = T(1);
          break;
      }
    }
  }
}

template <typename T>
void ParamSet<T>::zero_grads() {
  if (total_) device_->fill(grads_.data(), total_, dtype_of<T>::value, 0.0);
}

template class ParamSet<float>;
template class ParamSet<double>;

}  // namespace ted::model
