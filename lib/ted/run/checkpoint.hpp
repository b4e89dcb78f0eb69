// Checkpoints of a training run on disk, written so that a kill at any moment leaves the last
// complete one usable (ted_train's training.save_dir, save_every, save_keep, resume, load).
//
// <save_dir>/step_00000120/ holds what a run needs to continue after its step 120:
//   rank_00003.state   each rank's state (train/state.hpp: weights, Adam's m and v of its ZeRO-1
//                      shard, fp32 masters, the optimizer's step count, the loss scaler), named
//                      blobs and a checksum of the whole file
//   manifest.txt       written last, by rank 0: the steps done, the ranks and layout, the git
//                      revision, and the resolved config (key=value), which a resume compares
//   train.csv          the CSV rows of the steps done, so the resumed run's CSV has every step
// Every rank writes into step_00000120.tmp/, the ranks meet, and rank 0 renames the folder once
// the manifest is in: a folder without .tmp and with a manifest is complete. The last save_keep
// complete ones are kept. The data position is the step (every draw of data, dropout and routing
// is keyed by it), so nothing else is saved.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ted/comm/communicator.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/train/state.hpp"

namespace ted {

// What a checkpoint says about the run that wrote it.
struct CheckpointManifest {
  int steps_done = 0;  // the optimizer steps behind it: a resumed run starts at this 0-based step
  int ranks = 1;
  Layout layout;
  std::string revision;
  std::vector<std::string> config;  // key=value, ConfigSchema::dump() of the resolved config
};

// One rank's state in a file: magic, version, the blobs (name, size, bytes), an FNV-1a checksum
// of everything before it. read_state_file throws ConfigError (one line naming the file) when
// the file is missing, cut short or corrupt.
void write_state_file(const std::filesystem::path& path, const train::TrainState& state);
train::TrainState read_state_file(const std::filesystem::path& path);

// The newest complete checkpoint folder in `save_dir`, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& save_dir);

// The manifest of a checkpoint folder; ConfigError when it has none or it cannot be read.
CheckpointManifest read_manifest(const std::filesystem::path& folder);

// ConfigError, one line naming the checkpoint, when a run of `ranks` ranks laid out as `layout`
// with the resolved `config` (key=value) may not continue from `saved`: another number of ranks
// or layout, or a key that shapes the state or the trajectory differs (model, gating, routing,
// optimizer, data, the seed, the steps, run.dtype, training.grad_dtype, parallel.zero1 and
// split_experts). The keys that only say how the same run is carried out (the TED switches, the
// tile, the backend and communicator, output and checkpoint keys) may differ.
void check_resumable(const std::filesystem::path& folder, const CheckpointManifest& saved,
                     int ranks, const Layout& layout, const std::vector<std::string>& config);

// Collective over `control` (every rank calls it, in the same order): writes this rank's state
// and, on rank 0, the manifest and `csv_text` into <save_dir>/step_<steps_done>, then removes
// all but the newest `keep` complete checkpoints. Returns the folder.
std::filesystem::path save_checkpoint(Communicator& control, const std::filesystem::path& save_dir,
                                      int keep, const CheckpointManifest& manifest,
                                      const train::TrainState& state, const std::string& csv_text);

// Runs `work` on every rank of `control`; when it throws on some rank, every rank throws a
// ConfigError with the first failing rank's message (so a corrupt state file of one rank ends
// every rank with that one line, none left waiting in a collective).
void agree_on_failure(Communicator& control, const std::function<void()>& work);

// This rank's state from a checkpoint folder (rank_<rank>.state).
train::TrainState load_rank_state(const std::filesystem::path& folder, int rank);

}  // namespace ted
