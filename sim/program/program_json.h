// The Program as a versioned JSON document (docs/model.md, "The Program"): what
// `stepcast lower -o PROGRAM.json` writes and the GPU executor (calibrate/exec) reads.
//
// Schema "stepcast.program/1":
// {
//   "schema": "stepcast.program/1",
//   "world_size": 64, "folded": true, "scenario_name": "...", "gpus_per_node": 8,
//   "groups": [ {"id": 0, "kind": "tp|cp|ep|pp|dp|dp_cp|edp|world", "ranks": [0, 1, ...]} ],
//   "ranks": [ {
//     "rank": 0, "pp_stage": 0, "stands_for": [0, 8, ...],
//     "streams": {"compute": [0, 2, ...], "tp": [1, ...], ...},   // task ids in issue order
//     "tasks": [ {
//       "id": 0, "kind": "gemm|attention|memory_bound|collective|send|recv|alloc|free",
//       "stream": "compute|tp|cp|ep|pp_send|pp_recv|dp",
//       "phase": "fwd|bwd_input|bwd_weight|recompute|optimizer|other",
//       "category": "compute|recompute|tp_comm|cp_comm|ep_comm|pp_comm|dp_comm|optimizer",
//       "label": "fwd.L12.attn.mb3", "layer": 12, "microbatch": 3, "chunk": -1,
//       "deps": [ids on this rank], "flops": 1.2e12,
//       // exactly one object named after the kind, with the kind's arguments:
//       "gemm": {"m", "n", "k", "batch", "dtype", "layout", "bytes_read", "bytes_written"},
//       "attention": {"batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
//                     "causal", "pass": "fwd|bwd", "dtype", "bytes_read", "bytes_written"},
//       "memory_bound": {"bytes_read", "bytes_written", "what"},
//       "collective": {"op": "allreduce|reduce_scatter|allgather|all_to_all|broadcast",
//                      "group": <index into groups>, "bytes", "dtype",
//                      "kernels": "deepep" (optional: DeepEP's own kernels, not NCCL)},
//       "send" / "recv": {"peer": <global rank>, "bytes", "tag"},
//       "alloc" / "free": {"bytes", "what"}
//     } ]
//   } ]
// }
// Bytes are per rank (collectives: the buffer S as nccl-tests counts it); FLOPs per rank.
// Task ids are dense (tasks[i].id == i) and each stream's list must equal the ids of the
// tasks on that stream in ascending order: issue order is task order.
//
// Reading reports every problem at once (InputError, file:line:column + key path): a JSON
// syntax error, or per key: a wrong type, a missing key (located at the object lacking it),
// an unknown key (with the closest known one suggested) or a value outside its set. Doubles are
// written in shortest round-trip form, so write -> read gives back the same Program.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/program/program.h"

namespace stepcast {

nlohmann::json program_to_json(const Program& p);
// indent < 0: compact, streamed without building the document (the same text as
// program_to_json(p).dump()); otherwise nlohmann's indented dump.
std::string write_program_json(const Program& p, int indent = 1);
// Compact, streamed: program_to_json(p).dump() without the document (no trailing newline).
void write_program_json(const Program& p, std::ostream& out);
// Throws InputError when the file cannot be written.
void save_program_json(const Program& p, const std::string& path);

// `file` names the document in messages.
Program program_from_json(const std::string& text, const std::string& file);
Program load_program_json(const std::string& path);

}  // namespace stepcast
