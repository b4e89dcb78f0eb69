// A run wired in one place: this rank's device (with the tracking allocator over it), the host
// control communicator, the communicator that carries device buffers, the TED process grid and
// its groups, the ledger on the groups, and (TrainingRun) the trainer. ted_train, the
// experiments' measure() and ted_collbench build their runs here, so the three agree on how a
// run is put together and in which order its collective steps happen.
//
//   ted::RunSpec spec;                      // cpu, mpi, MPI_COMM_WORLD, tracked
//   ted::RunWiring wiring(spec, layout);     // ted_collbench: no trainer
//   ted::TrainingRun run(config, layout);    // the config's run.backend and run.comm
//   auto record = run.trainer().step(0);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ted/backend/memory.hpp"
#include "ted/backend/registry.hpp"
#include "ted/comm/ledger.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/grid/ted_groups.hpp"
#include "ted/train/train_config.hpp"
#include "ted/train/trainer.hpp"

namespace ted {

// The groups whose traffic the ledger records (the world is the collective bench's business).
inline constexpr GroupKind kLedgerGroups[] = {GroupKind::tensor, GroupKind::expert,
                                              GroupKind::expert_data, GroupKind::nonexpert_data};

// What a run is wired from, besides its layout.
struct RunSpec {
  DeviceKind device = DeviceKind::cpu;
  CommBackend comm = CommBackend::mpi;
  // The host ranks of the run, in the grid's order; it must outlive the wiring. Null: a
  // duplicate of MPI_COMM_WORLD, owned by the wiring.
  MpiCommunicator* control = nullptr;
  // When set: before anything is allocated, identically on every rank, does this many bytes per
  // rank fit the device (projection/fit.hpp agree_memory_fit)? If not, a ConfigError whose text
  // is refuse(the fit's text).
  std::optional<std::uint64_t> need;
  std::function<std::string(const std::string&)> refuse;
  bool track = true;  // the tracking allocator over the device (peak bytes per category)
};

// Device, communicators, grid, groups and ledger of one rank. Collective over spec.control (or
// the world): every rank of it builds one, in the same order. Not movable: the groups and the
// ledger point into it.
class RunWiring {
 public:
  RunWiring(const RunSpec& spec, const Layout& layout);
  RunWiring(const RunWiring&) = delete;
  RunWiring& operator=(const RunWiring&) = delete;

  Device& device() { return tracked_ ? *tracked_ : *base_; }  // what the run allocates on
  Device& base_device() { return *base_; }                    // its name is the CSVs' device
  TrackingDevice& tracked();                                  // ted::Error without track
  MpiCommunicator& control() { return *control_; }
  Communicator& world() { return *world_; }  // carries device buffers: mpi, mpi-staged, nccl
  const ProcessGrid& grid() const { return grid_; }
  TedGroups& groups() { return *groups_; }
  Ledger& ledger() { return ledger_; }
  int ranks() const { return grid_.world_size(); }

 private:
  std::unique_ptr<MpiCommunicator> owned_control_;
  MpiCommunicator* control_;
  std::unique_ptr<Device> base_;
  std::unique_ptr<TrackingDevice> tracked_;
  std::unique_ptr<Communicator> world_;
  ProcessGrid grid_;
  std::unique_ptr<TedGroups> groups_;
  Ledger ledger_;
};

// A training run: the wiring for config.run's backend and communicator, and the trainer on it
// (the reference path, with no communicators at all, on one rank).
class TrainingRun : public RunWiring {
 public:
  // `spec`'s device and comm are replaced by config.run's.
  TrainingRun(const train::TrainConfig& config, const Layout& layout, RunSpec spec = {});
  train::Trainer& trainer() { return *trainer_; }

 private:
  std::unique_ptr<train::Trainer> trainer_;
};

}  // namespace ted
