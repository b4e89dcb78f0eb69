// ted_weak_scaling: the base model grows with the rank count, experts fixed (docs/algorithm.md
// section 6); each point runs every system (TED and DeepSpeed-MoE, i.e. T = 1) with the same
// per-rank batch.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_weak_scaling -c experiments/weak_scaling/cpu.yaml
#include "ted/experiments/harness.hpp"

int main(int argc, char** argv) {
  return ted::experiments::experiment_main(
      argc, argv, "weak_scaling",
      "Weak scaling: the base model grows with the ranks; TED vs DeepSpeed-MoE at each point",
      ted::experiments::sweep_plan);
}
