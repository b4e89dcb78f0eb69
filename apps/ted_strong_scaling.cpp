// ted_strong_scaling: one fixed MoE model and one fixed global batch over growing rank counts
// (TED.md section 6). data.micro_batches is the number of micro-batches of the whole step; each
// point gives every data-parallel rank its share.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_strong_scaling -c
//   experiments/strong_scaling/cpu.yaml
#include "ted/core/error.hpp"
#include "ted/experiments/harness.hpp"

using namespace ted::experiments;

int main(int argc, char** argv) {
  return experiment_main(
      argc, argv, "strong_scaling", "Strong scaling: one fixed MoE model over growing rank counts",
      [](const ExperimentConfig& config, const std::string& where, int world_size) {
        if (!config.sweep_hidden.empty() || !config.sweep_heads.empty() ||
            !config.sweep_layers.empty())
          throw ted::ConfigError(where +
                                 ": keys 'sweep.hidden/heads/layers' change the model, "
                                 "which strong scaling keeps fixed");
        Plan plan = sweep_plan(config, where, world_size);
        for (auto& point : plan.points) {
          const int data_parallel = point.layout.expert * point.layout.data;
          int& micro = point.train.data.micro_batches;
          if (micro % data_parallel != 0)
            throw ted::ConfigError(where + ": key 'data.micro_batches' (" + std::to_string(micro) +
                                   ", the whole step's) must divide over the " +
                                   std::to_string(data_parallel) + " data-parallel ranks of " +
                                   point.system.name + " at " + point.layout.to_string());
          micro /= data_parallel;
        }
        return plan;
      });
}
