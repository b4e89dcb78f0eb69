// Prints what our C++ routes under a forced workload, for tests/apps/check_deepspeed.py,
// which holds the DeepSpeed baseline's port (baselines/deepspeed/ted_workload.py) and its runs
// to it:
//   print_workload choices <workload> <experts> <top_k> <seed> <step> <layer> <first token>
//       <tokens> [<hot_experts> <hot_share> <zipf_s> <zero_experts>]
//     routing::assign_experts's experts, one token a line ("e0 e1").
//   print_workload loads <config.yaml> <data ranks> [key=value ...]
//     "step,layer,expert,load": each MoE layer's per-expert load of every step of training.steps,
//     from the trainer's own StepRecord::expert_load, on the single-process reference of a run
//     over <data ranks> data-parallel ranks (data.micro_batches times as many micro-batches: the
//     same global tokens every step, numbered as the trainer numbers them); layer is the block's
//     index, the key the gate draws with. A last line "dropped,<choices dropped in all steps>".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ted/core/error.hpp"
#include "ted/device/device.hpp"
#include "ted/routing/workload.hpp"
#include "ted/train/train_config.hpp"
#include "ted/train/trainer.hpp"

namespace {

ted::routing::WorkloadKind kind_named(const std::string& name) {
  for (int i = 0; i < ted::routing::kWorkloadKindCount; ++i) {
    const auto kind = static_cast<ted::routing::WorkloadKind>(i);
    if (ted::routing::to_string(kind) == name) return kind;
  }
  throw ted::ConfigError("no workload '" + name + "': " + ted::routing::workload_names());
}

int choices(int argc, char** argv) {
  if (argc != 10 && argc != 14) {
    std::fprintf(stderr, "print_workload choices: 8 or 12 arguments (see the header)\n");
    return 2;
  }
  ted::routing::Workload w;
  w.kind = kind_named(argv[2]);
  const int experts = std::atoi(argv[3]), top_k = std::atoi(argv[4]);
  const auto seed = std::strtoull(argv[5], nullptr, 10);
  const auto step = std::atoll(argv[6]);
  const int layer = std::atoi(argv[7]);
  const auto first = std::atoll(argv[8]);
  const int tokens = std::atoi(argv[9]);
  if (argc == 14) {
    w.hot_experts = std::atoi(argv[10]);
    w.hot_share = std::strtod(argv[11], nullptr);
    w.zipf_s = std::strtod(argv[12], nullptr);
    w.zero_experts = std::atoi(argv[13]);
  }
  ted::routing::validate(w, experts, top_k);
  std::vector<std::int32_t> out(static_cast<std::size_t>(tokens) * top_k);
  ted::routing::assign_experts(w, experts, top_k, seed, step, layer, first, tokens, out.data());
  for (int s = 0; s < tokens; ++s)
    for (int j = 0; j < top_k; ++j)
      std::printf("%d%c", out[static_cast<std::size_t>(s) * top_k + j], j + 1 < top_k ? ' ' : '\n');
  return 0;
}

int loads(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "print_workload loads <config.yaml> <data ranks> [key=value ...]\n");
    return 2;
  }
  ted::train::TrainConfig config;
  ted::ConfigSchema schema = config.schema();
  schema.load_yaml(argv[2]);
  for (int i = 4; i < argc; ++i) schema.set(argv[i]);
  config.data.micro_batches *= std::atoi(argv[3]);
  config.parallel = {};  // one process: the reference layout
  config.validate();
  auto device = ted::make_cpu_device();
  ted::train::Trainer trainer(config, *device);
  long long dropped = 0;
  std::printf("step,layer,expert,load\n");
  for (int step = 0; step < config.steps; ++step) {
    const auto record = trainer.step(step);
    dropped += record.dropped;
    int moe = 0;
    for (int layer = 0; layer < config.model.layers; ++layer) {
      if (!config.model.is_moe(layer)) continue;
      const auto& load = record.expert_load[static_cast<std::size_t>(moe++)];
      for (std::size_t e = 0; e < load.size(); ++e)
        std::printf("%d,%d,%zu,%lld\n", step, layer, e, static_cast<long long>(load[e]));
    }
  }
  std::printf("dropped,%lld\n", dropped);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "choices") return choices(argc, argv);
    if (mode == "loads") return loads(argc, argv);
    std::fprintf(stderr, "usage: print_workload choices|loads ... (see its header)\n");
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "print_workload: %s\n", error.what());
    return 2;
  }
}
