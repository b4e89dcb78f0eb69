#include "ted/run/run.hpp"

#include "ted/core/error.hpp"
#include "ted/projection/fit.hpp"

namespace ted {

namespace {
MpiCommunicator* own_or_world(MpiCommunicator* given, std::unique_ptr<MpiCommunicator>& owned) {
  if (given) return given;
  owned = MpiCommunicator::world(nullptr);
  return owned.get();
}
}  // namespace

// The order is the one every rank follows: device (collective for GPUs), the memory check
// before anything is allocated, the device world, the groups.
RunWiring::RunWiring(const RunSpec& spec, const Layout& layout)
    : control_(own_or_world(spec.control, owned_control_)),
      base_(make_device(spec.device, control_->native_handle())),
      grid_(control_->size(), layout) {
  if (spec.need) {
    const auto fit = projection::agree_memory_fit(*spec.need, base_->name(), base_->free_bytes(),
                                                  control_->native_handle());
    if (!fit.fits) throw ConfigError(spec.refuse ? spec.refuse(fit.text) : fit.text);
  }
  if (spec.track) tracked_ = std::make_unique<TrackingDevice>(*base_);
  world_ = make_device_communicator(spec.comm, device(), control_->native_handle(), nullptr);
  groups_ = std::make_unique<TedGroups>(*control_, *world_, grid_);
  groups_->set_ledger(&ledger_);
}

TrackingDevice& RunWiring::tracked() {
  TED_CHECK(tracked_ != nullptr, "this run has no tracking allocator");
  return *tracked_;
}

namespace {
RunSpec for_config(const train::TrainConfig& config, RunSpec spec) {
  spec.device = config.run.backend;
  spec.comm = config.run.comm;
  return spec;
}
}  // namespace

TrainingRun::TrainingRun(const train::TrainConfig& config, const Layout& layout, RunSpec spec)
    : RunWiring(for_config(config, std::move(spec)), layout),
      trainer_(
          std::make_unique<train::Trainer>(config, device(), ranks() > 1 ? &groups() : nullptr)) {}

}  // namespace ted
