// The scenario's search: section (search_space.h): each key a non-empty list of distinct
// values, each value checked as the parallel: key it sets would be.
#include "sim/scenario/search_space.h"

#include <string>

#include <fmt/format.h>

namespace stepcast {

namespace {

const std::vector<std::string> kSearchKeys = {"tp",      "pp",         "cp",        "microbatch",
                                              "vpp",     "zero",       "recompute", "schedule",
                                              "cp_kind", "tp_overlap", "bucket_mb", "moe_ep_comm"};

}  // namespace

SearchSpace parse_search_space(const YAML::Node& s, YamlReader& r) {
  SearchSpace out;
  if (!r.expect_map(s, "search", kSearchKeys)) return out;
  // Each list: its items one at a time, through the reader's typed getters (a one-entry map
  // per item, so messages carry the item's own position and its path "search.key[i]").
  auto items = [&](const char* key, auto&& read) {
    const YAML::Node list = s[key];
    if (!list) return;
    const std::string kp = std::string("search.") + key;
    if (!list.IsSequence() || list.size() == 0) {
      r.error(list, kp, "expected a non-empty list of values");
      return;
    }
    std::vector<std::string> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string text = list[i].IsScalar() ? list[i].Scalar() : "";
      for (const auto& t : seen)
        if (!text.empty() && t == text)
          r.error(list[i], fmt::format("{}[{}]", kp, i), "duplicate value " + text);
      seen.push_back(text);
      YAML::Node one(YAML::NodeType::Map);
      one[fmt::format("{}[{}]", key, i)] = list[i];
      read(one, fmt::format("{}[{}]", key, i));
    }
  };
  auto ints = [&](const char* key, std::vector<int>& v, int lo, int hi) {
    items(key, [&](const YAML::Node& one, const std::string& k) {
      if (auto x = r.get_int(one, "search", k, lo, hi)) v.push_back(static_cast<int>(*x));
    });
  };
  ints("tp", out.tp, 1, 1 << 16);
  ints("pp", out.pp, 1, 1 << 16);
  ints("cp", out.cp, 1, 1 << 16);
  ints("microbatch", out.microbatch, 1, 1 << 20);
  ints("vpp", out.vpp, 1, 1 << 10);
  ints("zero", out.zero, 0, 3);
  items("recompute", [&](const YAML::Node& one, const std::string& k) {
    if (auto x = r.get_enum(one, "search", k, {"none", "selective", "full"}))
      out.recompute.push_back(*x == "none"        ? Recompute::kNone
                              : *x == "selective" ? Recompute::kSelective
                                                  : Recompute::kFull);
  });
  items("schedule", [&](const YAML::Node& one, const std::string& k) {
    if (auto x =
            r.get_enum(one, "search", k, {"gpipe", "1f1b", "interleaved", "zb-h1", "dualpipev"}))
      out.schedule.push_back(*x == "gpipe"         ? Schedule::kGpipe
                             : *x == "1f1b"        ? Schedule::k1F1B
                             : *x == "interleaved" ? Schedule::kInterleaved
                             : *x == "zb-h1"       ? Schedule::kZbH1
                                                   : Schedule::kDualPipeV);
  });
  items("cp_kind", [&](const YAML::Node& one, const std::string& k) {
    if (auto x = r.get_enum(one, "search", k, {"ring", "allgather"}))
      out.cp_kind.push_back(*x == "ring" ? CpKind::kRing : CpKind::kAllGather);
  });
  items("tp_overlap", [&](const YAML::Node& one, const std::string& k) {
    if (auto x = r.get_bool(one, "search", k)) out.tp_overlap.push_back(*x);
  });
  items("moe_ep_comm", [&](const YAML::Node& one, const std::string& k) {
    if (auto x = r.get_bool(one, "search", k)) out.moe_ep_comm.push_back(*x);
  });
  items("bucket_mb", [&](const YAML::Node& one, const std::string& k) {
    if (auto x = r.get_double(one, "search", k, 1e-3, 1e6)) out.bucket_mb.push_back(*x);
  });
  return out;
}

SearchSpace search_space_of(const Scenario& sc) {
  if (!sc.source || !sc.source.IsMap() || !sc.source["search"]) return {};
  IssueList issues;
  YamlReader r(sc.file, issues);
  r.set_root(sc.source);
  SearchSpace out = parse_search_space(sc.source["search"], r);
  issues.throw_if_any();
  return out;
}

}  // namespace stepcast
