// The pieces of the pipeline (report.cc, predict) that the search's pruned variant
// (search_prune.cc) builds its own from. Internal to sim/report.
#pragma once

#include <functional>

#include "sim/cost/coster.h"
#include "sim/report/report.h"

namespace stepcast {

// What a Result says about the scenario itself, simulated or not.
Result result_header(const Scenario& sc);
// Runs `predict_unlocated` and places the issues it raises in the scenario: an issue with
// no key gets the one of the whole step (a task too long, too much work), then
// locate_in_scenario.
Prediction predict_located(const Scenario& sc,
                           const std::function<Prediction()>& predict_unlocated);
// Simulates the lowered out.program (its tasks' durations `d`, costed here when null; with
// network: flow, communication as flows sharing links) and reports it into out.result.
void simulate_and_report(const Scenario& sc, const RunOptions& opt, const GpuSpeeds& speeds,
                         Durations* d, Prediction& out);

}  // namespace stepcast
