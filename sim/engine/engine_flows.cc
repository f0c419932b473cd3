// Flow mode of the Engine (engine.h, EngineOptions::flow): each rendezvous that moves bytes
// over links becomes a transfer — its flows routed by sim/network/routing.h, timed alone to
// scale its bytes, its folded copies charged — started on the network model once its
// latency is paid.
#include "sim/engine/engine_internal.h"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/network/routing.h"
#include "sim/network/topology.h"

namespace stepcast::engine_detail {

// Flow mode: one flow set per distinct (collective op, group, bytes) or (src, dst, bytes),
// with its time alone on the topology; per instance, alpha and the bytes scale.
void Engine::build_flows() {
  STEPCAST_CHECK(flow_->topology != nullptr && flow_->latency_ns != nullptr,
                 "flow mode needs a topology and per-task latencies");
  const Topology& topo = *flow_->topology;
  const Durations& lat = *flow_->latency_ns;
  STEPCAST_CHECK(lat.size() == program_->ranks.size(), "flow mode: latencies per rank missing");
  for (size_t r = 0; r < lat.size(); ++r)
    STEPCAST_CHECK(
        lat[r].size() == program_->ranks[r].tasks.size(),
        fmt::format("flow mode: rank {} has {} latencies for {} tasks", program_->ranks[r].rank,
                    lat[r].size(), program_->ranks[r].tasks.size()));
  STEPCAST_CHECK(program_->world_size <= topo.gpus(),
                 fmt::format("flow mode: program has {} ranks, topology {} GPUs",
                             program_->world_size, topo.gpus()));
  net_.reset(topo);
  alone_solver_ = MaxMinSolver((flow_->nominal != nullptr ? *flow_->nominal : topo).capacities());
  flow_sets_.clear();
  transfer_inst_.clear();
  std::map<std::tuple<int, int, int, double>, std::int32_t> key_to_set;
  std::vector<TransferCopies> set_copies;  // per flow set: what its folded copies need
  const int ninst = match_.instance_count();
  inst_flow_set_.assign(static_cast<size_t>(ninst), -1);
  inst_alpha_.assign(static_cast<size_t>(ninst), 0);
  inst_scale_.assign(static_cast<size_t>(ninst), 0.0);
  for (int i = 0; i < ninst; ++i) {
    const auto ui = static_cast<size_t>(i);
    const int b = match_.offsets[ui], e = match_.offsets[ui + 1];
    // The task that defines the transfer: the collective of any member, or the send.
    std::uint32_t lead = inst_member_[static_cast<size_t>(b)];
    TimeNs alpha = 0;
    for (int k = b; k < e; ++k) {
      const std::uint32_t g = inst_member_[static_cast<size_t>(k)];
      const auto r = static_cast<size_t>(rank_of_[g]);
      const auto id = static_cast<size_t>(g - rank_offset_[r]);
      alpha = std::max(alpha, lat[r][id]);
      if (program_->ranks[r].tasks[id].kind == TaskKind::kSend) lead = g;
    }
    const TimeNs total = inst_dur_[ui];
    alpha = std::clamp<TimeNs>(alpha, 0, total);
    const TimeNs bw_ns = total - alpha;
    if (bw_ns <= 0) continue;  // latency only: nothing to share
    const auto lr = static_cast<size_t>(rank_of_[lead]);
    const RankProgram& rp = program_->ranks[lr];
    const Task& t = rp.tasks[lead - rank_offset_[lr]];
    std::tuple<int, int, int, double> key;
    if (t.kind == TaskKind::kCollective) {
      key = {0, rp.group_of(t), static_cast<int>(t.coll), t.bytes};
    } else if (t.kind == TaskKind::kSend) {
      key = {1, rp.rank, rp.peer_of(t), t.bytes};
    } else {
      continue;  // a rendezvous of non-communication tasks: not a transfer
    }
    auto it = key_to_set.find(key);
    if (it == key_to_set.end()) {
      FlowSet fs;
      // The transfer: a collective over its group's full global membership, or the send.
      Transfer x{t.kind, t.coll, {}, t.bytes};
      if (t.kind == TaskKind::kCollective)
        x.members = program_->groups[static_cast<size_t>(rp.group_of(t))].ranks;
      else
        x.members = {rp.rank, rp.peer_of(t)};
      fs.flows = transfer_flows(x, topo, flow_->pxn);
      bool moves = false;
      for (const FlowSpec& f : fs.flows) moves = moves || (f.bytes > 0 && !f.links.empty());
      // Alone means one copy; the copies join in below.
      fs.alone_s = moves ? simulate_flows_s(fs.flows, alone_solver_) : 0.0;
      const std::int32_t id = fs.alone_s > 0 ? static_cast<std::int32_t>(flow_sets_.size()) : -1;
      if (id >= 0) {
        flow_sets_.push_back(std::move(fs));
        std::vector<int> offsets = fold_offsets(rp.rank, rp.stands_for, x.members);
        set_copies.push_back({std::move(x), std::move(offsets)});
      }
      it = key_to_set.emplace(key, id).first;
    }
    if (it->second < 0) continue;  // moves nothing over links (one GPU): analytical
    inst_flow_set_[ui] = it->second;
    inst_alpha_[ui] = alpha;
    // Scaled so that the flow set alone takes exactly the analytical bandwidth time.
    inst_scale_[ui] = to_s(bw_ns) / flow_sets_[static_cast<size_t>(it->second)].alone_s;
  }
  // Folded copies (engine.h): each flow set stands for its translates by fold_offsets; their
  // flows are charged on every link some simulated flow crosses.
  std::vector<std::vector<FlowSpec>*> set_flows;
  for (FlowSet& fs : flow_sets_) set_flows.push_back(&fs.flows);
  charge_folded_copies(set_flows, set_copies, topo, flow_->pxn);
}

void Engine::start_flows(int inst, TimeNs t) {
  const auto ui = static_cast<size_t>(inst);
  const int x =
      net_.start(t, flow_sets_[static_cast<size_t>(inst_flow_set_[ui])].flows, inst_scale_[ui]);
  STEPCAST_CHECK(x == static_cast<int>(transfer_inst_.size()), "network transfer ids out of order");
  transfer_inst_.push_back(inst);
}

}  // namespace stepcast::engine_detail
