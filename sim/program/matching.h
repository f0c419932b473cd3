// Cross-rank matching of a Program's group operations, shared by validate_program and the
// engine (and anything else that needs to know which tasks meet which).
//
// Rules (program.h, docs/model.md "The Program"):
//  - A global rank is simulated by the simulated rank whose `stands_for` lists it (an empty
//    `stands_for` means just `rank`). Folding maps many global ranks onto one simulated rank.
//  - Collectives: the participants of group g are the distinct simulated ranks standing for
//    its members. The k-th collective naming g (in task-id order) on each participant forms
//    one rendezvous. Every participant must issue the same number of collectives on g.
//  - Send/recv: a send on simulated rank s to global peer P meets the recv on simulated rank
//    d = sim(P) whose peer maps back to s and whose tag is equal; the k-th such send (in
//    task-id order) meets the k-th such recv. s == d is allowed (folded ring exchange), as
//    long as they are on different streams. Bytes must be equal.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/huge_alloc.h"
#include "sim/program/program.h"

namespace stepcast {

struct RendezvousMatching {
  std::vector<int> sim_of_global;  // global rank -> simulated rank index, -1 if none
  // Rendezvous instances in CSR form: members of instance i are
  // members[offsets[i] .. offsets[i+1]) as (simulated rank index, task id). Collective
  // instances come first, then send/recv pairs (send member first).
  std::vector<int> offsets{0};
  std::vector<std::pair<int, int>> members;
  // Instance of task `id` on rank index r: instance_of[task_offset[r] + id], -1 for tasks
  // that meet no one (flat, one entry per task of the program).
  std::vector<int> task_offset;
  HugeVector<int> instance_of;
  std::vector<std::string> problems;  // empty when everything matched

  int instance_count() const { return static_cast<int>(offsets.size()) - 1; }
  int instance(int rank_index, int task_id) const {
    return instance_of[static_cast<size_t>(task_offset[static_cast<size_t>(rank_index)] + task_id)];
  }
};

// Needs dense ids (tasks[i].id == i); never throws for matching problems, it lists them.
// O(tasks + sends log sends).
RendezvousMatching match_rendezvous(const Program& p);
// Same, refilling `out` and reusing its capacity (the engine calls this once per run).
void match_rendezvous(const Program& p, RendezvousMatching& out);

// "'fwd.L3.qkv.mb0' (rank 8 task 17)": how messages name a task.
std::string task_ref(const RankProgram& rp, int id);

}  // namespace stepcast
