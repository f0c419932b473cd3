// The Program as the reference executor reads it (docs/model.md, "The Program";
// sim/program/program_json.h is the writer and the authority on the schema
// "stepcast.program/1"). Host-only: parsed with calibrate/bench/json_io (nlohmann::json,
// header-only, keys in document order), and checked strictly — an unknown key, a missing key,
// a wrong type, a value outside its set, non-dense task ids, a dependency out of range, a
// stream list that is not the ids of that stream's tasks in order, a collective naming a
// group it is not in, a peer outside the world, a free with no alloc before it: every
// problem is listed at once, each naming the JSON pointer of the task and key, in one
// ProgramError (exit code 2).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::exec {

// A bad Program (or one that cannot run here): main() prints it and exits 2.
class ProgramError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind { kGemm, kAttention, kMemoryBound, kCollective, kSend, kRecv, kAlloc, kFree };
const char* kind_name(Kind k);  // the schema's names: "gemm", "attention", ...
inline constexpr int kKindCount = 8;

// The schema's stream names in the simulator's order (program.h StreamKind): the breakdown
// attributes an instant to the first busy stream in this order.
// compute, tp, cp, ep, pp_send, pp_recv, dp, cp_recv, tp_ring (sim StreamKind order)
extern const std::vector<std::string> kStreams;
extern const std::vector<std::string> kCategories;  // compute, recompute, tp_comm, ..., optimizer
extern const std::vector<std::string> kPhases;      // fwd, bwd_input, bwd_weight, ...
extern const std::vector<std::string> kCollOps;     // allreduce, reduce_scatter, ...

struct Task {
  int id = 0;
  Kind kind = Kind::kMemoryBound;
  int stream = 0;    // index into kStreams
  int phase = 0;     // index into kPhases
  int category = 0;  // index into kCategories
  std::string label;
  std::vector<int> deps;  // same-rank task ids
  // gemm: C[m,n] = A[m,k] B[k,n], `batch` of them
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string dtype = "bf16";  // gemm, attention, collective: bf16|fp16|fp8|fp32
  std::string layout = "NN";   // gemm: NN|NT|TN|TT
  // attention (heads on this rank)
  std::int64_t heads = 0, kv_heads = 0, seq_q = 0, seq_kv = 0, head_dim = 0;
  bool causal = false, backward = false;
  // gemm, attention, memory_bound: bytes moved to/from HBM per rank
  double bytes_read = 0, bytes_written = 0;
  // collective
  int op = 0;      // index into kCollOps
  int group = -1;  // index into Program::groups (as the simulated rank sees it)
  // collective (buffer S as nccl-tests counts it), send/recv, alloc/free
  double bytes = 0;
  // send/recv
  int peer = -1;  // global rank (as the simulated rank sees it)
  std::int64_t tag = 0;
  // memory_bound, alloc/free
  std::string what;
  // The host side as the simulator predicts it (docs/model.md, "The host"): kernel launches
  // the task stands for, and whether the host waits for it. The launches are read and kept
  // (the GPU run's host costs what it costs); a host_sync task holds back the rank's later
  // kernels, which parse_program states as dependencies (program.cc add_host_sync_deps).
  int launches = 1;
  int host_ops = 0;  // host-side framework ops (sim/program/program.h), read and kept
  bool host_sync = false;
};

struct Group {
  int id = 0;
  std::string kind;        // tp, cp, ep, pp, dp, dp_cp, edp, world
  std::vector<int> ranks;  // global ranks, in ring order
};

struct SimRank {
  int rank = 0;
  int pp_stage = 0;
  std::vector<int> stands_for;  // global ranks it represents (includes `rank`)
  std::vector<Task> tasks;      // tasks[i].id == i; issue order per stream = id order
};

struct Program {
  std::string file;  // where it was read from (messages)
  int world_size = 0;
  bool folded = false;
  std::string scenario_name;
  int gpus_per_node = 8;
  std::vector<Group> groups;
  std::vector<SimRank> ranks;
};

// "/ranks/0/tasks/17 ('fwd.L0.qkv.mb0')": how messages name a task.
std::string task_where(const Program& p, int sim_rank_index, int task_id);

// `name` labels messages. Throws ProgramError listing every problem.
Program parse_program(const std::string& text, const std::string& name);
Program load_program(const std::string& path);

}  // namespace stepcast::exec
