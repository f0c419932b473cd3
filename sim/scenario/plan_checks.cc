// The cross-key rules of a scenario: the parallel plan against the cluster, the batch, the
// model and the sequence (the rules and the Megatron-LM rule each follows are listed at the
// top of scenario.cc). Members of the Loader (loader.h), one per rule family; run after
// every section was read, each only when the sections it reads loaded without a problem.
#include <fmt/format.h>

#include "sim/io/yaml_util.h"
#include "sim/scenario/loader.h"

namespace stepcast::detail {

namespace {

// Where an issue about parallel.<key> points: the key, else the parallel section.
YAML::Node at(const YAML::Node& par, const char* key) { return first_of(par, {key}); }

std::string path(const char* key) { return std::string("parallel.") + key; }

}  // namespace

void Loader::cross_checks(Scenario& sc) {
  const YAML::Node par = root_["parallel"];
  // vpp > 1 <=> interleaved (Megatron: --num-layers-per-virtual-pipeline-stage selects the
  // interleaved schedule; the interleaved schedule needs it).
  if (parallel_ok_) check_schedule(par, sc.parallel);
  // Plan size against the cluster.
  bool dp_ok = false;
  if (parallel_ok_ && cluster_ok_) dp_ok = check_plan_size(par, sc);
  // Batch against dp and microbatch; microbatch-count rules of the schedules.
  if (dp_ok && training_ok_) check_batch(par, sc);
  // Model against tp / pp / ep.
  if (parallel_ok_ && model_ok_) {
    const ParallelSpec& pl = sc.parallel;
    // An invalid expert_tp is reported below; the other rules then use the default.
    const int etp =
        expert_tp_of(pl.tp, pl.ep, pl.expert_tp == 1 || pl.expert_tp == pl.tp ? pl.expert_tp : 0);
    check_tp_split(par, sc, etp);
    check_expert_tp(par, sc);
    check_pipeline_split(par, sc);
    check_expert_parallel(par, sc, etp, dp_ok);
    check_moe_ep_overlap(par, sc);
  }
  // Sequence against cp and tp.
  if (parallel_ok_ && training_ok_) check_sequence(par, sc);
  // The optimizer's master-weight remainders are the low half of an fp32 value whose high
  // half is the bf16 weight (framework rule master_weight_remainders).
  if (training_ok_ && sc.framework.master_weight_remainders &&
      activation_dtype(sc.training.dtype) != DType::kBf16) {
    const YAML::Node f = root_["framework"];
    const char* key = "master_weight_remainders";
    r_.error(f && f.IsMap() && f[key] ? f[key] : f, std::string("framework.") + key,
             fmt::format("needs bf16 weights (training.dtype bf16 or fp8, got {}): the "
                         "remainder is the low half of an fp32 master weight whose high half "
                         "is the bf16 weight",
                         dtype_name(sc.training.dtype)));
  }
  // What the plan asks of the stack: a zero level it has (and runs with a pipeline), the TP
  // overlap, a pipeline schedule it runs; and what the deferred output-layer weight
  // gradients run with (at the framework rule, which the scenario set).
  if (parallel_ok_) {
    const std::string fw = framework_name(sc.framework.name);
    const std::string why = zero_problem(sc.parallel, sc.framework);
    if (!why.empty()) r_.error(at(par, "zero"), path("zero"), fw + " " + why);
    if (sc.parallel.overlap_tp_comm && !sc.framework.tp_comm_overlap) {
      const YAML::Node ov = at(par, "overlap");
      r_.error(ov && ov.IsMap() ? first_of(ov, {"tp_comm"}) : ov, "parallel.overlap.tp_comm",
               fw + " has no tensor-parallel communication overlap (Transformer Engine's "
                    "userbuffers, or TorchTitan's async TP; framework rule tp_comm_overlap)");
    }
    const std::string sched = pipeline_schedule_problem(sc.parallel, sc.framework);
    if (!sched.empty()) r_.error(at(par, "schedule"), path("schedule"), fw + " " + sched);
    const std::string defer = defer_wgrad_problem(sc.parallel, sc.framework);
    if (!defer.empty()) {
      const YAML::Node f = root_["framework"];
      const char* key = "defer_embedding_wgrad_compute";
      r_.error(f && f.IsMap() && f[key] ? f[key] : f, std::string("framework.") + key,
               fw + " " + defer);
    }
  }
}

void Loader::check_schedule(const YAML::Node& par, const ParallelSpec& pl) {
  const bool dualpipev = pl.schedule == Schedule::kDualPipeV;
  if (pl.vpp > 1 && pl.schedule != Schedule::kInterleaved && !dualpipev)
    r_.error(at(par, "vpp"), path("vpp"),
             fmt::format("vpp = {} needs schedule: interleaved or dualpipev (got {})", pl.vpp,
                         schedule_name(pl.schedule)));
  for (const PlanProblem& pr : dualpipev_problems(pl))
    r_.error(at(par, pr.key), path(pr.key), pr.message);
  if (pl.schedule == Schedule::kInterleaved && pl.vpp < 2)
    r_.error(at(par, "schedule"), path("schedule"),
             "the interleaved schedule needs vpp >= 2 model chunks per pipeline rank");
  if (pl.schedule == Schedule::kInterleaved && pl.pp < 2)
    r_.error(at(par, "schedule"), path("schedule"),
             fmt::format("the interleaved schedule needs pp >= 2, got pp = {}", pl.pp));
}

bool Loader::check_plan_size(const YAML::Node& par, Scenario& sc) {
  ParallelSpec& pl = sc.parallel;
  bool dp_ok = false;
  const std::int64_t tpc = std::int64_t{pl.tp} * pl.pp * pl.cp;
  if (par && par["dp"]) {
    if (tpc * pl.dp != sc.gpus)
      r_.error(par["dp"], path("dp"),
               fmt::format("tp*pp*dp*cp = {}*{}*{}*{} = {} must equal the cluster's {} GPUs", pl.tp,
                           pl.pp, pl.dp, pl.cp, tpc * pl.dp, sc.gpus));
    else
      dp_ok = true;
  } else if (sc.gpus % tpc != 0) {
    r_.error(first_of(par, {"tp", "pp", "cp"}), path("dp"),
             fmt::format("cannot derive dp: the cluster's {} GPUs are not divisible by "
                         "tp*pp*cp = {}*{}*{} = {}",
                         sc.gpus, pl.tp, pl.pp, pl.cp, tpc));
  } else {
    pl.dp = static_cast<int>(sc.gpus / tpc);
    dp_ok = true;
  }
  return dp_ok;
}

void Loader::check_batch(const YAML::Node& par, const Scenario& sc) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  const std::int64_t per_step = std::int64_t{pl.dp} * pl.microbatch;
  const YAML::Node gb = root_["training"]["global_batch"];
  if (sc.training.global_batch % per_step != 0) {
    r_.error(gb, "training.global_batch",
             fmt::format("global_batch ({}) must be divisible by dp*microbatch = {}*{} = {}",
                         sc.training.global_batch, pl.dp, pl.microbatch, per_step));
  } else if (model_ok_ && (sc.microbatches() > kMaxLayerPasses ||
                           sc.microbatches() * m.layers > kMaxLayerPasses)) {
    r_.error(gb, "training.global_batch",
             fmt::format("global_batch/(dp*microbatch) = {} microbatches of the model's {} "
                         "layers make {} layer passes per step, more than the {} one "
                         "simulation can hold: give a larger microbatch or a smaller "
                         "global_batch",
                         sc.microbatches(), m.layers,
                         static_cast<double>(sc.microbatches()) * m.layers, kMaxLayerPasses));
  } else if (pl.schedule == Schedule::kInterleaved && pl.pp > 1 && sc.microbatches() % pl.pp != 0) {
    r_.error(at(par, "schedule"), path("schedule"),
             fmt::format("the interleaved schedule needs the number of microbatches "
                         "(global_batch/(dp*microbatch) = {}) to be a multiple of pp ({})",
                         sc.microbatches(), pl.pp));
  } else if (const std::string why = dualpipev_microbatch_problem(pl, sc.microbatches());
             !why.empty()) {
    r_.error(at(par, "schedule"), path("schedule"), why);
  }
}

void Loader::check_tp_split(const YAML::Node& par, const Scenario& sc, int etp) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  if (m.heads % pl.tp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("the model's heads ({}) must be divisible by tp ({})", m.heads, pl.tp));
  else if (m.kv_heads % pl.tp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("the model's kv_heads ({}) must be divisible by tp ({}) "
                         "(Megatron: num_query_groups % tp == 0)",
                         m.kv_heads, pl.tp));
  // The MLP's columns are split over tp (Megatron: ffn_hidden_size % tp == 0); so are
  // the experts' without ep, and with ep the MoE layers split each microbatch's tokens
  // over tp (model/workload.cc checks each; found only there they were internal errors).
  bool has_dense = !m.moe;
  for (int l = 0; !has_dense && l < m.layers; ++l) has_dense = !m.is_moe_layer(l);
  if (has_dense && m.ffn_hidden % pl.tp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("the model's ffn_hidden ({}) must be divisible by tp ({})", m.ffn_hidden,
                         pl.tp));
  if (m.moe && etp > 1 && m.moe->ffn_hidden % etp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("the model's moe.ffn_hidden ({}) must be divisible by tp ({}) "
                         "(the experts are split over tp: no ep, or expert_tp = tp)",
                         m.moe->ffn_hidden, pl.tp));
}

void Loader::check_expert_tp(const YAML::Node& par, const Scenario& sc) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  if (pl.expert_tp > 0) {
    if (!m.moe)
      r_.error(at(par, "expert_tp"), path("expert_tp"),
               fmt::format("expert_tp needs a MoE model (one with model.moe), but the "
                           "model ({}) is dense",
                           m.name));
    else if (pl.expert_tp != 1 && pl.expert_tp != pl.tp)
      r_.error(at(par, "expert_tp"), path("expert_tp"),
               fmt::format("expected 1 (experts whole) or tp ({}: experts split like the "
                           "dense MLP), got {}",
                           pl.tp, pl.expert_tp));
    else if (pl.expert_tp > 1 && pl.ep > 1 && !pl.sequence_parallel)
      r_.error(at(par, "expert_tp"), path("expert_tp"),
               fmt::format("experts split over tp ({}) with ep ({}) need "
                           "sequence_parallel: true (Megatron-Core: MoE with tensor "
                           "parallelism uses sequence parallelism)",
                           pl.expert_tp, pl.ep));
  }
  if (m.moe && pl.ep > 1 && m.moe->shared_experts > 0 &&
      (m.moe->shared_experts * m.moe->ffn_hidden) % pl.tp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("the model's shared experts (shared_experts x moe.ffn_hidden = "
                         "{} x {}) must be divisible by tp ({}): they are split over tp "
                         "like a dense MLP",
                         m.moe->shared_experts, m.moe->ffn_hidden, pl.tp));
  if (m.moe && pl.ep > 1 && training_ok_ && sc.training.seq_len % pl.cp == 0 &&
      (pl.microbatch * (sc.training.seq_len / pl.cp)) % pl.tp != 0)
    r_.error(at(par, "tp"), path("tp"),
             fmt::format("with ep > 1 the MoE layers split each microbatch's "
                         "microbatch*seq_len/cp = {} tokens over tp ({}): they must be "
                         "divisible",
                         pl.microbatch * (sc.training.seq_len / pl.cp), pl.tp));
}

void Loader::check_pipeline_split(const YAML::Node& par, const Scenario& sc) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  const int stages = pl.pp * pl.vpp;
  if (!pl.pipeline_layers.empty()) {
    const YAML::Node pln = par["pipeline_layers"];
    std::int64_t sum = 0;
    for (int v : pl.pipeline_layers) sum += v;
    if (static_cast<int>(pl.pipeline_layers.size()) != stages)
      r_.error(pln, path("pipeline_layers"),
               fmt::format("expected pp*vpp = {}*{} = {} entries, got {}", pl.pp, pl.vpp, stages,
                           pl.pipeline_layers.size()));
    else if (sum != m.layers)
      r_.error(pln, path("pipeline_layers"),
               fmt::format("the entries sum to {} but the model has {} layers", sum, m.layers));
  } else if (m.layers % stages != 0) {
    r_.error(first_of(par, {"pp", "vpp"}), path(par && !par["pp"] && par["vpp"] ? "vpp" : "pp"),
             fmt::format("the model's {} layers do not split evenly over pp*vpp = {}*{} = {} "
                         "stages; give parallel.pipeline_layers",
                         m.layers, pl.pp, pl.vpp, stages));
  }
}

void Loader::check_expert_parallel(const YAML::Node& par, const Scenario& sc, int etp, bool dp_ok) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  if (pl.ep > 1) {
    if (!m.moe) {
      r_.error(at(par, "ep"), path("ep"),
               fmt::format("ep = {} needs a MoE model (one with model.moe), but the "
                           "model ({}) is dense",
                           pl.ep, m.name));
    } else if (m.moe->experts % pl.ep != 0) {
      r_.error(at(par, "ep"), path("ep"),
               fmt::format("the model's experts ({}) must be divisible by ep ({})", m.moe->experts,
                           pl.ep));
    } else if (dp_ok && (pl.tp * pl.cp * pl.dp) % (etp * pl.ep) != 0) {
      r_.error(at(par, "ep"), path("ep"),
               etp == 1 ? fmt::format("ep ({}) must divide tp*cp*dp = {}*{}*{} = {} (expert "
                                      "groups are cut from the ranks of a pipeline stage)",
                                      pl.ep, pl.tp, pl.cp, pl.dp, pl.tp * pl.cp * pl.dp)
                        : fmt::format("ep ({}) must divide cp*dp = {}*{} = {} (with expert_tp "
                                      "= tp each expert group keeps one tp index)",
                                      pl.ep, pl.cp, pl.dp, pl.cp * pl.dp));
    }
  }
}

// overlap.moe_ep_comm: Megatron-Core's conditions (moe_ep_overlap_problem, framework.h).
void Loader::check_moe_ep_overlap(const YAML::Node& par, const Scenario& sc) {
  if (!sc.parallel.overlap_moe_ep) return;
  const std::string why = moe_ep_overlap_problem(sc.model, sc.parallel, sc.framework);
  if (!why.empty())
    r_.error(par["overlap"]["moe_ep_comm"], "parallel.overlap.moe_ep_comm",
             "the MoE all-to-all overlap " + why);
}

void Loader::check_sequence(const YAML::Node& par, const Scenario& sc) {
  const ParallelSpec& pl = sc.parallel;
  const ModelArch& m = sc.model;
  const std::int64_t s = sc.training.seq_len;
  bool cp_ok = true;
  if (pl.cp > 1 && pl.cp_kind == CpKind::kRing && s % (2 * pl.cp) != 0) {
    cp_ok = false;
    r_.error(at(par, "cp"), path("cp"),
             fmt::format("ring context parallelism splits seq_len ({}) into 2*cp = {} chunks "
                         "(causal load balancing): it must be divisible",
                         s, 2 * pl.cp));
  } else if (s % pl.cp != 0) {
    cp_ok = false;
    r_.error(at(par, "cp"), path("cp"),
             fmt::format("seq_len ({}) must be divisible by cp ({})", s, pl.cp));
  }
  if (cp_ok && pl.sequence_parallel && pl.tp > 1 && (s / pl.cp) % pl.tp != 0)
    r_.error(at(par, "sequence_parallel"), path("sequence_parallel"),
             fmt::format("sequence parallelism splits each cp rank's {} tokens over tp = {}: "
                         "seq_len/cp must be divisible by tp",
                         s / pl.cp, pl.tp));
  if (model_ok_ && m.max_positions > 0 && s > m.max_positions)
    r_.error(root_["training"]["seq_len"], "training.seq_len",
             fmt::format("seq_len ({}) exceeds the model's learned positions "
                         "(max_positions = {})",
                         s, m.max_positions));
}

}  // namespace stepcast::detail
