// ted_weak_scaling: the base model grows with the rank count, experts fixed (docs/algorithm.md
// section 6); each point runs every system (TED and DeepSpeed-MoE, i.e. T = 1) with the same
// per-rank batch.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_weak_scaling -c experiments/weak_scaling/cpu.yaml
#include "ted/experiments/harness.hpp"

int main(int argc, char** argv) {
  return ted::experiments::experiment_main(
      argc, argv, "weak_scaling",
      "Weak scaling: measures time per iteration, tokens/s and GFLOP/s per rank as the base "
      "model grows with the ranks (experts fixed), TED against DeepSpeed-MoE (T = 1) at each "
      "point; one CSV row per point and system");
}
