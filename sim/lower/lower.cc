// Lowering of a Scenario into a Program: the public entry points (lower.h) and the setup of
// the lowering (the model's units per virtual stage, the nominal pipeline schedule). See
// lower.h for the summary; the rules per technique are documented where they are emitted, in
// the files lowering.h lists.
#include "sim/lower/lower.h"

#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>

#include "model/error.h"
#include "model/memory.h"
#include "model/params.h"
#include "sim/lower/lowering.h"

namespace stepcast::lowering {

double steps_flops(const std::vector<Step>& steps, bool selective_only) {
  double f = 0;
  for (const Step& s : steps)
    if (!s.is_comm && (!selective_only || s.recompute_selective)) f += s.op.flops;
  return f;
}

Lowerer::Lowerer(const Scenario& sc, const LowerOptions& opt)
    : sc_(sc),
      par_(sc.parallel),
      arch_(sc.model),
      layout_(par_.tp, par_.cp, par_.dp, par_.pp, par_.ep,
              expert_tp_of(par_.tp, par_.ep, par_.expert_tp)),
      opt_(opt) {
  p_ = par_.pp;
  v_ = par_.vpp;
  nv_ = p_ * v_;
  STEPCAST_CHECK(par_.microbatch >= 1 && sc.training.global_batch >= 1 && sc.training.seq_len >= 1,
                 fmt::format("microbatch {}, global_batch {}, seq_len {} must be positive",
                             par_.microbatch, sc.training.global_batch, sc.training.seq_len));
  m_ = static_cast<int>(sc.microbatches());
  STEPCAST_CHECK(m_ >= 1, fmt::format("{} microbatches: global_batch {} / (dp {} x microbatch {})",
                                      m_, sc.training.global_batch, par_.dp, par_.microbatch));
  STEPCAST_CHECK(
      sc.gpus == 0 || sc.gpus == layout_.world_size(),
      fmt::format("plan covers {} ranks, cluster has {} GPUs", layout_.world_size(), sc.gpus));
  if (par_.schedule == Schedule::kInterleaved)
    STEPCAST_CHECK(m_ % p_ == 0, fmt::format("interleaved 1F1B needs microbatches ({}) "
                                             "divisible by pp ({})",
                                             m_, p_));
  else if (par_.schedule == Schedule::kDualPipeV)
    STEPCAST_CHECK(v_ == 2 && p_ >= 2 && m_ >= 2 * p_,
                   fmt::format("dualpipev needs vpp 2 (got {}), pp >= 2 (got {}) and at least "
                               "2 x pp microbatches (got {})",
                               v_, p_, m_));
  else
    STEPCAST_CHECK(v_ == 1, fmt::format("schedule {} runs one chunk per stage, vpp is {}",
                                        schedule_name(par_.schedule), v_));
  pair_waits_both_ = par_.schedule == Schedule::kDualPipeV;
  // Each linear's weight gradient right after its input gradient, the TP reduction of that
  // input gradient in flight behind it (FrameworkRules::async_tp_dgrad_reduce,
  // sim/plan/framework.h); TE's userbuffers overlap runs in the same order.
  te_order_ = par_.overlap_tp_comm || (sc_.framework.async_tp_dgrad_reduce && par_.tp > 1);
  shard_ = shard_spec(sc, par_);
  STEPCAST_CHECK(
      shard_.seq_len % (par_.cp > 1 ? 2 * par_.cp : 1) == 0,
      fmt::format("seq_len {} must split into 2*cp = {} chunks", shard_.seq_len, 2 * par_.cp));
  build_units();
  build_schedule();
}

Lowerer::StageState Lowerer::stage_state(int s) const {
  StageState st;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, s))]) {
      st.dense += u.dense_params;
      st.expert += u.expert_params;
    }
  check_bucket_count(st.dense + st.expert);
  const bool adam = sc_.training.optimizer == Optimizer::kAdam;
  const int gb = static_cast<int>(grad_bytes_per_param_);
  const bool fp32_shards = sc_.framework.zero3_fp32_shards;
  const bool remainders = sc_.framework.master_weight_remainders;
  const auto sd = state_bytes_per_param(sc_.training.dtype, adam, par_.zero, dense_dp_size(), gb,
                                        fp32_shards, remainders);
  const auto se = state_bytes_per_param(sc_.training.dtype, adam, par_.zero, expert_dp_size(), gb,
                                        fp32_shards, remainders);
  st.bytes = {st.dense * sd.weights + st.expert * se.weights,
              st.dense * sd.grads + st.expert * se.grads,
              st.dense * sd.optimizer + st.expert * se.optimizer};
  return st;
}

std::vector<std::array<double, 3>> Lowerer::state_bytes_per_stage() const {
  std::vector<std::array<double, 3>> out;
  for (int s = 0; s < p_; ++s) out.push_back(stage_state(s).bytes);
  return out;
}

Program Lowerer::run() {
  prog_.world_size = layout_.world_size();
  prog_.folded = opt_.folded;
  prog_.scenario_name = sc_.name;
  prog_.gpus_per_node = sc_.profile.node.gpus;
  if (opt_.folded) {
    prog_.ranks.reserve(static_cast<size_t>(p_));
    for (int s = 0; s < p_; ++s) {
      RankProgram rp = lower_rank(layout_.rank(0, 0, 0, s));
      rp.stands_for = layout_.stage_ranks(s);
      prog_.ranks.push_back(std::move(rp));
      if (opt_.stop_after_stage && opt_.stop_after_stage(prog_)) break;
    }
  } else {
    prog_.ranks.resize(static_cast<size_t>(layout_.world_size()));
    for (int s = 0; s < p_; ++s) {
      for (int c = 0; c < par_.cp; ++c) {
        const int trank = layout_.rank(0, c, 0, s);
        RankProgram tmpl = lower_rank(trank);
        const ListNames used = names_used(tmpl.tasks);
        for (int d = 0; d < par_.dp; ++d) {
          for (int t = 0; t < par_.tp; ++t) {
            const int g = layout_.rank(t, c, d, s);
            RankProgram& rp = prog_.ranks[static_cast<size_t>(g)];
            rp = g == trank ? tmpl : retarget(tmpl, used, g);
            rp.stands_for = {g};
          }
        }
      }
    }
  }
  return std::move(prog_);
}

void Lowerer::build_units() {
  vs_layers_ = virtual_stage_layers(sc_);
  embed_ops_ = embedding_ops(arch_, shard_);
  head_ops_ = logits_loss_ops(arch_, shard_);
  if (arch_.mtp_layers > 0) mtp_ops_ = mtp_input_ops(arch_, shard_);
  act_dtype_ = activation_dtype(sc_.training.dtype);
  act_elem_bytes_ = dtype_bytes(act_dtype_);
  // Gradient accumulation and reduction dtype: training.grad_reduce_dtype, else what
  // Megatron-LM (2021 on) and Megatron-Core do by default (arguments.py): bf16 forces
  // --accumulate-allreduce-grads-in-fp32, so main grads are fp32 and reduced in fp32 (fp8
  // runs keep bf16 params, likewise); fp16 leaves it off (default False), so grads
  // accumulate and are reduced in fp16, the parameter dtype — also the ZeRO paper's fp16
  // gradients (2 bytes).
  grad_dtype_ = grad_reduce_dtype(sc_.training);
  grad_bytes_per_param_ = dtype_bytes(grad_dtype_);
  chunks_.resize(static_cast<size_t>(nv_));
  int layer = 0;
  for (int vs = 0; vs < nv_; ++vs) {
    auto& units = chunks_[static_cast<size_t>(vs)];
    if (vs == 0) units.push_back(make_aux(Unit::Kind::kEmbed, &embed_ops_, "emb"));
    for (int i = 0; i < vs_layers_[static_cast<size_t>(vs)]; ++i, ++layer)
      units.push_back(make_layer(layer, layer));
    if (vs == nv_ - 1) {
      // Multi-token prediction on the last stage, after its layers (Megatron-Core
      // GPTModel: the MTP block runs after the decoder; each module's input kernels, its
      // layer, and the shared output layer with its own loss).
      for (int i = 0; i < arch_.mtp_layers; ++i) {
        const std::string n = fmt::format("mtp{}", i);
        units.push_back(make_aux(Unit::Kind::kHead, &mtp_ops_, (n + ".in").c_str()));
        units.push_back(make_layer(arch_.layers + i, arch_.layers - 1));
        units.back().name = n;
        units.push_back(make_head((n + ".head").c_str()));
        units.back().output_call = i;
        // The output layer is the model's own: its weight and gradient are the head's.
        units.back().dense_params = 0;
        units.back().dense_grad_bytes = 0;
      }
      units.push_back(make_head("head"));
      units.back().output_call = arch_.mtp_layers;
      if (arch_.tied_embeddings && embed_with_head()) {
        // Tied output layer on the embedding's own stage: one weight, held and reduced once
        // (only the final norm is the head's own).
        Unit& h = units.back();
        const double tied =
            static_cast<double>(arch_.vocab) * static_cast<double>(arch_.hidden) / par_.tp;
        const double own = std::max(0.0, h.dense_params - tied);
        h.dense_grad_bytes *= h.dense_params > 0 ? own / h.dense_params : 0.0;
        h.dense_params = own;
      }
    }
  }
}

Unit Lowerer::make_layer(int layer, int like) {
  // One LayerOps per kind of layer (layer_ops depends on the layer only through
  // is_moe_layer and windowed_layer, model/workload.h), shared by the units: computing
  // it for each of the model's layers took 5% of a search.
  const int k = (arch_.is_moe_layer(like) ? 1 : 0) + (arch_.windowed_layer(like) ? 2 : 0);
  std::optional<LayerOps>& kind = layer_ops_[static_cast<size_t>(k)];
  if (!kind) kind = layer_ops(arch_, like, shard_);
  const LayerOps& ops = *kind;
  Unit u;
  u.kind = Unit::Kind::kLayer;
  u.layer = layer;
  u.ops = &ops;
  u.name = fmt::format("L{}", layer);
  u.act_bytes =
      layer_activation_bytes(arch_, like, shard_, par_.recompute, shard_.flash_attention) +
      te_fp8_activation_delta(like, par_.recompute);
  u.act_full_bytes =
      layer_activation_bytes(arch_, like, shard_, Recompute::kNone, shard_.flash_attention) +
      te_fp8_activation_delta(like, Recompute::kNone);
  u.expert_params = ops.expert_param_count;
  u.dense_params = ops.param_count - u.expert_params;
  const double frac = ops.param_count > 0 ? u.expert_params / ops.param_count : 0.0;
  u.expert_grad_bytes = ops.param_count * grad_bytes_per_param_ * frac;
  u.dense_grad_bytes = ops.param_count * grad_bytes_per_param_ - u.expert_grad_bytes;
  fill_flops(u);
  return u;
}

Unit Lowerer::make_head(const char* name) {
  Unit u = make_aux(Unit::Kind::kHead, &head_ops_, name);
  u.act_bytes = head_activation_bytes(arch_, shard_);  // the loss's saved softmax or logits
  return u;
}

Unit Lowerer::make_aux(Unit::Kind kind, const LayerOps* ops, const char* name) {
  Unit u;
  u.kind = kind;
  u.ops = ops;
  u.name = name;
  u.dense_params = ops->param_count;
  u.dense_grad_bytes = ops->param_count * grad_bytes_per_param_;
  fill_flops(u);
  return u;
}

void Lowerer::fill_flops(Unit& u) const {
  u.fwd_flops = steps_flops(u.ops->fwd);
  u.bwd_input_flops = steps_flops(u.ops->bwd_input);
  u.bwd_weight_flops = steps_flops(u.ops->bwd_weight);
  if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kFull)
    u.recompute_flops = u.fwd_flops;
  else if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kSelective)
    u.recompute_flops = steps_flops(u.ops->fwd, true);
}

void Lowerer::build_schedule() {
  orders_ = pipeline_schedule(par_.schedule, p_, v_, m_, par_.overlap_moe_ep && par_.ep > 1);
  // With W passes (ZB-H1, DualPipeV) B's nominal cost is its input gradients', and a B that
  // does not defer them adds W's (nominal_start_times).
  bool has_w = false;
  for (const auto& ord : orders_)
    for (const PassOp& op : ord) has_w = has_w || op.kind == PassKind::kW;
  NominalCosts c;
  c.f.assign(static_cast<size_t>(nv_), 1.0);  // +1: strictly positive durations
  c.b = c.f;
  c.w = c.f;
  for (int vs = 0; vs < nv_; ++vs) {
    for (const Unit& u : chunks_[static_cast<size_t>(vs)]) {
      c.f[static_cast<size_t>(vs)] += u.fwd_flops;
      c.b[static_cast<size_t>(vs)] +=
          u.bwd_input_flops + u.recompute_flops + (has_w ? 0.0 : u.bwd_weight_flops);
      c.w[static_cast<size_t>(vs)] += u.bwd_weight_flops;
    }
  }
  if (!has_w) c.w.clear();
  const auto starts = nominal_start_times(par_.schedule, orders_, p_, v_, m_, c);
  const size_t n = static_cast<size_t>(nv_) * static_cast<size_t>(m_);
  f_start_.assign(n, 0.0);
  b_start_.assign(n, 0.0);
  for (int s = 0; s < p_; ++s) {
    const auto& ord = orders_[static_cast<size_t>(s)];
    for (size_t i = 0; i < ord.size(); ++i) {
      const int vs = vstage(ord[i].chunk, s);
      const double t = starts[static_cast<size_t>(s)][i];
      if (ord[i].kind == PassKind::kF) f_start_[vidx(vs, ord[i].mb)] = t;
      if (ord[i].kind == PassKind::kB) b_start_[vidx(vs, ord[i].mb)] = t;
    }
  }
}

}  // namespace stepcast::lowering

namespace stepcast {

ShardSpec shard_spec(const Scenario& sc, const ParallelSpec& par) {
  ShardSpec shard;
  shard.microbatch = par.microbatch;
  shard.seq_len = sc.training.seq_len;
  shard.tp = par.tp;
  shard.cp = par.cp;
  shard.ep = par.ep;
  shard.expert_tp = par.expert_tp;
  shard.sequence_parallel = par.sequence_parallel;
  shard.dtype = sc.training.dtype;
  shard.flash_attention = sc.profile.compute.attn_flash;
  shard.fused_cross_entropy = sc.framework.fused_cross_entropy;
  shard.loss_nan_check = sc.framework.loss_nan_check;
  shard.fp8_recipe = sc.training.fp8_recipe;
  shard.te_fp8_storage = sc.framework.te_fp8_storage;
  // Where the whole gradients accumulate over the microbatches, each weight gradient goes
  // into them fused into its GEMM or added by a hook (model/workload.cc
  // add_grad_accumulation).
  if (accumulates_whole_gradients(par.zero, sc.framework))
    shard.grad_accumulation =
        sc.framework.grad_accumulation_fusion ? GradAccumulation::kFused : GradAccumulation::kHook;
  shard.main_grad_bytes = dtype_bytes(grad_reduce_dtype(sc.training));
  shard.dispatcher = par.moe_dispatcher;
  shard.shared_expert_overlap = par.overlap_moe_shared;
  if (par.ep > 1) {
    // Nodes one ep group spans (ranks are numbered node by node): DeepEP sends a token once
    // per destination node (model/moe.cc). Rank 0's group; every group spans as many.
    const RankLayout layout(par.tp, par.cp, par.dp, par.pp, par.ep,
                            expert_tp_of(par.tp, par.ep, par.expert_tp));
    const int per_node = std::max(1, sc.profile.node.gpus);
    std::vector<int> nodes;
    for (int r : layout.ep_group(0)) nodes.push_back(r / per_node);
    std::sort(nodes.begin(), nodes.end());
    shard.ep_nodes = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  }
  return shard;
}

std::vector<int> virtual_stage_layers(const Scenario& sc) {
  const ParallelSpec& par = sc.parallel;
  const int nv = par.pp * par.vpp;
  const int layers = sc.model.layers;
  if (!par.pipeline_layers.empty()) {
    STEPCAST_CHECK(static_cast<int>(par.pipeline_layers.size()) == nv,
                   fmt::format("pipeline_layers has {} entries, pp x vpp = {}",
                               par.pipeline_layers.size(), nv));
    int sum = 0;
    for (int n : par.pipeline_layers) {
      STEPCAST_CHECK(n >= 0, "pipeline_layers entries must be >= 0");
      sum += n;
    }
    STEPCAST_CHECK(
        sum == layers,
        fmt::format("pipeline_layers add up to {}, the model has {} layers", sum, layers));
    return par.pipeline_layers;
  }
  STEPCAST_CHECK(layers % nv == 0,
                 fmt::format("{} layers do not split evenly over pp x vpp = {}", layers, nv));
  return std::vector<int>(static_cast<size_t>(nv), layers / nv);
}

Program lower(const Scenario& sc, const LowerOptions& opt) {
  check_simulation_size(sc, opt.folded);
  lowering::Lowerer l(sc, opt);
  return l.run();
}

std::vector<std::array<double, 3>> training_state_bytes(const Scenario& sc) {
  return lowering::Lowerer(sc, LowerOptions{}).state_bytes_per_stage();
}

}  // namespace stepcast
