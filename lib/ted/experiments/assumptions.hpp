// What ted_project writes beside a projected CSV, <csv>.assumptions.txt: the command and
// revision, every rate and rule of the cluster file, the time model in words (the one text,
// docs/time_model.txt, compiled in: the docs quote that file), the run's precision and
// gating, and (for `experiment`) the memory model's terms of every point.
#pragma once

#include <string>
#include <vector>

#include "ted/experiments/plans.hpp"
#include "ted/projection/cluster.hpp"

namespace ted::experiments {

// docs/time_model.txt as built into the programs.
const std::string& time_model_text();

// The memory model's terms for every point: what each rank holds, by category, and the
// paper's count (its Eqs. 2-6, DeepSpeed's fp16 ZeRO-1: weights and gradients on every rank
// holding a parameter, 12 bytes of fp32 master and Adam state sharded over its data group)
// with this run's widths, which leaves out activations and temporaries.
std::string memory_terms(const std::vector<Point>& points, const projection::Cluster& cluster);

// Writes <csv>.assumptions.txt (atomically); `memory` (memory_terms) ends it.
void write_assumptions(const std::string& csv, const projection::Cluster& cluster,
                       const ExperimentConfig& config, const std::string& command,
                       const std::string& memory = "");

}  // namespace ted::experiments
