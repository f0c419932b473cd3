// The Program: the lowered plan both the engine and the GPU executor consume (docs/model.md,
// "The Program"). Plain data: per simulated rank, tasks with real shapes and sizes, each on a
// stream, in issue order, with same-rank dependencies; cross-rank order comes from matched
// send/recv tags and from collectives over named groups.
//
// Task ids are dense per rank (tasks[i].id == i). A task's deps are ids on the same rank.
// Folded programs hold one simulated rank per class of symmetric ranks; `stands_for` lists
// the global ranks each represents, and groups always list their full global membership.
//
// Shared task lists: ranks that run the same program up to the groups their collectives
// name and the peers their sends/recvs name (the symmetric ranks of a full-fidelity
// program: same pipeline stage, different tp / dp coordinates) share one TaskList
// (copy-on-write storage). A task's `group` and `peer` are then those of the rank that
// built the list; RankProgram::group_of / peer_of give the rank's own, through its small
// remap tables. Everything that reads a group or a peer goes through them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/busbw.h"
#include "model/huge_alloc.h"
#include "model/workload.h"

namespace stepcast {

inline constexpr const char* kProgramSchema = "stepcast.program/1";

// kCpRecv: ring attention's KV receives, apart from its sends (on kCp) as pp_send/pp_recv are:
// every cp rank sends before it receives, so one stream for both would wait in a cycle.
// kTpRing: Transformer Engine's ring exchange (userbuffers), the tensor-parallel all-gather
// overlapped with its GEMM: its own streams in TE, apart from NCCL's, and moved by copy
// engines, so it holds no SMs (sim/cost/coster.h comm_sms).
enum class StreamKind : std::uint8_t {
  kCompute,
  kTp,
  kCp,
  kEp,
  kPpSend,
  kPpRecv,
  kDp,
  kCpRecv,
  kTpRing,
  kCount
};
inline constexpr int kStreamCount = static_cast<int>(StreamKind::kCount);
// "compute", "tp", "cp", "ep", "pp_send", "pp_recv", "dp", "cp_recv", "tp_ring"
const char* stream_name(StreamKind s);

enum class TaskKind : std::uint8_t {
  kGemm,
  kAttention,
  kMemoryBound,
  kCollective,
  kSend,
  kRecv,
  kAlloc,
  kFree
};
inline constexpr int kTaskKindCount = static_cast<int>(TaskKind::kFree) + 1;
const char* task_kind_name(TaskKind k);

enum class Phase : std::uint8_t { kFwd, kBwdInput, kBwdWeight, kRecompute, kOptimizer, kOther };
inline constexpr int kPhaseCount = static_cast<int>(Phase::kOther) + 1;
const char* phase_name(
    Phase p);  // "fwd", "bwd_input", "bwd_weight", "recompute", "optimizer", "other"

// What a task's time counts as in the breakdown (docs/usage.md: breakdown_s).
enum class Category : std::uint8_t {
  kCompute,
  kRecompute,
  kTpComm,
  kCpComm,
  kEpComm,
  kPpComm,
  kDpComm,
  kOptimizer,
  kCount
};
inline constexpr int kCategoryCount = static_cast<int>(Category::kCount);
const char* category_name(Category c);  // "compute", "recompute", "tp_comm", ...

enum class CollOp : std::uint8_t { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast };
inline constexpr int kCollOpCount = static_cast<int>(CollOp::kBroadcast) + 1;
const char* coll_op_name(CollOp op);
// The bus-bandwidth op of a collective (model/busbw.h): the enumerators correspond.
constexpr BusOp bus_op_of(CollOp op) { return static_cast<BusOp>(op); }
static_assert(static_cast<int>(BusOp::kAllReduce) == static_cast<int>(CollOp::kAllReduce) &&
              static_cast<int>(BusOp::kReduceScatter) == static_cast<int>(CollOp::kReduceScatter) &&
              static_cast<int>(BusOp::kAllGather) == static_cast<int>(CollOp::kAllGather) &&
              static_cast<int>(BusOp::kAllToAll) == static_cast<int>(CollOp::kAllToAll) &&
              static_cast<int>(BusOp::kBroadcast) ==
                  static_cast<int>(CollOp::kBroadcast));  // "allreduce", "reduce_scatter",
                                                          // "allgather", "all_to_all", "broadcast"

enum class GroupKind : std::uint8_t { kTp, kCp, kEp, kPp, kDp, kDpCp, kEdp, kWorld };
inline constexpr int kGroupKindCount = static_cast<int>(GroupKind::kWorld) + 1;
const char* group_kind_name(GroupKind k);

struct Group {
  int id = 0;
  GroupKind kind = GroupKind::kDp;
  std::vector<int> ranks;  // global ranks, in ring order
};

struct Task {
  int id = 0;
  TaskKind kind = TaskKind::kMemoryBound;
  StreamKind stream = StreamKind::kCompute;
  Phase phase = Phase::kFwd;
  Category category = Category::kCompute;
  int layer = -1;       // global layer index, -1 when none
  int microbatch = -1;  // -1 when none
  int chunk = -1;       // virtual pipeline chunk, -1 when none
  std::string label;    // "fwd.L12.attn.mb3"

  // kGemm / kAttention / kMemoryBound
  GemmShape gemm;
  AttentionShape attn;
  double flops = 0;
  double bytes_read = 0, bytes_written = 0;
  // kCollective
  CollOp coll = CollOp::kAllReduce;
  int group = -1;  // index into Program::groups
  // An all-to-all run by the MoE dispatcher's own kernels (DeepEP's fused dispatch and
  // combine), not by NCCL: costed at the NICs' ring rate (sim/cost/collective.cc).
  bool ep_kernels = false;
  // The host side, beside launches and host_sync below (here where the layout has room, so
  // that a Task stays as large as it was): host-side framework operations the task stands
  // for besides its launches, each costing the stack's host time per op
  // (FrameworkRules::host_op_us) and launching nothing, as the Python loop of a stack that
  // builds one tensor view per rank before a collective.
  int host_ops = 0;
  // kCollective (buffer bytes per rank as nccl-tests counts S), kSend/kRecv, kAlloc/kFree
  double bytes = 0;
  DType dtype = DType::kBf16;
  // kSend / kRecv
  int peer = -1;         // global rank
  std::int64_t tag = 0;  // matches one send with one recv
  // kAlloc / kFree: `bytes` and what it is ("weights", "grads", "optimizer", "act.L3.mb1")
  std::string what;

  std::vector<int> deps;  // same-rank task ids that must finish first

  // The host side (docs/model.md, "The host"): the kernel launches the host issues for this
  // task (one per kernel: a grouped GEMM launches one per expert; 0 for alloc/free), each
  // costing the stack's host launch time before the task may start; and whether the host
  // waits for the task to finish before it issues the next one (a `.item()`, a
  // `torch.cuda.synchronize()`, a device-to-host copy of sizes the next kernels need).
  int launches = 1;
  bool host_sync = false;
};

// A rank's tasks in issue order: a vector whose storage is shared between copies and
// copied on the first write (mut / push_back / ...). Reading never copies: element access
// and iteration are const; writes go through the named mutators.
class TaskList {
 public:
  using Storage = HugeVector<Task>;  // large lists (>= 4 MB) on huge pages (model/huge_alloc.h)
  using const_iterator = Storage::const_iterator;

  std::size_t size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Task& operator[](std::size_t i) const { return (*v_)[i]; }
  const Task& front() const { return v_->front(); }
  const Task& back() const { return v_->back(); }
  const_iterator begin() const { return v_ ? v_->cbegin() : empty_().cbegin(); }
  const_iterator end() const { return v_ ? v_->cend() : empty_().cend(); }

  Task& mut(std::size_t i) { return own()[i]; }
  void push_back(Task t) { own().push_back(std::move(t)); }
  void reserve(std::size_t n) { own().reserve(n); }
  void clear() { v_.reset(); }
  void resize(std::size_t n) { own().resize(n); }

  // True when both lists use one storage (a copy not written to since).
  bool shares_storage_with(const TaskList& o) const { return v_ && v_ == o.v_; }

 private:
  Storage& own() {
    if (!v_) {
      v_ = std::make_shared<Storage>();
    } else if (v_.use_count() > 1) {
      v_ = std::make_shared<Storage>(*v_);
    }
    return *v_;
  }
  static const Storage& empty_() {
    static const Storage e;
    return e;
  }
  std::shared_ptr<Storage> v_;
};

struct RankProgram {
  int rank = 0;                 // global rank simulated
  int pp_stage = 0;             // pipeline stage of this rank
  std::vector<int> stands_for;  // global ranks it represents (includes `rank`)
  TaskList tasks;
  // For a task list shared with other ranks (header): (group in the list, this rank's
  // group) and (peer in the list, this rank's peer), sorted by the first; a value not
  // listed stays as it is.
  std::vector<std::pair<int, int>> group_remap, peer_remap;

  int group_of(const Task& t) const { return remap(group_remap, t.group); }
  int peer_of(const Task& t) const { return remap(peer_remap, t.peer); }
  int group_of_id(int list_group) const { return remap(group_remap, list_group); }
  int peer_of_id(int list_peer) const { return remap(peer_remap, list_peer); }

 private:
  static int remap(const std::vector<std::pair<int, int>>& m, int v) {
    for (const auto& [from, to] : m)
      if (from == v) return to;
    return v;
  }
};

struct Program {
  std::string schema = kProgramSchema;
  int world_size = 0;
  bool folded = true;
  std::vector<Group> groups;
  std::vector<RankProgram> ranks;
  // Context for reports (not needed to execute).
  std::string scenario_name;
  int gpus_per_node = 8;
};

// The groups its collectives name and the peers its sends/recvs name, as listed in a task
// list (before any rank's remap), each once, ascending.
struct ListNames {
  std::vector<int> groups, peers;
};
ListNames names_used(const TaskList& tasks);

// Adds a task to a rank, setting its id; returns the id.
int add_task(RankProgram& rp, Task t);

// The training state a rank allocates for the whole step (weights, gradients, optimizer
// state), by the `what` of its kAlloc tasks; lowering allocates it, reports bound by it.
inline constexpr std::array<const char*, 3> kTrainingStateWhat = {"weights", "grads", "optimizer"};
bool is_training_state_alloc(const Task& t);

// A lower bound on each rank's peak memory in any simulation of the program, from the
// program alone (no costs, no timing), indexed like p.ranks: the most that the compute
// stream's own allocations hold when one of its kernels (gemm, attention, memory-bound)
// starts. The stream runs its tasks in program order and allocs/frees take no time while a
// kernel does, so at that kernel's start the rank holds at least its earlier compute-stream
// allocations minus their frees; memory allocated or freed on another stream (ZeRO-3's
// gathered parameters, ZeRO-2/3's unsharded gradients freed behind their reduce-scatter) is
// left out with its frees and allocations, since it only adds while held. The search uses it to
// skip plans that cannot fit without simulating them.
std::vector<double> memory_floor_bytes(const Program& p);
// The same for one rank's program.
double memory_floor_bytes(const RankProgram& rp);

// Structural checks: dense ids, deps in range and acyclic (Boost.Graph; a cycle is reported
// naming the tasks on it), every send has its recv with equal bytes, every collective's group
// exists, allocs and frees balance per `what`. Throws InvariantError with a clear message.
void validate_program(const Program& p);

}  // namespace stepcast
