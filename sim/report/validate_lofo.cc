// Groups of validation cases (validate.h case_kind) and the leave-one-family-out error:
// the one fitted scalar of a profile (the sustained clock) scanned on a grid, fitted on all
// cases and, per source family, on the cases outside it, which then predicts the family.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "sim/report/validate.h"

namespace stepcast {

std::string case_kind(const Scenario& sc) {
  if (sc.model.moe) return "moe";
  if (sc.parallel.zero == 3) return "fsdp";
  if (sc.parallel.cp > 1) return "cp";
  return "dense";
}

std::pair<ProfileOverride, std::vector<double>> parse_scan(const std::string& text) {
  auto fail = [&]() -> std::pair<ProfileOverride, std::vector<double>> {
    throw InputError(InputIssue{"", 0, 0, "--scan",
                                "expected [PROFILE:]KEY=V1,V2,... with at least two numbers (e.g. "
                                "h100-sxm:compute.sustained_clock=0.71,0.72,0.73), got \"" +
                                    text + "\""});
  };
  ProfileOverride key;
  try {
    key = parse_profile_override(text);
  } catch (const InputError&) {
    return fail();
  }
  std::vector<double> values;
  size_t at = 0;
  while (at <= key.value.size()) {
    const size_t comma = std::min(key.value.find(',', at), key.value.size());
    const std::string item = key.value.substr(at, comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v)) return fail();
    values.push_back(v);
    at = comma + 1;
  }
  if (values.size() < 2) return fail();
  key.value.clear();
  return {key, values};
}

namespace {

// Mean |error| over the cases of `reports[v]` that `keep` selects (0 when none).
template <class Keep>
double mape_of(const ValidationReport& r, Keep keep) {
  double sum = 0;
  int n = 0;
  for (const CaseOutcome& c : r.cases)
    if (keep(c)) {
      sum += std::fabs(c.error);
      ++n;
    }
  return n > 0 ? sum / n : 0.0;
}

// The index of the lowest MAPE over the selected cases (the first on ties).
template <class Keep>
size_t best_index(const std::vector<ValidationReport>& reports, Keep keep) {
  size_t best = 0;
  for (size_t i = 1; i < reports.size(); ++i)
    if (mape_of(reports[i], keep) < mape_of(reports[best], keep)) best = i;
  return best;
}

}  // namespace

LofoReport leave_one_family_out(const ProfileOverride& key, const std::vector<double>& values,
                                const std::vector<ValidationReport>& reports) {
  LofoReport out;
  out.key = key;
  out.values = values;
  auto all = [](const CaseOutcome&) { return true; };
  for (const ValidationReport& r : reports) out.mape.push_back(mape_of(r, all));
  const size_t best = best_index(reports, all);
  out.best_value = values[best];
  out.in_sample_mape = out.mape[best];
  out.key.value = fmt::format("{:g}", out.best_value);
  std::set<std::string> families;
  for (const CaseOutcome& c : reports[0].cases) families.insert(c.family);
  double held_sum = 0;
  int held_n = 0;
  for (const std::string& f : families) {
    auto in = [&](const CaseOutcome& c) { return c.family == f; };
    auto out_of = [&](const CaseOutcome& c) { return c.family != f; };
    FamilyFit fit;
    fit.family = f;
    for (const CaseOutcome& c : reports[0].cases) fit.cases += in(c);
    fit.in_sample_mape = mape_of(reports[best], in);
    const size_t held = best_index(reports, out_of);
    fit.held_out_value = values[held];
    fit.held_out_mape = mape_of(reports[held], in);
    held_sum += fit.held_out_mape * fit.cases;
    held_n += fit.cases;
    out.families.push_back(fit);
  }
  out.held_out_mape = held_n > 0 ? held_sum / held_n : 0.0;
  return out;
}

std::string render_lofo(const LofoReport& r) {
  const std::string name = (r.key.profile.empty() ? "" : r.key.profile + ":") + r.key.key;
  std::string o = fmt::format("\nScan of {} (MAPE over all cases):", name);
  for (size_t i = 0; i < r.values.size(); ++i)
    o += fmt::format(" {:g} {:.2f}%{}", r.values[i], 100 * r.mape[i],
                     i + 1 < r.values.size() ? "," : "\n");
  o += fmt::format("Fitted on all cases: {:g}, MAPE {:.2f}% (in sample)\n", r.best_value,
                   100 * r.in_sample_mape);
  o += fmt::format("{:<24} {:>6} {:>12} {:>14} {:>14}\n", "left-out family", "cases", "in sample",
                   "fitted without", "held out");
  for (const FamilyFit& f : r.families)
    o += fmt::format("{:<24} {:>6} {:>11.2f}% {:>14g} {:>13.2f}%\n", f.family, f.cases,
                     100 * f.in_sample_mape, f.held_out_value, 100 * f.held_out_mape);
  o += fmt::format(
      "Leave-one-family-out MAPE {:.2f}% (each case predicted by the value fitted "
      "without its family)\n",
      100 * r.held_out_mape);
  return o;
}

}  // namespace stepcast
