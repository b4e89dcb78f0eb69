#include "ted/model/params.hpp"

#include "ted/core/error.hpp"
#include "ted/model/random.hpp"

namespace ted::model {

std::size_t ParamSpec::size() const {
  std::size_t n = 1;
  for (int d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::uint64_t name_key(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

template <typename T>
int ParamSet<T>::add(ParamSpec spec) {
  TED_CHECK(values_.empty(), "ParamSet::add after allocate");
  spec.offset = total_;
  total_ += spec.size();
  specs_.push_back(std::move(spec));
  return static_cast<int>(specs_.size()) - 1;
}

template <typename T>
void ParamSet<T>::allocate(Device& device, std::uint64_t seed, double init_std) {
  device_ = &device;
  values_ = Tensor<T>(device, total_);
  grads_ = zeros<T>(device, total_);
  for (const auto& spec : specs_) {
    T* v = values_.data() + spec.offset;
    std::uint64_t key = name_key(spec.name);
    for (std::size_t i = 0; i < spec.size(); ++i) {
      switch (spec.init) {
        case ParamInit::normal:
          v[i] = static_cast<T>(init_std * random::normal(seed, random::kInit, key, i));
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
