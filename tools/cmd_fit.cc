// `stepcast fit`: fits a hardware profile to calibration measurements (stepcast-bench's
// measurements.json files, several of one GPU model at once) and writes it as YAML.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/fit/fit.h"
#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct FitFlags {
  std::vector<std::string> measurements;
  std::string base_profile, fit_out;
};

int run_fit(const FitFlags& f) {
  FitReport report;
  fit_profile(f.measurements, f.base_profile, f.fit_out, &report);
  std::cout << report.text();
  std::cout << "wrote " << f.fit_out << "\n";
  return kExitOk;
}

}  // namespace

Command add_fit_command(CLI::App& app) {
  auto f = std::make_shared<FitFlags>();
  auto* fit = app.add_subcommand("fit", "fit a hardware profile to calibration measurements");
  fit->add_option("MEASUREMENTS", f->measurements,
                  "measurements.json files from stepcast-bench (and attention_sdpa.py), of one "
                  "GPU model")
      ->required();
  fit->add_option("--base", f->base_profile, "profile to start from (name or path)")->required();
  fit->add_option("-o,--output", f->fit_out, "profile YAML to write")->required();
  return {fit, false, [f](Context&) { return run_fit(*f); }};
}

}  // namespace stepcast::cli
