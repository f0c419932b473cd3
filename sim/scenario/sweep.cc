// The sweep block of a scenario: each axis a dotted key with a list of values, each value
// checked where it would go (docs/scenarios.md, sweep). A member of the Loader
// (loader.h); with_dotted_key, which builds each sweep point, is here too.
#include <set>

#include <fmt/format.h>

#include "sim/io/dotted.h"
#include "sim/io/yaml_util.h"
#include "sim/scenario/loader.h"

namespace stepcast {

namespace detail {

// Each axis's key must be a valid scenario path and each value valid there. Checked by
// loading the scenario (without its sweep) with the value set at the key and keeping the
// problems about that key; problems between keys are left to each sweep point.
void Loader::parse_sweep(const YAML::Node& sw, Scenario& sc) {
  if (!sw.IsMap()) {
    r_.error(sw, "sweep", "expected a mapping of dotted keys to lists of values");
    return;
  }
  YAML::Node base(YAML::NodeType::Map);
  for (const auto& kv : root_)
    if (!(kv.first.IsScalar() && kv.first.Scalar() == "sweep"))
      base.force_insert(kv.first, kv.second);
  std::set<std::string> seen;
  for (const auto& kv : sw) {
    const YAML::Node& k = kv.first;
    const std::string key = k.IsScalar() ? k.Scalar() : "";
    const std::string kp = "sweep." + key;
    if (split_dotted(key).empty()) {
      r_.error(k, "sweep",
               "expected a dotted scenario key such as parallel.tp, got " + show_node(k));
      continue;
    }
    if (!seen.insert(key).second) {
      r_.error(k, kp, "duplicate key");
      continue;
    }
    if (key == "sweep" || key.rfind("sweep.", 0) == 0 || key == "name") {
      r_.error(k, kp, "this key cannot be swept");
      continue;
    }
    const YAML::Node& vals = kv.second;
    if (!vals.IsSequence() || vals.size() == 0) {
      r_.error(vals, kp, "expected a non-empty list of values");
      continue;
    }
    std::set<std::string> reported;
    SweepAxis axis;
    axis.key = key;
    for (const auto& v : vals) {
      axis.values.push_back(v);
      std::vector<InputIssue> found;
      try {
        Loader(with_dotted_key(base, key, v), file_, false).run();
      } catch (const InputError& e) {
        found = e.issues();
      }
      for (InputIssue i : found) {
        const bool about_key = i.key == key || i.key.rfind(key + ".", 0) == 0 ||
                               i.key.rfind(key + "[", 0) == 0 || key.rfind(i.key + ".", 0) == 0;
        if (!about_key) continue;
        if (i.line == 0) {  // a node the splice created: point at the sweep key
          i.file = file_;
          i.line = k.Mark().line + 1;
          i.column = k.Mark().column + 1;
        }
        i.key = "sweep." + i.key;
        const std::string id = i.key + ": " + i.message;
        if (reported.insert(id).second) issues_.add(i);
      }
    }
    sc.sweep.push_back(std::move(axis));
  }
}

}  // namespace detail

YAML::Node with_dotted_key(const YAML::Node& root, const std::string& dotted_key,
                           const YAML::Node& value) {
  auto segs = split_dotted(dotted_key);
  // cluster.overrides holds dotted profile paths as single keys ({node.nic: 100 Gb/s}).
  if (segs.size() > 3 && segs[0] == "cluster" && segs[1] == "overrides") {
    for (std::size_t i = 3; i < segs.size(); ++i) segs[2] += "." + segs[i];
    segs.resize(3);
  }
  if (segs.empty())
    throw InputError(InputIssue{"", 0, 0, dotted_key, "expected a dotted key such as parallel.tp"});
  return copy_with_dotted(root, segs, value, dotted_key);
}

}  // namespace stepcast
