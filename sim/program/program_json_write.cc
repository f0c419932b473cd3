// Writing the Program as JSON (program_json.h): program_to_json builds the document; the
// compact writer streams the same text without building it; save_program_json writes a file.
#include "sim/program/program_json.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {

using nlohmann::json;

namespace {

json compute_args(const Task& t) {
  return json{{"bytes_read", t.bytes_read}, {"bytes_written", t.bytes_written}};
}

// Group and peer as the rank sees them (program.h: shared task lists).
json task_to_json(const RankProgram& rp, const Task& t) {
  json j = {{"id", t.id},
            {"kind", task_kind_name(t.kind)},
            {"stream", stream_name(t.stream)},
            {"phase", phase_name(t.phase)},
            {"category", category_name(t.category)},
            {"label", t.label},
            {"layer", t.layer},
            {"microbatch", t.microbatch},
            {"chunk", t.chunk},
            {"deps", t.deps},
            {"flops", t.flops}};
  // The host side (Task::launches, host_sync): written only when not the default.
  if (t.launches != 1) j["launches"] = t.launches;
  if (t.host_ops != 0) j["host_ops"] = t.host_ops;
  if (t.host_sync) j["host_sync"] = true;
  json a;
  switch (t.kind) {
    case TaskKind::kGemm:
      a = compute_args(t);
      a["m"] = t.gemm.m;
      a["n"] = t.gemm.n;
      a["k"] = t.gemm.k;
      a["batch"] = t.gemm.batch;
      a["dtype"] = dtype_name(t.gemm.dtype);
      a["layout"] = gemm_layout_name(t.gemm.layout);
      break;
    case TaskKind::kAttention:
      a = compute_args(t);
      a["batch"] = t.attn.batch;
      a["heads"] = t.attn.heads;
      a["kv_heads"] = t.attn.kv_heads;
      a["seq_q"] = t.attn.seq_q;
      a["seq_kv"] = t.attn.seq_kv;
      a["head_dim"] = t.attn.head_dim;
      a["causal"] = t.attn.causal;
      a["pass"] = t.attn.backward ? "bwd" : "fwd";
      a["dtype"] = dtype_name(t.attn.dtype);
      break;
    case TaskKind::kMemoryBound:
      a = compute_args(t);
      a["what"] = t.what;
      break;
    case TaskKind::kCollective:
      a = {{"op", coll_op_name(t.coll)},
           {"group", rp.group_of(t)},
           {"bytes", t.bytes},
           {"dtype", dtype_name(t.dtype)}};
      if (t.ep_kernels) a["kernels"] = "deepep";
      break;
    case TaskKind::kSend:
    case TaskKind::kRecv: a = {{"peer", rp.peer_of(t)}, {"bytes", t.bytes}, {"tag", t.tag}}; break;
    case TaskKind::kAlloc:
    case TaskKind::kFree: a = {{"bytes", t.bytes}, {"what", t.what}}; break;
  }
  j[task_kind_name(t.kind)] = std::move(a);
  return j;
}

}  // namespace

json program_to_json(const Program& p) {
  json groups = json::array();
  for (const Group& g : p.groups)
    groups.push_back({{"id", g.id}, {"kind", group_kind_name(g.kind)}, {"ranks", g.ranks}});
  json ranks = json::array();
  for (const RankProgram& rp : p.ranks) {
    json streams = json::object();
    std::array<std::vector<int>, kStreamCount> ids;
    for (const Task& t : rp.tasks) ids[static_cast<size_t>(t.stream)].push_back(t.id);
    for (int s = 0; s < kStreamCount; ++s)
      if (!ids[static_cast<size_t>(s)].empty())
        streams[stream_name(static_cast<StreamKind>(s))] = ids[static_cast<size_t>(s)];
    json tasks = json::array();
    for (const Task& t : rp.tasks) tasks.push_back(task_to_json(rp, t));
    ranks.push_back({{"rank", rp.rank},
                     {"pp_stage", rp.pp_stage},
                     {"stands_for", rp.stands_for},
                     {"streams", std::move(streams)},
                     {"tasks", std::move(tasks)}});
  }
  return {{"schema", p.schema},
          {"world_size", p.world_size},
          {"folded", p.folded},
          {"scenario_name", p.scenario_name},
          {"gpus_per_node", p.gpus_per_node},
          {"groups", std::move(groups)},
          {"ranks", std::move(ranks)}};
}

namespace {

// ---- streaming compact writer -------------------------------------------------------------
// Writes exactly what program_to_json(p).dump() writes (keys in nlohmann's sorted order,
// numbers through nlohmann's own formatting) without building the document: a folded
// trillion-parameter plan has millions of tasks, and the DOM of one costs ~3 KB per task.
class CompactWriter {
 public:
  explicit CompactWriter(std::ostream& out) : out_(out) { buf_.reserve(kFlushAt + 4096); }
  ~CompactWriter() { flush(); }
  CompactWriter(const CompactWriter&) = delete;
  CompactWriter& operator=(const CompactWriter&) = delete;

  void str(std::string_view v) {
    bool plain = true;
    for (char c : v) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
        plain = false;
        break;
      }
    }
    if (plain) {
      buf_ += '"';
      buf_ += v;
      buf_ += '"';
    } else {
      buf_ += json(std::string(v)).dump();
    }
    maybe_flush();
  }
  void num(double v) { buf_ += json(v).dump(); }
  void num(std::int64_t v) { fmt::format_to(std::back_inserter(buf_), "{}", v); }
  void num(int v) { fmt::format_to(std::back_inserter(buf_), "{}", v); }
  void boolean(bool v) { buf_ += v ? "true" : "false"; }
  void value(std::string_view v) { str(v); }
  void value(const char* v) { str(v); }
  void value(const std::string& v) { str(v); }
  void value(double v) { num(v); }
  void value(std::int64_t v) { num(v); }
  void value(int v) { num(v); }
  void value(bool v) { boolean(v); }
  void value(const std::vector<int>& v) { ints(v); }
  template <typename V>
  void kv(std::string_view k, const V& v) {
    key(k);
    value(v);
  }
  void ints(const std::vector<int>& v) {
    buf_ += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) buf_ += ',';
      num(v[i]);
    }
    buf_ += ']';
    maybe_flush();
  }
  // "key": — with the comma before every key but the first of its object.
  void key(std::string_view k) {
    if (!first_) buf_ += ',';
    first_ = false;
    buf_ += '"';
    buf_ += k;
    buf_ += "\":";
  }
  void open() {
    buf_ += '{';
    first_ = true;
  }
  void close() {
    buf_ += '}';
    first_ = false;
  }
  void raw(char c) { buf_ += c; }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  static constexpr size_t kFlushAt = size_t{1} << 20;
  void maybe_flush() {
    if (buf_.size() >= kFlushAt) flush();
  }
  std::ostream& out_;
  std::string buf_;
  bool first_ = true;
};

// The kind's argument object, keys sorted as nlohmann sorts them.
void write_args(CompactWriter& w, const RankProgram& rp, const Task& t) {
  w.open();
  switch (t.kind) {
    case TaskKind::kGemm:
      w.kv("batch", t.gemm.batch);
      w.kv("bytes_read", t.bytes_read);
      w.kv("bytes_written", t.bytes_written);
      w.kv("dtype", dtype_name(t.gemm.dtype));
      w.kv("k", t.gemm.k);
      w.kv("layout", gemm_layout_name(t.gemm.layout));
      w.kv("m", t.gemm.m);
      w.kv("n", t.gemm.n);
      break;
    case TaskKind::kAttention:
      w.kv("batch", t.attn.batch);
      w.kv("bytes_read", t.bytes_read);
      w.kv("bytes_written", t.bytes_written);
      w.kv("causal", t.attn.causal);
      w.kv("dtype", dtype_name(t.attn.dtype));
      w.kv("head_dim", t.attn.head_dim);
      w.kv("heads", t.attn.heads);
      w.kv("kv_heads", t.attn.kv_heads);
      w.kv("pass", t.attn.backward ? "bwd" : "fwd");
      w.kv("seq_kv", t.attn.seq_kv);
      w.kv("seq_q", t.attn.seq_q);
      break;
    case TaskKind::kMemoryBound:
      w.kv("bytes_read", t.bytes_read);
      w.kv("bytes_written", t.bytes_written);
      w.kv("what", t.what);
      break;
    case TaskKind::kCollective:
      w.kv("bytes", t.bytes);
      w.kv("dtype", dtype_name(t.dtype));
      w.kv("group", rp.group_of(t));
      if (t.ep_kernels) w.kv("kernels", "deepep");
      w.kv("op", coll_op_name(t.coll));
      break;
    case TaskKind::kSend:
    case TaskKind::kRecv:
      w.kv("bytes", t.bytes);
      w.kv("peer", rp.peer_of(t));
      w.kv("tag", t.tag);
      break;
    case TaskKind::kAlloc:
    case TaskKind::kFree:
      w.kv("bytes", t.bytes);
      w.kv("what", t.what);
      break;
  }
  w.close();
}

void write_task(CompactWriter& w, const RankProgram& rp, const Task& t) {
  // The fixed keys in sorted order; the kind's argument object goes where its name sorts.
  static constexpr std::array<std::string_view, 11> kKeys = {
      "category", "chunk", "deps",       "flops", "id",    "kind",
      "label",    "layer", "microbatch", "phase", "stream"};
  const std::string_view args = task_kind_name(t.kind);
  const size_t args_at =
      static_cast<size_t>(std::lower_bound(kKeys.begin(), kKeys.end(), args) - kKeys.begin());
  w.open();
  for (size_t i = 0; i <= kKeys.size(); ++i) {
    if (i == args_at) {
      w.key(args);
      write_args(w, rp, t);
    }
    switch (i) {
      case 0: w.kv(kKeys[i], category_name(t.category)); break;
      case 1: w.kv(kKeys[i], t.chunk); break;
      case 2: w.kv(kKeys[i], t.deps); break;
      case 3: w.kv(kKeys[i], t.flops); break;
      case 4:
        if (t.host_ops != 0) w.kv("host_ops", t.host_ops);  // sorts before "host_sync"
        if (t.host_sync) w.kv("host_sync", true);           // sorts before "id", after the args
        w.kv(kKeys[i], t.id);
        break;
      case 5: w.kv(kKeys[i], args); break;
      case 6: w.kv(kKeys[i], t.label); break;
      case 7:
        if (t.launches != 1) w.kv("launches", t.launches);  // sorts before "layer"
        w.kv(kKeys[i], t.layer);
        break;
      case 8: w.kv(kKeys[i], t.microbatch); break;
      case 9: w.kv(kKeys[i], phase_name(t.phase)); break;
      case 10: w.kv(kKeys[i], stream_name(t.stream)); break;
      default: break;
    }
  }
  w.close();
}

}  // namespace

void write_program_json(const Program& p, std::ostream& out) {
  CompactWriter w(out);
  w.open();
  w.kv("folded", p.folded);
  w.kv("gpus_per_node", p.gpus_per_node);
  w.key("groups");
  w.raw('[');
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const Group& g = p.groups[i];
    if (i) w.raw(',');
    w.open();
    w.kv("id", g.id);
    w.kv("kind", group_kind_name(g.kind));
    w.kv("ranks", g.ranks);
    w.close();
  }
  w.raw(']');
  w.key("ranks");
  w.raw('[');
  // Stream names in sorted order with their stream index.
  std::vector<std::pair<std::string_view, int>> streams;
  for (int s = 0; s < kStreamCount; ++s)
    streams.emplace_back(stream_name(static_cast<StreamKind>(s)), s);
  std::sort(streams.begin(), streams.end());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankProgram& rp = p.ranks[r];
    if (r) w.raw(',');
    w.open();
    w.kv("pp_stage", rp.pp_stage);
    w.kv("rank", rp.rank);
    w.kv("stands_for", rp.stands_for);
    std::array<std::vector<int>, kStreamCount> ids;
    for (const Task& t : rp.tasks) ids[static_cast<size_t>(t.stream)].push_back(t.id);
    w.key("streams");
    w.open();
    for (const auto& [name, s] : streams)
      if (!ids[static_cast<size_t>(s)].empty()) w.kv(name, ids[static_cast<size_t>(s)]);
    w.close();
    w.key("tasks");
    w.raw('[');
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      if (i) w.raw(',');
      write_task(w, rp, rp.tasks[i]);
    }
    w.raw(']');
    w.close();
  }
  w.raw(']');
  w.kv("scenario_name", p.scenario_name);
  w.kv("schema", p.schema);
  w.kv("world_size", p.world_size);
  w.close();
}

std::string write_program_json(const Program& p, int indent) {
  if (indent < 0) {
    std::ostringstream out;
    write_program_json(p, out);
    out << '\n';
    return out.str();
  }
  return program_to_json(p).dump(indent) + "\n";
}

void save_program_json(const Program& p, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw InputError(InputIssue{path, 0, 0, "", "cannot open for writing"});
  out << write_program_json(p);
  if (!out) throw InputError(InputIssue{path, 0, 0, "", "write failed"});
}

}  // namespace stepcast
