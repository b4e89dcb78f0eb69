// Timing a plan's points in interleaved rounds (run.rounds) and saying whether the machine
// disturbed them (disturbance.hpp).
//
// Round r runs every point once, warm-up and timed iterations, starting at point r mod n: each
// point runs first, last and between others as often as it can, so a disturbance that lasts a
// few seconds lands on several systems rather than on the one timed then. Each round is a row
// of the CSV as soon as it is measured (a run that dies keeps its rounds); when all are done,
// each point gets a summary row pooling its rounds' iterations (median, p10, p90) with the
// split of its median round, and the spread of its rounds' medians. With one round the point's
// row is its only row, as before rounds existed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/experiments/config.hpp"
#include "ted/experiments/measure.hpp"
#include "ted/experiments/plans.hpp"

namespace ted::experiments {

// Times every point whose verdict is "" (the others get a row saying why not), appending rows
// on rank 0 as they are measured; returns each point's result (its summary) and adds the rows
// written to *written. Collective over `world`.
std::vector<Result> measure_rounds(const Plan& plan, const std::vector<std::string>& verdicts,
                                   const ExperimentConfig& config, MpiCommunicator& world,
                                   const std::string& command, std::size_t* written);

// A point's summary of its rounds (at least one, each timed): pooled iterations, the median
// round's split scaled to the pooled median, the spread of the rounds' medians, and the most
// that others and the hypervisor took in any round.
Result pool_rounds(const std::vector<Result>& rounds);

}  // namespace ted::experiments
