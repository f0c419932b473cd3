// Setting up the engine's flow network mode from a hardware profile (`network: flow`).
//
// Each communication task's analytical time t(S) (sim/cost: alpha-beta per algorithm, NCCL
// style) is split into latency, paid before bytes move, and bandwidth time, which the flows
// replay under contention. The split is the local alpha-beta decomposition of the chosen
// cost: bandwidth part = S * dt/dS at the task's own size S, latency = t(S) - S * dt/dS
// (exact for every piece of the model, which is alpha + S * F / busbw per algorithm and
// protocol; dt/dS is taken on the chosen algorithm/protocol, or by a one-sided difference of
// relative width 1e-3 for calibrated tables and send/recv).
//
// Oversubscription: the analytical model charges a cross-pod group the full 1:k
// oversubscription (it assumes every rail is busy). In flow mode the pod uplinks carry it
// (Topology: pod_up = pod NIC bandwidth / k), so durations are costed with the fabric's
// oversubscription set to 1 and the flows meet the real load. Consequence: a lone cross-pod
// collective is faster in flow mode than in analytical mode when the uplink is not full.
// NICs shared by several GPUs (node.nics < node.gpus) likewise: the analytical model gives
// each GPU nics/gpus of a NIC (every GPU of a node transfers at once); flow mode costs a
// transfer alone with a whole NIC (HwProfile::lone_transfers) and the flows of the GPUs
// sharing it (or, folded, the copies FlowSpec::copies charges: engine.h) share it.
#pragma once

#include "sim/cluster/profile.h"
#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast {

// Latency (alpha) of every task in ns, indexed like task_durations(p, hw); 0 for
// non-communication tasks; never above the task's duration.
Durations task_latencies(const Program& p, const HwProfile& hw);

// The profile whose analytical costs feed the flow mode: fabric oversubscription 1, lone
// transfers (above).
HwProfile flow_cost_profile(const HwProfile& hw);

// Runs `p` in flow mode on a topology of p.world_size GPUs built from `hw`: durations and
// latencies from flow_cost_profile(hw), every other option as given (options.flow is
// ignored and replaced).
// The topology with slow GPUs' links (cluster.stragglers): each GPU's NVLink ports at its
// nvlink factor of their line rate, its rail NIC's links at its nic factor. A NIC shared by
// several GPUs runs at the smallest of their factors, so a node-wide factor applies once and
// one slow GPU slows the NIC it shares.
class Topology;
Topology slowed_topology(const Topology& nominal, const GpuSpeeds& speeds);

// `speeds` (cluster.stragglers, sim/cluster/profile.h): kernels of a slow GPU take
// time / compute; its links are slowed as slowed_topology() says, and transfers are scaled
// against the nominal topology (FlowMode::nominal) so the slow links only stretch them.
Timeline simulate_flow_mode(const Program& p, const HwProfile& hw, const EngineOptions& options,
                            const GpuSpeeds& speeds = {});

}  // namespace stepcast
