// What the executor runs, worked out on the host before any GPU is touched (no CUDA here):
//  - expansion: a folded Program's simulated rank R runs for every global rank a it
//    stands for, with R's tasks. a's collective on R's group g uses g itself when a is a
//    member (e.g. tp ranks folded together), else the listed group of g's kind that
//    contains a; a send/recv of R to peer P (simulated by Q, P at R's position in Q's stands_for)
//    goes to the rank at a's position in Q's stands_for (the lowering lists stands_for in the same
//    order on every stage). A folded Program lists only the groups of its simulated ranks, so a
//    rank whose group is not listed (e.g. the dp group of tp rank 1 when tp and dp are folded
//    together) cannot be expanded: ProgramError, lower it with
//    --fidelity full (the symmetry that folding assumes is not in the Program);
//  - matching, on the expanded world (the simulator's rules, sim/program/matching.h): the
//    k-th collective naming group g on each member meet, with equal op and bytes; the k-th
//    send a->b with tag t meets the k-th recv b<-a with tag t, with equal bytes;
//  - issue order: one global order in which the host enqueues every task so that nothing
//    can wait for something enqueued later — a task goes when it heads its stream and its
//    deps are enqueued; a collective or send/recv pair goes when every member heads its
//    stream, all members in one NCCL group call. If tasks remain and none can go, the
//    Program would deadlock on the GPUs: ProgramError naming each stuck stream head and what
//    it waits for;
//  - placement: global rank -> (process, CUDA device); a Program with more ranks than GPUs
//    is refused. Under MPI, process r is rank r and sits on node r / gpus_per_node, device
//    r % gpus_per_node (Megatron's rank order: a tensor-parallel group inside a node); a
//    launcher that placed processes otherwise (mpirun --map-by node) is refused, since the
//    Program's tp/cp/ep groups would cross the network the simulator did not charge;
//  - simulated mode (PlanMode::kSimulated, the --host backend): the Program's simulated ranks
//    run as they are, matched as the engine matches them (sim/program/matching.h): a group's
//    participants are the distinct simulated ranks standing for its members, a send to
//    global rank P meets a recv on the simulated rank standing for P (possibly the same
//    rank, on another stream). For a full-fidelity Program both modes are the same.
#pragma once

#include <string>
#include <vector>

#include "program.h"

namespace stepcast::exec {

struct RankTask {
  int rank = 0;  // global rank
  int task = 0;  // task id (of the simulated rank's list)
};

enum class PlanMode {
  kExpanded,   // every global rank (a folded Program expanded): what runs on GPUs
  kSimulated,  // the Program's simulated ranks, as the engine runs them (--host)
};

struct ExecRank {
  int rank = 0;  // index in Plan::ranks: the global rank (expanded) or simulated index
  int sim = 0;   // index into Program::ranks whose tasks it runs
  int pp_stage = 0;
  int process = 0;         // MPI process (0 without MPI)
  int device = -1;         // CUDA device within its process (-1: not placed)
  std::vector<int> group;  // per task: the group its collective uses here (-1: none)
  std::vector<int> peer;   // per task: the peer its send/recv names here (-1: none)
};

// A directed pair (send rank -> recv rank) with send/recv traffic: one communicator each,
// so that a rank's pp_send and pp_recv streams (or a ring's two directions) do not meet on
// one communicator, which NCCL would serialise.
struct P2pPair {
  int src = 0, dst = 0;
};

struct Rendezvous {
  int group = -1;                 // collectives: the group; send/recv: -1
  int pair = -1;                  // send/recv: index into Plan::pairs
  std::vector<RankTask> members;  // send/recv: {send, recv}
};

struct IssueStep {
  int rendezvous = -1;          // -1: one local task
  std::vector<RankTask> tasks;  // enqueued together (one NCCL group call when a rendezvous)
};

struct Plan {
  const Program* program = nullptr;
  PlanMode mode = PlanMode::kExpanded;
  std::vector<ExecRank> ranks;  // indexed by global rank (expanded) or simulated index
  std::vector<std::vector<int>> group_members;  // per group: its members as Plan ranks
  std::vector<P2pPair> pairs;                   // directed pairs with send/recv traffic
  std::vector<Rendezvous> rendezvous;
  std::vector<std::vector<int>> instance;  // [global rank][task]: rendezvous index or -1
  std::vector<IssueStep> steps;            // the issue order
  std::vector<int> collectives_per_group;  // per group: collectives each member issues

  const Task& task(const RankTask& rt) const {
    return program->ranks[static_cast<size_t>(ranks[static_cast<size_t>(rt.rank)].sim)]
        .tasks[static_cast<size_t>(rt.task)];
  }
  const std::vector<Task>& tasks_of(int rank) const {
    return program->ranks[static_cast<size_t>(ranks[static_cast<size_t>(rank)].sim)].tasks;
  }
  int world_size() const { return static_cast<int>(ranks.size()); }
};

// Expands (or not: PlanMode), matches and orders (header). `p` must outlive the plan. Throws
// ProgramError.
Plan make_plan(const Program& p, PlanMode mode = PlanMode::kExpanded);

// One process drives `gpus` local GPUs (the ncclCommInitAll path): rank r on device r.
// ProgramError when world_size > gpus.
void place_single_process(Plan& plan, int gpus);
// One process per GPU (MPI): rank r in process r, on device r % gpus_per_node of node
// r / gpus_per_node (header). `node_rank` / `node_size`: the calling process's rank among
// the processes of its node and their number (MPI_COMM_TYPE_SHARED); `gpus`: GPUs it sees.
// Places the calling process's rank only (the others stay -1). ProgramError when processes
// != world_size, when the launcher's placement is not the Program's (node_rank !=
// this_process % gpus_per_node, or more processes on the node than gpus_per_node), or when
// the node has fewer GPUs than gpus_per_node.
void place_one_per_process(Plan& plan, int processes, int this_process, int node_rank,
                           int node_size, int gpus);

// What would run (--dry-run): ranks and their devices, streams and task counts, tasks per
// kind, communicators, rendezvous and issue steps.
std::string describe(const Plan& plan);

}  // namespace stepcast::exec
