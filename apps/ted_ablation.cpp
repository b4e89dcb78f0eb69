// ted_ablation: the paper's ablation (docs/algorithm.md section 6) — TED-baseline, +DTD, +CAC,
// +both, and our reduce-scatter variant, on one model and one layout. Per system: time per
// iteration split into compute and communication, and the ledger's bytes per collective kind.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_ablation -c experiments/ablation/cpu.yaml
#include "ted/experiments/harness.hpp"

int main(int argc, char** argv) {
  return ted::experiments::experiment_main(
      argc, argv, "ablation",
      "TED ablation: measures time per iteration (compute and communication) and the bytes "
      "and calls of each collective kind for TED-baseline, +DTD, +CAC, +both and +reduce-scatter "
      "on one model and layout; one CSV row per system");
}
