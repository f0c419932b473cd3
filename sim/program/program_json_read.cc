// Reading the Program from JSON (program_json.h): every issue of the document at once, each
// with its key path and line:column.
#include "sim/program/program_json.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/io/json_locator.h"

namespace stepcast {

using nlohmann::json;

namespace {

template <typename E, int N>
std::vector<std::string> names_of(const char* (*name)(E)) {
  std::vector<std::string> out;
  for (int i = 0; i < N; ++i) out.emplace_back(name(static_cast<E>(i)));
  return out;
}

const std::vector<std::string>& stream_names() {
  static const auto v = names_of<StreamKind, kStreamCount>(stream_name);
  return v;
}
const std::vector<std::string>& kind_names() {
  static const auto v = names_of<TaskKind, kTaskKindCount>(task_kind_name);
  return v;
}
const std::vector<std::string>& phase_names() {
  static const auto v = names_of<Phase, kPhaseCount>(phase_name);
  return v;
}
const std::vector<std::string>& category_names() {
  static const auto v = names_of<Category, kCategoryCount>(category_name);
  return v;
}
const std::vector<std::string>& coll_names() {
  static const auto v = names_of<CollOp, kCollOpCount>(coll_op_name);
  return v;
}
const std::vector<std::string>& group_names() {
  static const auto v = names_of<GroupKind, kGroupKindCount>(group_kind_name);
  return v;
}
const std::vector<std::string>& layout_names() {
  static const auto v = names_of<GemmLayout, kGemmLayoutCount>(gemm_layout_name);
  return v;
}
const std::vector<std::string>& dtype_names() {
  static const auto v = names_of<DType, kDTypeCount>(dtype_name);
  return v;
}

// Walks a parsed document, collecting every issue with its key path.
class Reader {
 public:
  Reader(std::string file, std::vector<InputIssue>& issues)
      : file_(std::move(file)), issues_(issues) {}

  void error(const std::string& path, const std::string& msg) {
    issues_.push_back({file_, 0, 0, path, msg});
  }

  static std::string type_of(const json& j) { return j.type_name(); }

  bool object(const json& j, const std::string& path, const std::vector<std::string>& known) {
    if (!j.is_object()) {
      error(path, fmt::format("expected an object, got {}", type_of(j)));
      return false;
    }
    for (const auto& [k, v] : j.items()) {
      (void)v;
      if (std::find(known.begin(), known.end(), k) != known.end()) continue;
      std::string near = closest_match(k, known);
      error(join(path, k),
            near.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", near));
    }
    return true;
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  const json* find(const json& obj, const std::string& path, const std::string& key,
                   bool required) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) error(join(path, key), "missing required key");
      return nullptr;
    }
    return &*it;
  }

  template <typename T>
  void integer(const json& obj, const std::string& path, const std::string& key, T& out,
               bool required, std::int64_t min = INT64_MIN) {
    const json* v = find(obj, path, key, required);
    if (!v) return;
    if (!v->is_number_integer()) {
      error(join(path, key), fmt::format("expected an integer, got {}", v->dump()));
      return;
    }
    std::int64_t x = v->get<std::int64_t>();
    if (x < min) {
      error(join(path, key), fmt::format("expected an integer >= {}, got {}", min, x));
      return;
    }
    out = static_cast<T>(x);
  }

  void number(const json& obj, const std::string& path, const std::string& key, double& out,
              bool required) {
    const json* v = find(obj, path, key, required);
    if (!v) return;
    if (!v->is_number()) {
      error(join(path, key), fmt::format("expected a number, got {}", v->dump()));
      return;
    }
    out = v->get<double>();
    if (out < 0) error(join(path, key), fmt::format("expected a number >= 0, got {}", v->dump()));
  }

  void boolean(const json& obj, const std::string& path, const std::string& key, bool& out,
               bool required) {
    const json* v = find(obj, path, key, required);
    if (!v) return;
    if (!v->is_boolean()) {
      error(join(path, key), fmt::format("expected true or false, got {}", v->dump()));
      return;
    }
    out = v->get<bool>();
  }

  void string(const json& obj, const std::string& path, const std::string& key, std::string& out,
              bool required) {
    const json* v = find(obj, path, key, required);
    if (!v) return;
    if (!v->is_string()) {
      error(join(path, key), fmt::format("expected a string, got {}", v->dump()));
      return;
    }
    out = v->get<std::string>();
  }

  // Returns the index of the value in `allowed`, or -1 (issue reported unless absent).
  int choice(const json& obj, const std::string& path, const std::string& key,
             const std::vector<std::string>& allowed, bool required) {
    const json* v = find(obj, path, key, required);
    if (!v) return -1;
    if (v->is_string()) {
      auto s = v->get<std::string>();
      for (size_t i = 0; i < allowed.size(); ++i)
        if (allowed[i] == s) return static_cast<int>(i);
    }
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    error(join(path, key), fmt::format("expected one of {}, got {}", list, v->dump()));
    return -1;
  }

  template <typename E>
  void enumeration(const json& obj, const std::string& path, const std::string& key, E& out,
                   const std::vector<std::string>& allowed, bool required) {
    int i = choice(obj, path, key, allowed, required);
    if (i >= 0) out = static_cast<E>(i);
  }

  void int_list(const json& obj, const std::string& path, const std::string& key,
                std::vector<int>& out, bool required) {
    const json* v = find(obj, path, key, required);
    if (!v) return;
    if (!v->is_array()) {
      error(join(path, key), fmt::format("expected a list of integers, got {}", type_of(*v)));
      return;
    }
    out.clear();
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (!e.is_number_integer()) {
        error(fmt::format("{}[{}]", join(path, key), i),
              fmt::format("expected an integer, got {}", e.dump()));
        continue;
      }
      out.push_back(e.get<int>());
    }
  }

 private:
  std::string file_;
  std::vector<InputIssue>& issues_;
};

const std::vector<std::string> kTopKeys = {"schema",        "world_size", "folded", "scenario_name",
                                           "gpus_per_node", "groups",     "ranks"};
const std::vector<std::string> kGroupKeys = {"id", "kind", "ranks"};
const std::vector<std::string> kRankKeys = {"rank", "pp_stage", "stands_for", "streams", "tasks"};

std::vector<std::string> task_keys() {
  std::vector<std::string> k = {"id",    "kind",     "stream",     "phase",    "category",
                                "label", "layer",    "microbatch", "chunk",    "deps",
                                "flops", "launches", "host_ops",   "host_sync"};
  for (const auto& n : kind_names()) k.push_back(n);
  return k;
}

void read_task(Reader& rd, const json& j, const std::string& path, Task& t) {
  static const std::vector<std::string> keys = task_keys();
  if (!rd.object(j, path, keys)) return;
  rd.integer(j, path, "id", t.id, true, 0);
  int kind = rd.choice(j, path, "kind", kind_names(), true);
  rd.enumeration(j, path, "stream", t.stream, stream_names(), true);
  rd.enumeration(j, path, "phase", t.phase, phase_names(), true);
  rd.enumeration(j, path, "category", t.category, category_names(), true);
  rd.string(j, path, "label", t.label, false);
  rd.integer(j, path, "layer", t.layer, false, -1);
  rd.integer(j, path, "microbatch", t.microbatch, false, -1);
  rd.integer(j, path, "chunk", t.chunk, false, -1);
  rd.int_list(j, path, "deps", t.deps, false);
  rd.number(j, path, "flops", t.flops, false);
  rd.integer(j, path, "launches", t.launches, false, 0);
  rd.integer(j, path, "host_ops", t.host_ops, false, 0);
  rd.boolean(j, path, "host_sync", t.host_sync, false);
  if (kind < 0) return;
  t.kind = static_cast<TaskKind>(kind);
  if (t.host_sync && (t.stream != StreamKind::kCompute ||
                      (t.kind != TaskKind::kGemm && t.kind != TaskKind::kAttention &&
                       t.kind != TaskKind::kMemoryBound)))
    rd.error(Reader::join(path, "host_sync"),
             "the host waits only for a kernel (gemm, attention, memory_bound) on the compute "
             "stream");
  const std::string kn = task_kind_name(t.kind);
  for (const auto& other : kind_names())
    if (other != kn && j.contains(other))
      rd.error(Reader::join(path, other),
               fmt::format("arguments of a {} task given to a {} task", other, kn));
  const json* a = rd.find(j, path, kn, true);
  if (!a) return;
  const std::string ap = Reader::join(path, kn);
  switch (t.kind) {
    case TaskKind::kGemm:
      if (!rd.object(*a, ap,
                     {"m", "n", "k", "batch", "dtype", "layout", "bytes_read", "bytes_written"}))
        return;
      rd.integer(*a, ap, "m", t.gemm.m, true, 0);
      rd.integer(*a, ap, "n", t.gemm.n, true, 0);
      rd.integer(*a, ap, "k", t.gemm.k, true, 0);
      rd.integer(*a, ap, "batch", t.gemm.batch, false, 1);
      rd.enumeration(*a, ap, "dtype", t.gemm.dtype, dtype_names(), true);
      rd.enumeration(*a, ap, "layout", t.gemm.layout, layout_names(), false);
      rd.number(*a, ap, "bytes_read", t.bytes_read, false);
      rd.number(*a, ap, "bytes_written", t.bytes_written, false);
      break;
    case TaskKind::kAttention: {
      if (!rd.object(*a, ap,
                     {"batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "pass",
                      "dtype", "bytes_read", "bytes_written"}))
        return;
      rd.integer(*a, ap, "batch", t.attn.batch, true, 0);
      rd.integer(*a, ap, "heads", t.attn.heads, true, 0);
      rd.integer(*a, ap, "kv_heads", t.attn.kv_heads, true, 0);
      rd.integer(*a, ap, "seq_q", t.attn.seq_q, true, 0);
      rd.integer(*a, ap, "seq_kv", t.attn.seq_kv, true, 0);
      rd.integer(*a, ap, "head_dim", t.attn.head_dim, true, 0);
      rd.boolean(*a, ap, "causal", t.attn.causal, true);
      int pass = rd.choice(*a, ap, "pass", {"fwd", "bwd"}, true);
      if (pass >= 0) t.attn.backward = pass == 1;
      rd.enumeration(*a, ap, "dtype", t.attn.dtype, dtype_names(), false);
      rd.number(*a, ap, "bytes_read", t.bytes_read, false);
      rd.number(*a, ap, "bytes_written", t.bytes_written, false);
      break;
    }
    case TaskKind::kMemoryBound:
      if (!rd.object(*a, ap, {"bytes_read", "bytes_written", "what"})) return;
      rd.number(*a, ap, "bytes_read", t.bytes_read, true);
      rd.number(*a, ap, "bytes_written", t.bytes_written, true);
      rd.string(*a, ap, "what", t.what, false);
      break;
    case TaskKind::kCollective:
      if (!rd.object(*a, ap, {"op", "group", "bytes", "dtype", "kernels"})) return;
      rd.enumeration(*a, ap, "op", t.coll, coll_names(), true);
      rd.integer(*a, ap, "group", t.group, true, 0);
      rd.number(*a, ap, "bytes", t.bytes, true);
      rd.enumeration(*a, ap, "dtype", t.dtype, dtype_names(), false);
      // "kernels": "deepep" (Task::ep_kernels); absent: NCCL.
      t.ep_kernels = rd.choice(*a, ap, "kernels", {"deepep"}, false) == 0;
      break;
    case TaskKind::kSend:
    case TaskKind::kRecv:
      if (!rd.object(*a, ap, {"peer", "bytes", "tag"})) return;
      rd.integer(*a, ap, "peer", t.peer, true, 0);
      rd.number(*a, ap, "bytes", t.bytes, true);
      rd.integer(*a, ap, "tag", t.tag, true);
      break;
    case TaskKind::kAlloc:
    case TaskKind::kFree:
      if (!rd.object(*a, ap, {"bytes", "what"})) return;
      rd.number(*a, ap, "bytes", t.bytes, true);
      rd.string(*a, ap, "what", t.what, true);
      break;
  }
}

void read_rank(Reader& rd, const json& j, const std::string& path, RankProgram& rp) {
  if (!rd.object(j, path, kRankKeys)) return;
  rd.integer(j, path, "rank", rp.rank, true, 0);
  rd.integer(j, path, "pp_stage", rp.pp_stage, false, 0);
  rd.int_list(j, path, "stands_for", rp.stands_for, false);
  const json* tasks = rd.find(j, path, "tasks", true);
  if (tasks) {
    if (!tasks->is_array()) {
      rd.error(Reader::join(path, "tasks"), "expected a list of tasks");
    } else {
      rp.tasks.resize(tasks->size());
      for (size_t i = 0; i < tasks->size(); ++i) {
        const std::string tp = fmt::format("{}.tasks[{}]", path, i);
        read_task(rd, (*tasks)[i], tp, rp.tasks.mut(i));
        if (rp.tasks[i].id != static_cast<int>(i))
          rd.error(tp + ".id", fmt::format("expected {} (ids are dense: tasks[i].id == i), got {}",
                                           i, rp.tasks[i].id));
      }
    }
  }
  // Issue order per stream is task order; the streams listing must say the same.
  const json* streams = rd.find(j, path, "streams", false);
  if (!streams) return;
  const std::string sp = Reader::join(path, "streams");
  if (!rd.object(*streams, sp, stream_names())) return;
  std::array<std::vector<int>, kStreamCount> expect;
  for (const Task& t : rp.tasks) expect[static_cast<size_t>(t.stream)].push_back(t.id);
  for (int s = 0; s < kStreamCount; ++s) {
    const std::string name = stream_name(static_cast<StreamKind>(s));
    std::vector<int> got;
    if (streams->contains(name)) rd.int_list(*streams, sp, name, got, false);
    if (got != expect[static_cast<size_t>(s)])
      rd.error(Reader::join(sp, name),
               fmt::format("lists {} task ids but the tasks on stream '{}' are, in issue order, "
                           "{} ids starting {}",
                           got.size(), name, expect[static_cast<size_t>(s)].size(),
                           expect[static_cast<size_t>(s)].empty()
                               ? std::string("(none)")
                               : std::to_string(expect[static_cast<size_t>(s)].front())));
  }
}

// Fills line:column of each issue from its key path and throws them all.
void throw_located(std::vector<InputIssue> issues, const std::string& text) {
  const JsonLocator at(text);
  for (InputIssue& i : issues) std::tie(i.line, i.column) = at.find(i.key);
  throw InputError(std::move(issues));
}

}  // namespace

Program program_from_json(const std::string& text, const std::string& file) {
  const json j = parse_json(text, file);
  std::vector<InputIssue> issues;
  Reader rd(file, issues);
  Program p;
  if (!rd.object(j, "", kTopKeys)) throw_located(std::move(issues), text);
  std::string schema;
  rd.string(j, "", "schema", schema, true);
  if (j.contains("schema") && j["schema"].is_string() && schema != kProgramSchema)
    rd.error("schema", fmt::format("expected \"{}\", got \"{}\"", kProgramSchema, schema));
  p.schema = kProgramSchema;
  rd.integer(j, "", "world_size", p.world_size, true, 1);
  rd.boolean(j, "", "folded", p.folded, false);
  rd.string(j, "", "scenario_name", p.scenario_name, false);
  rd.integer(j, "", "gpus_per_node", p.gpus_per_node, false, 1);
  if (const json* groups = rd.find(j, "", "groups", true)) {
    if (!groups->is_array()) {
      rd.error("groups", "expected a list of groups");
    } else {
      p.groups.resize(groups->size());
      for (size_t i = 0; i < groups->size(); ++i) {
        const std::string gp = fmt::format("groups[{}]", i);
        const json& gj = (*groups)[i];
        Group& g = p.groups[i];
        if (!rd.object(gj, gp, kGroupKeys)) continue;
        rd.integer(gj, gp, "id", g.id, true, 0);
        if (g.id != static_cast<int>(i))
          rd.error(gp + ".id",
                   fmt::format("expected {} (group ids equal their index), got {}", i, g.id));
        rd.enumeration(gj, gp, "kind", g.kind, group_names(), true);
        rd.int_list(gj, gp, "ranks", g.ranks, true);
      }
    }
  }
  if (const json* ranks = rd.find(j, "", "ranks", true)) {
    if (!ranks->is_array()) {
      rd.error("ranks", "expected a list of ranks");
    } else {
      p.ranks.resize(ranks->size());
      for (size_t i = 0; i < ranks->size(); ++i)
        read_rank(rd, (*ranks)[i], fmt::format("ranks[{}]", i), p.ranks[i]);
    }
  }
  if (!issues.empty()) throw_located(std::move(issues), text);
  return p;
}

Program load_program_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(InputIssue{path, 0, 0, "", "cannot open file"});
  std::stringstream ss;
  ss << in.rdbuf();
  return program_from_json(ss.str(), path);
}

}  // namespace stepcast
