// Strict reader of "stepcast.program/1" for the executor (program.h).
#include "program.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "json_io.h"

namespace stepcast::exec {

using bench::Json;

const std::vector<std::string> kStreams = {"compute", "tp", "cp",      "ep",     "pp_send",
                                           "pp_recv", "dp", "cp_recv", "tp_ring"};
const std::vector<std::string> kCategories = {"compute", "recompute", "tp_comm", "cp_comm",
                                              "ep_comm", "pp_comm",   "dp_comm", "optimizer"};
const std::vector<std::string> kPhases = {"fwd",       "bwd_input", "bwd_weight",
                                          "recompute", "optimizer", "other"};
const std::vector<std::string> kCollOps = {"allreduce", "reduce_scatter", "allgather", "all_to_all",
                                           "broadcast"};

namespace {

const std::vector<std::string> kKinds = {"gemm", "attention", "memory_bound", "collective",
                                         "send", "recv",      "alloc",        "free"};
// mxfp8 and nvfp4 (Blackwell's block-scaled formats) are read; the GPU layer runs them as fp8,
// the nearest format its cuBLASLt runner has (gpu_runner.cu).
const std::vector<std::string> kDtypes = {"bf16", "fp16", "fp8", "fp32", "mxfp8", "nvfp4"};
const std::vector<std::string> kLayouts = {"NN", "NT", "TN", "TT"};
const std::vector<std::string> kGroupKinds = {"tp", "cp",    "ep",  "pp",
                                              "dp", "dp_cp", "edp", "world"};

std::string quoted_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "\"" : ", \"") + x + "\"";
  return s;
}

// Walks the document; every problem becomes one line "PATH: message".
class Reader {
 public:
  std::vector<std::string> issues;

  void error(const std::string& path, const std::string& msg) {
    issues.push_back((path.empty() ? "/" : path) + ": " + msg);
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path + "/" + key;
  }

  // An object whose keys are all in `keys`.
  bool object(const Json& v, const std::string& path, const std::vector<std::string>& keys) {
    if (!v.is_object()) {
      error(path, "expected an object");
      return false;
    }
    for (const auto& [k, child] : v.items()) {
      bool known = false;
      for (const auto& want : keys) known = known || want == k;
      if (!known) error(join(path, k), "unknown key (known: " + quoted_list(keys) + ")");
    }
    return true;
  }

  const Json* find(const Json& v, const std::string& path, const std::string& key, bool required) {
    const Json* c = bench::find(v, key);
    if (!c && required) error(join(path, key), "missing");
    return c;
  }

  template <typename Int>
  void integer(const Json& v, const std::string& path, const std::string& key, Int& out,
               bool required, double min) {
    const Json* c = find(v, path, key, required);
    if (!c) return;
    // The largest `Int` holds (2^31 - 1 for int: a group index of 2^31 used to wrap to a
    // negative one and pass the group check, then crash the plan), at most 9e15 (doubles
    // hold every integer up to 2^53).
    const double max = std::min(9.0e15, static_cast<double>(std::numeric_limits<Int>::max()));
    const double number = c->is_number() ? c->get<double>() : 0;
    if (!c->is_number() || number != std::floor(number) || std::fabs(number) > 9.0e15) {
      error(join(path, key), "expected an integer");
    } else if (number > max) {
      error(join(path, key),
            "expected an integer <= " + std::to_string(static_cast<long long>(max)));
    } else if (number < min) {
      error(join(path, key),
            "expected an integer >= " + std::to_string(static_cast<long long>(min)));
    } else {
      out = static_cast<Int>(number);
    }
  }

  // A finite number >= 0 (bytes, FLOPs).
  void amount(const Json& v, const std::string& path, const std::string& key, double& out,
              bool required) {
    const Json* c = find(v, path, key, required);
    if (!c) return;
    if (!c->is_number() || !std::isfinite(c->get<double>()) || c->get<double>() < 0)
      error(join(path, key), "expected a finite number >= 0");
    else
      out = c->get<double>();
  }

  void string(const Json& v, const std::string& path, const std::string& key, std::string& out,
              bool required) {
    const Json* c = find(v, path, key, required);
    if (!c) return;
    if (!c->is_string())
      error(join(path, key), "expected a string");
    else
      out = c->get<std::string>();
  }

  void boolean(const Json& v, const std::string& path, const std::string& key, bool& out,
               bool required) {
    const Json* c = find(v, path, key, required);
    if (!c) return;
    if (!c->is_boolean())
      error(join(path, key), "expected true or false");
    else
      out = c->get<bool>();
  }

  // Index of the value in `options`, -1 when missing or not one of them.
  int choice(const Json& v, const std::string& path, const std::string& key,
             const std::vector<std::string>& options, bool required) {
    const Json* c = find(v, path, key, required);
    if (!c) return -1;
    if (c->is_string())
      for (size_t i = 0; i < options.size(); ++i)
        if (options[i] == c->get_ref<const std::string&>()) return static_cast<int>(i);
    error(join(path, key), "expected one of " + quoted_list(options));
    return -1;
  }

  void int_list(const Json& v, const std::string& path, const std::string& key,
                std::vector<int>& out, bool required) {
    const Json* c = find(v, path, key, required);
    if (!c) return;
    if (!c->is_array()) {
      error(join(path, key), "expected a list of integers");
      return;
    }
    for (size_t i = 0; i < c->size(); ++i) {
      const Json& e = (*c)[i];
      const double number = e.is_number() ? e.get<double>() : 0;
      if (!e.is_number() || number != std::floor(number) || std::fabs(number) > 2.0e9) {
        error(join(path, key) + "/" + std::to_string(i), "expected an integer");
        continue;
      }
      out.push_back(static_cast<int>(number));
    }
  }
};

std::vector<std::string> task_keys() {
  std::vector<std::string> k = {"id",    "kind",     "stream",     "phase",    "category",
                                "label", "layer",    "microbatch", "chunk",    "deps",
                                "flops", "launches", "host_ops",   "host_sync"};
  for (const auto& n : kKinds) k.push_back(n);
  return k;
}

void read_args(Reader& rd, const Json& a, const std::string& ap, Task& t) {
  auto dtype = [&](bool required) {
    int d = rd.choice(a, ap, "dtype", kDtypes, required);
    if (d >= 0) t.dtype = kDtypes[static_cast<size_t>(d)];
  };
  switch (t.kind) {
    case Kind::kGemm: {
      if (!rd.object(a, ap,
                     {"m", "n", "k", "batch", "dtype", "layout", "bytes_read", "bytes_written"}))
        return;
      rd.integer(a, ap, "m", t.m, true, 1);
      rd.integer(a, ap, "n", t.n, true, 1);
      rd.integer(a, ap, "k", t.k, true, 1);
      rd.integer(a, ap, "batch", t.batch, false, 1);
      dtype(true);
      int l = rd.choice(a, ap, "layout", kLayouts, false);
      if (l >= 0) t.layout = kLayouts[static_cast<size_t>(l)];
      rd.amount(a, ap, "bytes_read", t.bytes_read, false);
      rd.amount(a, ap, "bytes_written", t.bytes_written, false);
      return;
    }
    case Kind::kAttention: {
      if (!rd.object(a, ap,
                     {"batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "pass",
                      "dtype", "bytes_read", "bytes_written"}))
        return;
      rd.integer(a, ap, "batch", t.batch, true, 1);
      rd.integer(a, ap, "heads", t.heads, true, 1);
      rd.integer(a, ap, "kv_heads", t.kv_heads, true, 1);
      rd.integer(a, ap, "seq_q", t.seq_q, true, 1);
      rd.integer(a, ap, "seq_kv", t.seq_kv, true, 1);
      rd.integer(a, ap, "head_dim", t.head_dim, true, 1);
      rd.boolean(a, ap, "causal", t.causal, true);
      t.backward = rd.choice(a, ap, "pass", {"fwd", "bwd"}, true) == 1;
      dtype(true);
      rd.amount(a, ap, "bytes_read", t.bytes_read, false);
      rd.amount(a, ap, "bytes_written", t.bytes_written, false);
      if (t.heads > 0 && t.kv_heads > 0 && t.heads % t.kv_heads != 0)
        rd.error(Reader::join(ap, "kv_heads"), "must divide heads");
      return;
    }
    case Kind::kMemoryBound:
      if (!rd.object(a, ap, {"bytes_read", "bytes_written", "what"})) return;
      rd.amount(a, ap, "bytes_read", t.bytes_read, true);
      rd.amount(a, ap, "bytes_written", t.bytes_written, true);
      rd.string(a, ap, "what", t.what, false);
      return;
    case Kind::kCollective:
      // "kernels": "deepep" marks an all-to-all the simulator costs as DeepEP's own kernels;
      // the executor has no DeepEP and runs it as NCCL's all-to-all of the same bytes.
      if (!rd.object(a, ap, {"op", "group", "bytes", "dtype", "kernels"})) return;
      t.op = rd.choice(a, ap, "op", kCollOps, true);
      rd.integer(a, ap, "group", t.group, true, 0);
      rd.amount(a, ap, "bytes", t.bytes, true);
      rd.choice(a, ap, "kernels", {"deepep"}, false);
      dtype(false);
      return;
    case Kind::kSend:
    case Kind::kRecv:
      if (!rd.object(a, ap, {"peer", "bytes", "tag"})) return;
      rd.integer(a, ap, "peer", t.peer, true, 0);
      rd.amount(a, ap, "bytes", t.bytes, true);
      rd.integer(a, ap, "tag", t.tag, true, -9.0e15);
      return;
    case Kind::kAlloc:
    case Kind::kFree:
      if (!rd.object(a, ap, {"bytes", "what"})) return;
      rd.amount(a, ap, "bytes", t.bytes, true);
      rd.string(a, ap, "what", t.what, true);
      return;
  }
}

void read_task(Reader& rd, const Json& j, const std::string& path, Task& t) {
  static const std::vector<std::string> keys = task_keys();
  if (!rd.object(j, path, keys)) return;
  rd.integer(j, path, "id", t.id, true, 0);
  const int kind = rd.choice(j, path, "kind", kKinds, true);
  t.stream = std::max(0, rd.choice(j, path, "stream", kStreams, true));
  t.phase = std::max(0, rd.choice(j, path, "phase", kPhases, true));
  t.category = std::max(0, rd.choice(j, path, "category", kCategories, true));
  rd.string(j, path, "label", t.label, false);
  int ignored = 0;
  rd.integer(j, path, "layer", ignored, false, -1);
  rd.integer(j, path, "microbatch", ignored, false, -1);
  rd.integer(j, path, "chunk", ignored, false, -1);
  rd.int_list(j, path, "deps", t.deps, false);
  double flops = 0;
  rd.amount(j, path, "flops", flops, false);
  rd.integer(j, path, "launches", t.launches, false, 0);
  rd.integer(j, path, "host_ops", t.host_ops, false, 0);
  rd.boolean(j, path, "host_sync", t.host_sync, false);
  if (kind < 0) return;
  t.kind = static_cast<Kind>(kind);
  const std::string kn = kKinds[static_cast<size_t>(kind)];
  for (const auto& other : kKinds)
    if (other != kn && bench::find(j, other))
      rd.error(Reader::join(path, other),
               "arguments of a " + other + " task given to a " + kn + " task");
  if (const Json* a = rd.find(j, path, kn, true)) read_args(rd, *a, Reader::join(path, kn), t);
}

// Rules across a rank's tasks (after they parsed): dense ids, deps, stream lists, groups,
// peers, alloc/free pairing.
void check_rank(Reader& rd, const Program& p, const SimRank& sr, const Json* streams,
                const std::string& path) {
  const int n = static_cast<int>(sr.tasks.size());
  auto where = [&](int i) {
    const Task& t = sr.tasks[static_cast<size_t>(i)];
    return path + "/tasks/" + std::to_string(i) + " ('" + t.label + "')";
  };
  std::map<std::string, std::vector<double>> live;  // alloc/free: bytes allocated per `what`
  for (int i = 0; i < n; ++i) {
    const Task& t = sr.tasks[static_cast<size_t>(i)];
    if (t.id != i)
      rd.error(where(i) + "/id", "task ids must be dense: expected " + std::to_string(i) +
                                     ", got " + std::to_string(t.id));
    for (int d : t.deps) {
      if (d < 0 || d >= n)
        rd.error(where(i) + "/deps", "task " + std::to_string(d) +
                                         " does not exist on this rank (" + std::to_string(n) +
                                         " tasks)");
      else if (d == i)
        rd.error(where(i) + "/deps", "a task cannot wait for itself");
    }
    if (t.kind == Kind::kCollective && t.group >= 0) {
      if (t.group >= static_cast<int>(p.groups.size())) {
        rd.error(where(i) + "/collective/group", "group " + std::to_string(t.group) +
                                                     " does not exist (" +
                                                     std::to_string(p.groups.size()) + " groups)");
      } else {
        bool member = false;
        for (int r : p.groups[static_cast<size_t>(t.group)].ranks) member = member || r == sr.rank;
        if (!member)
          rd.error(where(i) + "/collective/group", "rank " + std::to_string(sr.rank) +
                                                       " is not a member of group " +
                                                       std::to_string(t.group));
      }
    }
    if ((t.kind == Kind::kSend || t.kind == Kind::kRecv) && t.peer >= p.world_size)
      rd.error(where(i) + "/" + kind_name(t.kind) + "/peer",
               "rank " + std::to_string(t.peer) + " is outside the world (world_size " +
                   std::to_string(p.world_size) + ")");
    if (t.kind == Kind::kAlloc) live[t.what].push_back(t.bytes);
    if (t.kind == Kind::kFree) {
      auto it = live.find(t.what);
      if (it == live.end() || it->second.empty())
        rd.error(where(i) + "/free/what", "frees \"" + t.what + "\" with no alloc of it before");
      else
        it->second.pop_back();
    }
  }
  // "streams": each list must be the ids of that stream's tasks, ascending.
  if (!streams) return;
  const std::string sp = path + "/streams";
  if (!rd.object(*streams, sp, kStreams)) return;
  std::vector<std::vector<int>> want(kStreams.size());
  for (int i = 0; i < n; ++i)
    want[static_cast<size_t>(sr.tasks[static_cast<size_t>(i)].stream)].push_back(i);
  for (size_t s = 0; s < kStreams.size(); ++s) {
    std::vector<int> got;
    if (bench::find(*streams, kStreams[s])) rd.int_list(*streams, sp, kStreams[s], got, false);
    if (got != want[s])
      rd.error(sp + "/" + kStreams[s],
               "must list the ids of the " + std::to_string(want[s].size()) + " tasks on stream " +
                   kStreams[s] + " in ascending order (issue order is task order); lists " +
                   std::to_string(got.size()));
  }
}

// /groups: each group's id (dense), kind and member ranks (in the world, once each).
void read_groups(Reader& rd, const Json& doc, Program& p) {
  if (const Json* gs = rd.find(doc, "", "groups", true)) {
    if (!gs->is_array()) rd.error("/groups", "expected a list");
    for (size_t i = 0; gs->is_array() && i < gs->size(); ++i) {
      const std::string gp = "/groups/" + std::to_string(i);
      Group g;
      if (!rd.object((*gs)[i], gp, {"id", "kind", "ranks"})) continue;
      rd.integer((*gs)[i], gp, "id", g.id, true, 0);
      int k = rd.choice((*gs)[i], gp, "kind", kGroupKinds, true);
      if (k >= 0) g.kind = kGroupKinds[static_cast<size_t>(k)];
      rd.int_list((*gs)[i], gp, "ranks", g.ranks, true);
      if (g.id != static_cast<int>(i))
        rd.error(gp + "/id", "group ids must be dense: expected " + std::to_string(i));
      if (g.ranks.empty()) rd.error(gp + "/ranks", "a group needs at least one rank");
      std::set<int> seen;
      for (int r : g.ranks) {
        if (r < 0 || r >= p.world_size)
          rd.error(gp + "/ranks", "rank " + std::to_string(r) +
                                      " is outside the world (world_size " +
                                      std::to_string(p.world_size) + ")");
        if (!seen.insert(r).second)
          rd.error(gp + "/ranks", "rank " + std::to_string(r) + " listed twice");
      }
      p.groups.push_back(std::move(g));
    }
  }
}

// /ranks: each simulated rank and its tasks; `streams` gets each rank's "streams" object
// (nullptr when absent), checked once every rank has parsed (check_rank).
void read_ranks(Reader& rd, const Json& doc, Program& p, std::vector<const Json*>& streams) {
  if (const Json* rs = rd.find(doc, "", "ranks", true)) {
    if (!rs->is_array() || rs->empty()) rd.error("/ranks", "expected a non-empty list");
    for (size_t i = 0; rs->is_array() && i < rs->size(); ++i) {
      const std::string rp = "/ranks/" + std::to_string(i);
      const Json& rj = (*rs)[i];
      SimRank sr;
      streams.push_back(nullptr);
      if (!rd.object(rj, rp, {"rank", "pp_stage", "stands_for", "streams", "tasks"})) continue;
      rd.integer(rj, rp, "rank", sr.rank, true, 0);
      rd.integer(rj, rp, "pp_stage", sr.pp_stage, false, 0);
      rd.int_list(rj, rp, "stands_for", sr.stands_for, false);
      if (sr.stands_for.empty()) sr.stands_for = {sr.rank};
      streams.back() = rd.find(rj, rp, "streams", false);
      if (const Json* ts = rd.find(rj, rp, "tasks", true)) {
        if (!ts->is_array()) rd.error(rp + "/tasks", "expected a list");
        for (size_t t = 0; ts->is_array() && t < ts->size(); ++t) {
          Task task;
          read_task(rd, (*ts)[t], rp + "/tasks/" + std::to_string(t), task);
          sr.tasks.push_back(std::move(task));
        }
      }
      p.ranks.push_back(std::move(sr));
    }
  }
}

// Every global rank simulated exactly once; each simulated rank stands for itself.
void check_stands_for(Reader& rd, const Program& p) {
  std::vector<int> owner(static_cast<size_t>(p.world_size), -1);
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    const SimRank& sr = p.ranks[i];
    const std::string rp = "/ranks/" + std::to_string(i);
    bool self = false;
    for (int g : sr.stands_for) {
      self = self || g == sr.rank;
      if (g < 0 || g >= p.world_size) {
        rd.error(rp + "/stands_for", "rank " + std::to_string(g) +
                                         " is outside the world (world_size " +
                                         std::to_string(p.world_size) + ")");
      } else if (owner[static_cast<size_t>(g)] >= 0) {
        rd.error(rp + "/stands_for", "rank " + std::to_string(g) +
                                         " is already simulated by /ranks/" +
                                         std::to_string(owner[static_cast<size_t>(g)]));
      } else {
        owner[static_cast<size_t>(g)] = static_cast<int>(i);
      }
    }
    if (!self)
      rd.error(rp + "/stands_for",
               "must include the rank itself (" + std::to_string(sr.rank) + ")");
  }
  for (int g = 0; g < p.world_size; ++g)
    if (owner[static_cast<size_t>(g)] < 0 && rd.issues.size() < 50)
      rd.error("/ranks",
               "global rank " + std::to_string(g) + " is simulated by no rank (stands_for)");
  if (!p.folded && p.ranks.size() != static_cast<size_t>(p.world_size))
    rd.error("/folded", "false, but " + std::to_string(p.ranks.size()) + " ranks for world_size " +
                            std::to_string(p.world_size));
}

// A host_sync task (the host waits for its end before it issues anything more: a `.item()`,
// a torch.cuda.synchronize()) holds back every later kernel of its rank, as the simulator's
// host does (sim/engine/engine.cc advance_host: kernels wait for their issue; collectives,
// sends and receives and alloc/free do not). The executor states that as dependencies: the
// first later kernel on each other stream waits for the task (the later ones follow on
// their stream), so the GPU run and the --host backend order it so without the host
// blocking.
void add_host_sync_deps(std::vector<Task>& tasks) {
  int sync = -1;
  std::vector<char> waited(kStreams.size(), 0);
  for (Task& t : tasks) {
    const bool kernel =
        t.kind == Kind::kGemm || t.kind == Kind::kAttention || t.kind == Kind::kMemoryBound;
    const auto s = static_cast<size_t>(t.stream);
    if (kernel && sync >= 0 && t.stream != tasks[static_cast<size_t>(sync)].stream && !waited[s]) {
      if (std::find(t.deps.begin(), t.deps.end(), sync) == t.deps.end()) t.deps.push_back(sync);
      waited[s] = 1;
    }
    if (t.host_sync) {
      sync = t.id;
      std::fill(waited.begin(), waited.end(), 0);
    }
  }
}

}  // namespace

const char* kind_name(Kind k) { return kKinds[static_cast<size_t>(k)].c_str(); }

std::string task_where(const Program& p, int sim_rank_index, int task_id) {
  const SimRank& sr = p.ranks[static_cast<size_t>(sim_rank_index)];
  return "/ranks/" + std::to_string(sim_rank_index) + "/tasks/" + std::to_string(task_id) + " ('" +
         sr.tasks[static_cast<size_t>(task_id)].label + "', rank " + std::to_string(sr.rank) + ")";
}

Program parse_program(const std::string& text, const std::string& name) {
  Json doc;
  try {
    doc = bench::parse_json(text, name);
  } catch (const std::exception& e) {
    throw ProgramError(e.what());
  }
  Reader rd;
  Program p;
  p.file = name;
  if (!rd.object(
          doc, "",
          {"schema", "world_size", "folded", "scenario_name", "gpus_per_node", "groups", "ranks"}))
    throw ProgramError(name + ": expected a JSON object (a stepcast.program/1 document)");
  std::string schema;
  rd.string(doc, "", "schema", schema, true);
  if (!schema.empty() && schema != "stepcast.program/1")
    rd.error("/schema", "expected \"stepcast.program/1\", got \"" + schema + "\"");
  rd.integer(doc, "", "world_size", p.world_size, true, 1);
  rd.boolean(doc, "", "folded", p.folded, true);
  rd.string(doc, "", "scenario_name", p.scenario_name, false);
  rd.integer(doc, "", "gpus_per_node", p.gpus_per_node, false, 1);

  read_groups(rd, doc, p);

  std::vector<const Json*> streams;
  read_ranks(rd, doc, p, streams);
  if (rd.issues.empty()) check_stands_for(rd, p);
  if (rd.issues.empty())
    for (size_t i = 0; i < p.ranks.size(); ++i)
      check_rank(rd, p, p.ranks[i], streams[i], "/ranks/" + std::to_string(i));
  if (!rd.issues.empty()) {
    std::string msg = name + ": not a valid Program (" + std::to_string(rd.issues.size()) +
                      " problem" + (rd.issues.size() > 1 ? "s" : "") + "):";
    for (size_t i = 0; i < rd.issues.size() && i < 20; ++i) msg += "\n  " + rd.issues[i];
    if (rd.issues.size() > 20)
      msg += "\n  ... and " + std::to_string(rd.issues.size() - 20) + " more";
    throw ProgramError(msg);
  }
  for (SimRank& sr : p.ranks) add_host_sync_deps(sr.tasks);
  return p;
}

Program load_program(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ProgramError(path + ": cannot open the Program file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_program(ss.str(), path);
}

}  // namespace stepcast::exec
