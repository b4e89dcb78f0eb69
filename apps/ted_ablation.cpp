// ted_ablation: the paper's ablation (TED.md section 6) — TED-baseline, +DTD, +CAC, +both, and
// our reduce-scatter variant, on one model and one layout. Per system: time per iteration split
// into compute and communication, and the ledger's bytes per collective kind.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_ablation -c experiments/ablation/cpu.yaml
#include "ted/core/error.hpp"
#include "ted/experiments/harness.hpp"

using namespace ted::experiments;

int main(int argc, char** argv) {
  return experiment_main(
      argc, argv, "ablation", "TED ablation: baseline, +DTD, +CAC, +both on one model and layout",
      [](const ExperimentConfig& config, const std::string& where, int world_size) {
        Plan plan;
        ted::Layout layout;
        if (!fixed_layout(config, where, world_size, &layout, &plan.skipped)) return plan;
        for (const auto& name : config.systems)
          plan.points.push_back(
              make_point(config, parse_system(name, where), layout, config.train));
        return plan;
      });
}
