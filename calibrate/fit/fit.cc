// stepcast fit: measurements.json + a base profile -> a fitted hardware profile (fit.h).
// This file: fit_profile, which runs the fit of each model in turn (fit_gemm.cc,
// fit_grouped.cc, fit_memory.cc, fit_attention.cc, fit_resources.cc, fit_collectives.cc) and writes
// the profile (fit_report.cc).
#include "calibrate/fit/fit.h"

#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit_internal.h"
#include "model/error.h"
#include "sim/cluster/profile.h"
#include "sim/io/json_locator.h"
#include "sim/io/yaml_util.h"

namespace stepcast {

using namespace fit_detail;

namespace {

// Model tokens in a GPU name ("NVIDIA H100 80GB HBM3" -> {H100}); used to warn when the
// measurements come from another GPU model than the base profile.
std::set<std::string> gpu_models(const std::string& name) {
  std::set<std::string> out;
  static const std::regex re("\\b([A-Z]{1,2}[0-9]{2,3})\\b");
  for (auto it = std::sregex_iterator(name.begin(), name.end(), re); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1]);
  return out;
}

}  // namespace

void fit_profile(const std::string& measurements_path, const std::string& base_profile,
                 const std::string& out_yaml, FitReport* report) {
  fit_profile(std::vector<std::string>{measurements_path}, base_profile, out_yaml, report);
}

void fit_profile(const std::vector<std::string>& measurements_paths,
                 const std::string& base_profile, const std::string& out_yaml, FitReport* report) {
  const Measurements m = load_measurements(measurements_paths);
  HwProfile base;
  try {
    base = load_profile(base_profile, default_profiles_dir());
  } catch (const InputError& e) {
    // An unknown name is the --base flag's (load_profile names a scenario's cluster.profile).
    std::vector<InputIssue> issues = e.issues();
    for (InputIssue& i : issues)
      if (i.file.empty() && i.key == "cluster.profile") i.key = "--base";
    throw InputError(std::move(issues));
  }

  FitReport rep;
  rep.measurements_file = m.file;
  rep.base_profile = base.file;
  rep.out_yaml = out_yaml;
  rep.gpu_name = m.provenance.gpu_name;
  rep.date_utc = m.provenance.date_utc;
  rep.source = m.source;
  rep.compute = base.compute;

  const std::set<std::string> measured_models = gpu_models(m.provenance.gpu_name);
  const std::set<std::string> base_models = gpu_models(base.gpu.name);
  if (!measured_models.empty() && !base_models.empty() &&
      std::none_of(measured_models.begin(), measured_models.end(),
                   [&](const std::string& s) { return base_models.count(s) > 0; }))
    rep.warnings.push_back(fmt::format("measured GPU \"{}\" is not the base profile's \"{}\"",
                                       m.provenance.gpu_name, base.gpu.name));

  fit_gemm(m, base, rep);
  fit_grouped_gemm(m, base, rep);  // against the curve just fitted

  fit_memory_bandwidth(m, base, rep);
  fit_attention(m, base, rep);
  fit_comm_sms(m, base, rep);
  fit_memory_reserved(m, base, rep);
  fit_communicator_memory(m, base, rep);

  fit_collectives(m, base, rep);
  write_yaml(base, rep, m, out_yaml);
  // What was written must load as any profile does: fitted values are kept in range, and
  // measurements no GPU could give are refused above, so a failure is a value the input
  // drove out of range (a collective's time near zero: an unbounded bandwidth): bad input.
  try {
    load_profile(out_yaml, default_profiles_dir());
  } catch (const InputError& e) {
    throw InputError(InputIssue{
        m.file, 0, 0, "",
        fmt::format("these measurements fit a profile that does not load ({}): a measured time "
                    "too small for its work?",
                    e.issues().empty() ? std::string(e.what()) : e.issues().front().str())});
  }
  if (report) *report = std::move(rep);
}

namespace fit_detail {

void throw_measurement_issues(std::vector<InputIssue> issues, const Measurements& m) {
  if (issues.empty()) return;
  if (m.file.find(", ") == std::string::npos) {  // one file: place each issue in its text
    try {
      locate_json_pointer_issues(issues, read_text_file(m.file, "JSON"));
    } catch (const InputError&) {  // the file is gone: the pointers still say where
    }
  }
  throw InputError(std::move(issues));
}

}  // namespace fit_detail

}  // namespace stepcast
