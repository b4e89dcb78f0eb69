// The one harness behind every experiment executable: its YAML config, the
// systems it compares, measuring one configuration (warm-up, timed iterations, median/p10/p90,
// ledger bytes, allocator peaks, final loss), the progress line, and the CSV row.
//
// YAML (every section optional except what an experiment needs):
//   experiment: ablation | weak_scaling | strong_scaling | memory   (must match the program)
//   model, gating, optimizer, data: as the training driver (lib/ted/train/train_config.hpp)
//   run:     warmup iters csv, and as the training driver: backend (cpu | cuda),
//            dtype (fp32 | bf16 | fp16), comm (mpi | nccl), loss_scale, loss_scale_window
//   layout:  tp ep dp                    the layout of ablation and memory
//   systems: [ted-baseline, ted+dtd, ...] (see parse_system)
//   data:    global_batch  sequences per optimizer step of the whole job (0: data.micro_batches
//            per data-parallel rank); each point's micro-batches = global_batch / (micro_batch
//            x Ep x D), which must divide
//   sweep:   ranks tp ep hidden heads layers experts global_batch tile   (lists, one entry per
//            point; tile: parallel.tile_elems, 0 = untiled)
//   family:  hidden heads layers                 (lists) the memory experiment's base models
//   memory:  budget_bytes
//   largest: gpus max_tp max_experts   the memory experiment's largest trainable model: for each
//            GPU count and system, the family model x power-of-two experts (Ep = experts) x
//            tensor degree with the most parameters whose projected peak fits budget_bytes
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ted/backend/memory.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/stats.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/train/train_config.hpp"

namespace ted::experiments {

struct ExperimentConfig {
  std::string experiment;
  train::TrainConfig train;  // model, gating, optimizer, data, run (train.steps is unused)
  int warmup = 1;
  int iters = 5;
  std::string backend;  // the rows' backend column: run.backend, plus what runs it (emulated)
  std::string csv;
  int tp = 1, ep = 1, dp = 0;
  std::vector<std::string> systems;
  std::vector<int> sweep_ranks, sweep_tp, sweep_ep, sweep_hidden, sweep_heads, sweep_layers;
  std::vector<int> sweep_experts, sweep_global_batch, sweep_tile;
  std::vector<int> family_hidden, family_heads, family_layers;  // memory: growing base models
  std::int64_t budget_bytes = 0;
  int global_batch = 0;  // data.global_batch
  std::vector<int> largest_gpus;
  int largest_max_tp = 8, largest_max_experts = 128;

  ConfigSchema schema();
};

// Loads the YAML and the --set overrides, and checks everything every experiment needs: the
// experiment name, run.backend/dtype/comm, the systems' names, and that the sweep lists have
// one entry per point. Errors name the file and the key (ConfigError). Whether this machine can
// run the backend is checked by the program (backend/registry.hpp), not here, so a CUDA
// config loads anywhere (the projection runs nothing). `experiment` empty: any.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::string& experiment);

// A system of the paper (docs/algorithm.md section 3): which layout family and which switches.
//   deepspeed-moe   T = 1 (expert + data parallelism only)
//   ted-baseline    TED without the optimisations
//   ted             TED with DTD and CAC
//   ted+dtd, ted+cac, ted+dtd+cac, ted+dtd+cac+rs   the ablation's steps (rs: reduce-scatter)
struct System {
  std::string name;
  bool tensor_parallel = true;  // false: T forced to 1
  bool dtd = false, cac = false, reduce_scatter = false;
  // The MoE exchange in chunks (parallel.overlap): 1 off; 0 asks for parallel.overlap's value
  // (at least 2).
  int overlap = 1;
};
System parse_system(const std::string& name, const std::string& where);

// One configuration to measure.
struct Point {
  System system;
  Layout layout;
  train::TrainConfig train;  // with parallel.* and model.checkpoint set for the system
  std::string model_name;    // e.g. "h64-L4-E8"
  std::int64_t budget = -1;  // memory experiment: the per-rank budget this point is judged by
};
// global_batch > 0: the point's data.micro_batches from the whole step's sequences (a
// ConfigError naming `where` when they do not divide over its data-parallel ranks).
Point make_point(const ExperimentConfig& config, const System& system, Layout layout,
                 const train::TrainConfig& train, int global_batch = 0,
                 const std::string& where = "");

// The time split of a measured row, all from one iteration and one rank so that the parts add
// up: the median iteration (by step time; the lower middle one of an even count), and in it the
// rank that spent the most time in collectives (split_time). Then
//   time_ms.median = compute_ms + comm_ms = all_reduce + all_to_all + all_gather +
//                    reduce_scatter + other_ms,
// and other_ms - compute_ms is the time in collectives of no reported kind (broadcast, barrier).
// On a CPU whose ranks outnumber its cores (ranks_per_core > 1) a rank's wait for a peer the OS
// has not scheduled is time in a collective: comm_ms then holds that wait, not only transfers.
struct Result {
  Summary time_ms;
  double comm_ms = 0;     // the collective time of the rank above, at most the median time
  double compute_ms = 0;  // median time minus comm, never negative
  // The collective time by kind of the same rank and iteration: all_reduce, all_to_all
  // (all_to_all_v included), all_gather, reduce_scatter; other_ms is the rest of the median time.
  double op_ms[4] = {};
  double other_ms = 0;
  double ranks_per_core = 0;  // CPU runs: the most ranks of a node per CPU they may use; 0: n/a
  double pct_of_peak = -1;    // model FLOPs over the peak of all devices; < 0: no stated peak
  double tokens_per_s = 0;
  double tflops_per_rank = 0;
  double final_loss = 0;
  std::uint64_t parameters = 0;      // of the whole model
  std::uint64_t bytes_sent[4] = {};  // per rank per iteration: all_reduce, all_gather,
                                     // reduce_scatter, all_to_all (rank 0, from the ledger)
  std::uint64_t all_to_all_calls = 0;
  std::size_t peak[kMemoryCategoryCount] = {};  // max over ranks
  std::size_t peak_total = 0;
  std::string device;  // what ran it: "cpu", "cuda:0 NVIDIA H100 ..." (rank 0's)
  int threads = 0;     // rank 0's kernel thread pool (follows its CPU mask); 0: nothing ran
  std::string comm;    // what carried the device buffers: mpi, mpi-staged, nccl
  // "measured", "projected", "projected: does not fit: ..." (the projection still gives the
  // time), or "not run: does not fit: ..." (a measured sweep never allocates such a point)
  std::string status = "measured";
  bool ran() const { return status.rfind("not run", 0) != 0; }  // measured or projected
};

// The time columns of a point from its iterations (ms): the step time (the slowest rank's),
// and the collective time with its split by kind of the rank with the most collective time.
// Takes comm and the kinds from the median iteration (see Result), clamped to the median time.
void split_time(const std::vector<double>& times, const std::vector<double>& comms,
                const std::vector<double> (&op_times)[4], Result* r);

// This process's run id, the same in every row it writes: UTC start time and process id,
// "20250101T120000Z-4242". The rows of one run share it; validate and the figures pick runs by it.
const std::string& run_id();

// Runs `point` on world ranks 0 .. G-1 (the others wait) for warmup + iters steps, on the
// backend, dtype and communicator of point.train.run; iters = 0 is the correctness-only mode:
// one untimed step. Collective over `world`, a host MPI communicator.
Result measure(const Point& point, Communicator& world, int warmup, int iters);

// The CSV of every experiment, and one row of it.
CsvTable result_table();
void add_result(CsvTable& table, const ExperimentConfig& config, const Point& point,
                const Result& result, const std::string& command);
// Appends the rows to `path` (core/csv.hpp append_csv: locked, whole rows; an existing file
// with another header is an error rather than a mixed file).
void append_rows(const CsvTable& table, const std::string& path);

// Rank 0's progress line for point i of n.
void print_progress(int index, int count, const Point& point, const Result& result);

// What an experiment program plugs in: the points to measure for the ranks at hand (and a line
// for each point that needs more ranks than launched), and what to say at the end.
struct Plan {
  std::vector<Point> points;
  std::vector<std::string> skipped;
};
using Planner =
    std::function<Plan(const ExperimentConfig& config, const std::string& where, int world_size)>;
using Summary = std::function<void(const std::vector<Point>&, const std::vector<Result>&)>;

// main() of an experiment program: options (-c config, --set, --iters, --csv, --backend,
// --dtype, --comm, --check, --ranks, --point), the config, the plan (--point K: only its K-th
// point; a plan with no point, or whose largest point leaves launched ranks idle, is bad
// input), the memory check of every point
// before the first is measured (a point whose projected peak does not fit its device is never
// run: its row says so, and the sweep goes on), every point measured with its row appended
// to the CSV at once (default results/<experiment>/<config name>.csv) and a progress line on
// rank 0, and the summary. --check validates all of it without running (and without MPI),
// ending with check_needs' line. Exit codes as run_app.
int experiment_main(int argc, char** argv, const std::string& experiment,
                    const std::string& description, const Planner& planner,
                    const Summary& summary = {});

// The layout of layout.tp/ep/dp (dp 0: all launched ranks). Returns false, with a line in
// `skipped`, when it needs more ranks than launched; a layout that does not fit is a
// ConfigError naming the keys.
bool fixed_layout(const ExperimentConfig& config, const std::string& where, int world_size,
                  Layout* layout, std::vector<std::string>* skipped);

// The sweep points of weak and strong scaling and of the memory experiment's layouts: one
// layout per entry of sweep.ranks / sweep.tp / sweep.ep, the model changed by sweep.hidden /
// heads / layers where given, every system at every point. Points needing more ranks than
// launched are skipped with a line.
Plan sweep_plan(const ExperimentConfig& config, const std::string& where, int world_size);

// The other experiments' plans: the ablation (every system on layout.*), strong scaling (the
// sweep with the whole step's data.micro_batches shared by the data-parallel ranks), memory
// (the sweep's layouts plus the family within memory.budget_bytes on layout.*).
Plan ablation_plan(const ExperimentConfig& config, const std::string& where, int world_size);
Plan strong_scaling_plan(const ExperimentConfig& config, const std::string& where, int world_size);
Plan memory_plan(const ExperimentConfig& config, const std::string& where, int world_size);
Planner plan_for(const std::string& experiment);

}  // namespace ted::experiments
