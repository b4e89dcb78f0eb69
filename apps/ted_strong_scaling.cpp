// ted_strong_scaling: one fixed MoE model and one fixed global batch over growing rank counts
// (docs/algorithm.md section 6). data.micro_batches is the number of micro-batches of the whole
// step; each point gives every data-parallel rank its share.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_strong_scaling -c
//   experiments/strong_scaling/cpu.yaml
#include "ted/experiments/harness.hpp"

int main(int argc, char** argv) {
  return ted::experiments::experiment_main(
      argc, argv, "strong_scaling",
      "Strong scaling: measures time per iteration, tokens/s and GFLOP/s per rank of one "
      "fixed MoE model and global batch over growing rank counts; one CSV row per point and "
      "system");
}
