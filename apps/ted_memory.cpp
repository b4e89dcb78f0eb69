// ted_memory: memory per rank, measured by the tracking allocator (docs/algorithm.md section 6).
//  1. for each layout of the sweep (sweep.ranks/tp/ep), the base model's peak bytes per rank by
//     category (parameters, gradients, optimizer state, activations, communication, CAC stash,
//     optimizer temporaries), for every system;
//  2. for a family of growing base models (family.hidden/heads/layers) on layout.*, which fit a
//     per-rank budget (memory.budget_bytes), TED against DeepSpeed-MoE: the largest that fits.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_memory -c experiments/memory/cpu.yaml
#include <algorithm>
#include <cstdio>
#include <map>

#include "ted/experiments/harness.hpp"

using namespace ted::experiments;

int main(int argc, char** argv) {
  auto summary = [](const std::vector<Point>& points, const std::vector<Result>& results) {
    std::map<std::string, std::pair<std::uint64_t, std::string>> largest;  // system -> model
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (points[i].budget < 0 || !results[i].ran()) continue;
      auto& best = largest[points[i].system.name];
      if (results[i].peak_total <= static_cast<std::size_t>(points[i].budget) &&
          results[i].parameters > best.first)
        best = {results[i].parameters, points[i].model_name};
    }
    for (const auto& [system, best] : largest)
      std::printf("# largest base model within the budget: %-14s %s (%llu parameters)\n",
                  system.c_str(), best.first ? best.second.c_str() : "none fits",
                  static_cast<unsigned long long>(best.first));
  };
  return experiment_main(
      argc, argv, "memory",
      "Memory: measures the peak bytes per rank by category (tracking allocator) "
      "of each layout, and the largest base model of a family within a "
      "per-rank budget, TED against DeepSpeed-MoE",
      summary);
}
