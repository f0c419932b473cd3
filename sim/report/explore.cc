#include "sim/report/explore.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/error.h"
#include "sim/report/parallel.h"
#include "sim/report/search_bound.h"
#include "sim/scenario/search_space.h"

namespace stepcast {

static std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

static ExplorePoint evaluate(const YAML::Node& doc, const std::string& file,
                             std::vector<std::pair<std::string, std::string>> settings,
                             const SearchRunOptions& run = {}) {
  ExplorePoint pt;
  pt.settings = std::move(settings);
  try {
    YAML::Node copy = YAML::Clone(doc);
    copy.remove("sweep");
    Scenario sc = load_scenario_node(copy, file);
    pt.result = predict_pruned(sc, run).result;
  } catch (const InputError& e) {
    pt.valid = false;
    pt.error = e.issues().empty() ? e.what() : e.issues().front().str();
  }
  return pt;
}

std::vector<PlanCandidate> sweep_candidates(const Scenario& base) {
  std::vector<PlanCandidate> out;
  if (base.sweep.empty()) {
    PlanCandidate c;
    c.doc = base.source;
    out.push_back(std::move(c));
    return out;
  }
  size_t total = 1;
  for (const auto& ax : base.sweep) total *= ax.values.size();
  std::vector<size_t> idx(base.sweep.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    size_t rem = n;
    for (size_t a = base.sweep.size(); a-- > 0;) {
      idx[a] = rem % base.sweep[a].values.size();
      rem /= base.sweep[a].values.size();
    }
    PlanCandidate c;
    c.doc = YAML::Clone(base.source);
    for (size_t a = 0; a < base.sweep.size(); ++a) {
      const YAML::Node& v = base.sweep[a].values[idx[a]];
      c.doc = with_dotted_key(c.doc, base.sweep[a].key, v);
      c.settings.emplace_back(base.sweep[a].key, scalar_text(v));
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<ExplorePoint> evaluate_candidates(const std::vector<PlanCandidate>& cands,
                                              const std::string& file, const SearchRunOptions& run,
                                              int threads, const Progress& progress, int slice,
                                              int slice_count) {
  STEPCAST_CHECK(slice_count >= 1 && slice >= 0 && slice < slice_count,
                 fmt::format("evaluate_candidates: slice {} of {}", slice, slice_count));
  std::vector<ExplorePoint> pts(cands.size());
  SearchRunOptions bulk = run;
  bulk.labels = false;  // only each plan's Result is kept
  const size_t step = static_cast<size_t>(slice_count), first = static_cast<size_t>(slice);
  const size_t mine = cands.size() > first ? (cands.size() - first + step - 1) / step : 0;
  parallel_for(
      mine, threads,
      [&](size_t k) {
        const size_t i = first + k * step;
        pts[i] = evaluate(cands[i].document(), file, cands[i].settings, bulk);
      },
      progress);
  return pts;
}

namespace {

// Context parallelism is searched for sequences this long or longer (shorter ones split
// too little work per rank for cp to pay off; the same threshold as before cp_kind).
constexpr std::int64_t kCpMinSeqLen = 16384;

// One plan of the search space (run_search): the scenario with these parallel settings.
struct PlanAxes {
  int tp, pp, cp, dp, ep, mb, vpp, zero;
  const char* recompute;
  std::vector<int> stage_layers;  // pipeline_layers when the layers do not split evenly
  const char* schedule;           // "1f1b", "zb-h1", or "interleaved" / "dualpipev" (vpp > 1)
  bool tp_overlap;                // parallel.overlap.tp_comm (needs tp > 1 and sp)
  const char* cp_kind;            // "ring" or "allgather"
  double bucket_mb = 0;           // parallel.bucket_mb; 0: the scenario's
  bool ep_overlap = false;        // parallel.overlap.moe_ep_comm
};

// The scenario document of plan `a`: a clone of `source` with the plan's parallel settings.
YAML::Node plan_document(const YAML::Node& source, const PlanAxes& a) {
  YAML::Node doc;
  {
    // yaml-cpp nodes are not safe to read from two threads at once (reading a map may
    // update its bookkeeping), and every candidate clones the one scenario document.
    static std::mutex clone_mutex;
    std::lock_guard<std::mutex> lock(clone_mutex);
    doc = YAML::Clone(source);
  }
  YAML::Node par = doc["parallel"] ? doc["parallel"] : YAML::Node(YAML::NodeType::Map);
  par["tp"] = a.tp;
  par["pp"] = a.pp;
  par["dp"] = a.dp;
  par["cp"] = a.cp;
  par["ep"] = a.ep;
  par["vpp"] = a.vpp;
  par["microbatch"] = a.mb;
  par["schedule"] = a.schedule;
  par["zero"] = a.zero;
  par["sequence_parallel"] = a.tp > 1;
  par["recompute"] = a.recompute;
  par["cp_kind"] = a.cp_kind;
  // The scenario's other overlap keys (grad_reduce, param_gather) are kept.
  YAML::Node ov = par["overlap"] ? par["overlap"] : YAML::Node(YAML::NodeType::Map);
  ov["tp_comm"] = a.tp_overlap;
  if (a.ep_overlap || ov["moe_ep_comm"]) ov["moe_ep_comm"] = a.ep_overlap;
  par["overlap"] = ov;
  par.remove("pipeline_layers");
  par.remove("expert_tp");  // each plan's default expert layout (expert_tp_of)
  if (a.bucket_mb > 0) par["bucket_mb"] = a.bucket_mb;
  if (!a.stage_layers.empty()) {
    YAML::Node pl(YAML::NodeType::Sequence);
    for (int n : a.stage_layers) pl.push_back(n);
    par["pipeline_layers"] = pl;
  }
  doc["parallel"] = par;
  doc.remove("search");  // the plan's document describes one plan
  return doc;
}

// The plan's parallel settings as loading plan_document(a) gives them (search_bound.h needs
// no document).
ParallelSpec plan_spec(const ParallelSpec& base, const PlanAxes& a) {
  ParallelSpec p = base;
  p.tp = a.tp;
  p.pp = a.pp;
  p.dp = a.dp;
  p.cp = a.cp;
  p.ep = a.ep;
  p.vpp = a.vpp;
  p.microbatch = a.mb;
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1,
                     Schedule::kDualPipeV})
    if (std::string(schedule_name(s)) == a.schedule) p.schedule = s;
  p.zero = a.zero;
  p.sequence_parallel = a.tp > 1;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (std::string(recompute_name(r)) == a.recompute) p.recompute = r;
  p.cp_kind = std::string(a.cp_kind) == "allgather" ? CpKind::kAllGather : CpKind::kRing;
  p.overlap_tp_comm = a.tp_overlap;
  p.overlap_moe_ep = a.ep_overlap;
  p.pipeline_layers = a.stage_layers;
  p.expert_tp = 0;
  if (a.bucket_mb > 0) p.bucket_bytes = a.bucket_mb * 1e6;
  return p;
}

// bucket_axis, cp_kind_axis: the space varies the bucket size, the context-parallel kind
// (a column each, the same for every plan of the space).
PlanCandidate plan_candidate(const Scenario& base, const PlanAxes& a, bool bucket_axis,
                             bool cp_kind_axis) {
  PlanCandidate c;
  // Built when evaluated (PlanCandidate::make_doc); the lambda shares the scenario's
  // document (a YAML::Node is a reference) and copies the axes.
  c.make_doc = [source = base.source, a] { return plan_document(source, a); };
  auto text = [](int v) { return std::to_string(v); };
  // Layers per (virtual) stage: "8", or "7-8" for an uneven split.
  const int per_stage = base.model.layers / (a.pp * a.vpp);
  const std::string layers =
      a.stage_layers.empty() ? text(per_stage) : fmt::format("{}-{}", per_stage, per_stage + 1);
  c.settings = {{"tp", text(a.tp)},
                {"pp", text(a.pp)},
                {"layers", layers},
                {"dp", text(a.dp)},
                {"cp", text(a.cp)}};
  if (base.model.moe) c.settings.emplace_back("ep", text(a.ep));
  if (cp_kind_axis) c.settings.emplace_back("cp_kind", a.cp_kind);
  c.settings.insert(c.settings.end(), {{"vpp", text(a.vpp)},
                                       {"mb", text(a.mb)},
                                       {"sched", a.schedule},
                                       {"zero", text(a.zero)},
                                       {"recompute", a.recompute},
                                       {"tp_overlap", a.tp_overlap ? "1" : "0"}});
  if (base.model.moe) c.settings.emplace_back("ep_overlap", a.ep_overlap ? "1" : "0");
  if (bucket_axis) c.settings.emplace_back("bucket_mb", fmt::format("{}", a.bucket_mb));
  return c;
}

// A cheap guess of a plan's step relative to the others', used only to order the search
// (search_in_chunks: the likely best first, so that they bound the others early; any
// order gives the same best plans). The 1F1B / interleaved pipeline bubble, (pp - 1) / (m vpp)
// of the step (Narayanan et al. 2021, Sec. 2.2), times the work recomputation adds: a
// forward pass of the three (4/3) for full, the attention core only for selective (taken as
// half-way to none; an ordering guess, not a cost).
double order_hint(int pp, int vpp, std::int64_t micro, const char* recompute) {
  const double bubble = static_cast<double>(pp - 1) / (static_cast<double>(micro) * vpp);
  const std::string rc = recompute;
  const double redo = rc == "full" ? 4.0 / 3.0 : rc == "selective" ? 1.0 + 1.0 / 6.0 : 1.0;
  return (1.0 + bubble) * redo;
}

}  // namespace

// The plans of one layout (tp, pp, cp, dp, ep, mb, vpp in `lay`): its schedules, cp kinds,
// ZeRO stages, recomputation, TP overlap and bucket sizes (search_candidates).
static void add_layout(std::vector<PlanCandidate>& cands, const Scenario& base,
                       const SearchSpace& sp, StepBound& bound, const PlanAxes& lay,
                       std::int64_t micro);

std::vector<int> balanced_stage_layers(int layers, int stages) {
  STEPCAST_CHECK(layers >= 1 && stages >= 1, "balanced_stage_layers: empty model or pipeline");
  const int more = (layers + stages - 1) / stages;  // ceil
  const int fewer = stages * more - layers;         // stages with one layer less
  if (fewer > 0 && more - 1 < 1) return {};         // a stage would hold no layer
  std::vector<int> out(static_cast<size_t>(stages), more);
  for (int i = 0; i < fewer; ++i)  // first, last, second, second-to-last, ...
    out[static_cast<size_t>(i % 2 == 0 ? i / 2 : stages - 1 - i / 2)] = more - 1;
  return out;
}

std::vector<PlanCandidate> search_candidates(const Scenario& base) {
  std::vector<PlanCandidate> cands;
  StepBound bound(base);  // unit costs memoised across the plans
  const int gpus = base.gpus;
  const int node = base.profile.node.gpus;
  const ModelArch& m = base.model;
  const std::int64_t gb = base.training.global_batch;
  // Expert parallelism for MoE models: every ep dividing the expert count (and dp).
  std::vector<int> eps = {1};
  if (m.moe) {
    eps.clear();
    for (int e = 1; e <= m.moe->experts; ++e)
      if (m.moe->experts % e == 0) eps.push_back(e);
  }
  const SearchSpace sp = search_space_of(base);  // the search: section's lists, else defaults
  auto given_or = [](const std::vector<int>& given, std::vector<int> dflt) {
    return given.empty() ? dflt : given;
  };
  // Tensor and context parallel sizes by default: powers of two up to the NVLink domain
  // (node.gpus: 8 on a DGX, 72 on an NVL72 rack, whose groups of 16, 32 or 64 never touch a
  // NIC); tp where the heads and the KV heads split evenly (Megatron: num_query_groups % tp
  // == 0); cp only for long sequences unless the search: section lists it.
  std::vector<int> sizes;
  for (int s = 1; s <= std::min(node, gpus); s *= 2) sizes.push_back(s);
  for (int tp : given_or(sp.tp, sizes)) {
    if (m.heads % tp != 0 || m.kv_heads % tp != 0) continue;
    std::vector<int> pps = sp.pp;
    if (pps.empty())
      for (int pp = 1; pp <= m.layers && pp <= gpus; ++pp) pps.push_back(pp);
    for (int pp : pps) {
      if (pp > m.layers || pp > gpus) continue;
      for (int cp : given_or(sp.cp, sizes)) {
        if (cp > 1 && sp.cp.empty() && base.training.seq_len < kCpMinSeqLen) continue;
        if (gpus % (tp * pp * cp) != 0) continue;
        const int dp = gpus / (tp * pp * cp);
        for (int ep : eps) {
          if ((tp * cp * dp) % ep != 0) continue;  // expert groups cut from the stage
          for (int mb : given_or(sp.microbatch, {1, 2, 4, 8})) {
            if (gb % (static_cast<std::int64_t>(dp) * mb) != 0) continue;
            const std::int64_t micro = gb / (static_cast<std::int64_t>(dp) * mb);
            // Every vpp whose chunks split the layers evenly, and vpp 2 for uneven splits
            // (balanced_stage_layers); Megatron-Core's interleaved schedule takes any vpp.
            std::vector<int> vpps = sp.vpp;
            if (vpps.empty())
              for (int v = 1; v * pp <= m.layers; ++v)
                if (v <= 2 || m.layers % (pp * v) == 0) vpps.push_back(v);
            for (int vpp : vpps) {
              if (vpp > 1 && (pp == 1 || micro % pp != 0)) continue;
              add_layout(cands, base, sp, bound,
                         {tp, pp, cp, dp, ep, mb, vpp, 0, "none", {}, "", false, "ring"}, micro);
            }
          }
        }
      }
    }
  }
  return cands;
}

static void add_layout(std::vector<PlanCandidate>& cands, const Scenario& base,
                       const SearchSpace& sp, StepBound& bound, const PlanAxes& lay,
                       std::int64_t micro) {
  const ModelArch& m = base.model;
  const int tp = lay.tp, pp = lay.pp, cp = lay.cp, dp = lay.dp, vpp = lay.vpp;
  // The context-parallel kind is a column wherever the space has cp > 1: long sequences, or
  // a search: section that lists it (else its ring and all-gather plans print alike).
  const bool cp_kind_axis = base.training.seq_len >= kCpMinSeqLen ||
                            std::any_of(sp.cp.begin(), sp.cp.end(), [](int v) { return v > 1; });
  std::vector<int> split;  // uneven stages: balanced, the short ones at the ends
  if (m.layers % (pp * vpp) != 0) {
    split = balanced_stage_layers(m.layers, pp * vpp);
    if (split.empty()) return;
  }
  // The plan as the schedule rules see it (moe_ep_overlap_problem, dualpipev_problems).
  auto spec_of = [&](const char* sched, int zero, Recompute rc) {
    ParallelSpec p = base.parallel;
    p.ep = lay.ep;
    p.pp = pp;
    p.vpp = vpp;
    p.zero = zero;
    p.recompute = rc;
    for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1,
                       Schedule::kDualPipeV})
      if (std::string(schedule_name(s)) == sched) p.schedule = s;
    return p;
  };
  // Schedules: interleaved with vpp > 1; with one model chunk per rank 1F1B and ZB-H1
  // (zero-bubble, same activation memory as 1F1B: Qi et al. 2024, Sec. 3), which fills
  // 1F1B's bubble with weight-gradient passes but splits each backward in two. One schedule
  // with pp = 1. GPipe is not searched unless the search: section asks for it: it holds all
  // m microbatches' activations where 1F1B holds at most pp (explore_test's
  // GpipeMemoryNeverBelow1f1b), has 1F1B's bubble, and differs from it in time only by the
  // order of the last passes (80 us of 3.08 s on the one random plan of 40 where it was
  // faster); Megatron-LM does not offer it with pp > 1. `run` and `sweep` cost it when asked.
  // DualPipeV (its conditions: dualpipev_problems, sim/plan/plan.h) only when the search:
  // section names it.
  std::vector<const char*> schedules;
  if (!sp.schedule.empty()) {
    for (Schedule s : sp.schedule) {
      const bool chunks = s == Schedule::kInterleaved || s == Schedule::kDualPipeV;
      if (chunks != (vpp > 1) || (s == Schedule::kZbH1 && pp == 1)) continue;
      const ParallelSpec p = spec_of(schedule_name(s), 0, Recompute::kNone);
      if (!dualpipev_problems(p).empty() || !dualpipev_microbatch_problem(p, micro).empty())
        continue;
      schedules.push_back(schedule_name(s));
    }
  } else if (vpp > 1) {
    schedules = {"interleaved"};
  } else if (pp > 1) {
    schedules = {"1f1b", "zb-h1"};
  } else {
    schedules = {"1f1b"};
  }
  // Ring attention needs seq_len % (2 cp) == 0 (causal load balancing); the all-gather
  // kind only seq_len % cp.
  std::vector<const char*> cp_kinds;
  for (CpKind k :
       sp.cp_kind.empty() ? std::vector<CpKind>{CpKind::kRing, CpKind::kAllGather} : sp.cp_kind)
    if (cp > 1 || k == CpKind::kRing) cp_kinds.push_back(k == CpKind::kRing ? "ring" : "allgather");
  // TP communication overlap (Transformer Engine userbuffers, with sequence parallelism,
  // which is on with tp > 1): on and off.
  std::vector<bool> tp_overlaps = {false};
  if (tp > 1) tp_overlaps = sp.tp_overlap.empty() ? std::vector<bool>{true, false} : sp.tp_overlap;
  // Only where the stack has the overlap (framework rule tp_comm_overlap, the scenario rule).
  if (!base.framework.tp_comm_overlap) std::erase(tp_overlaps, true);
  if (tp_overlaps.empty()) return;
  const std::vector<double> buckets = sp.bucket_mb.empty() ? std::vector<double>{0} : sp.bucket_mb;
  std::vector<int> zeros = sp.zero.empty() ? std::vector<int>{0, 1, 2, 3} : sp.zero;
  const std::vector<Recompute> rcs =
      sp.recompute.empty()
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
          : sp.recompute;
  // The MoE all-to-all overlap: the search's list, else the scenario's own setting; a plan
  // takes it on only where Megatron-Core can run it (the scenario rules, plan_checks.cc), so
  // with the scenario's moe_ep_comm: true the plans that cannot are left out.
  const std::vector<bool> ep_overlaps =
      sp.moe_ep_comm.empty() ? std::vector<bool>{base.parallel.overlap_moe_ep} : sp.moe_ep_comm;
  for (const char* sched : schedules)
    for (const char* ck : cp_kinds)
      for (int zero : zeros) {
        if (zero > 0 && dp == 1) continue;  // nothing to shard over
        // What the stack runs with a pipeline (zero_problem, the scenario rule).
        if (!zero_allowed(pp, zero, base.framework)) continue;
        for (Recompute rc : rcs)
          for (bool ov : tp_overlaps)
            for (bool eo : ep_overlaps)
              for (double bucket : buckets) {
                const ParallelSpec spec = spec_of(sched, zero, rc);
                if (eo && !moe_ep_overlap_problem(base.model, spec, base.framework).empty())
                  continue;
                if (!dualpipev_problems(spec).empty()) continue;
                // DeepSpeed's engine pipelines with 1F1B only (pipeline_schedule_problem).
                if (!pipeline_schedule_allowed(pp, spec.schedule, base.framework)) continue;
                // The scenario's deferred output wgrad runs only with some plans.
                if (!defer_wgrad_problem(spec, base.framework).empty()) continue;
                PlanAxes a = lay;
                a.zero = zero;
                a.recompute = recompute_name(rc);
                a.stage_layers = split;
                a.schedule = sched;
                a.tp_overlap = ov;
                a.cp_kind = ck;
                a.bucket_mb = bucket;
                a.ep_overlap = eo;
                cands.push_back(plan_candidate(base, a, !sp.bucket_mb.empty(), cp_kind_axis));
                PlanCandidate& c = cands.back();
                c.first_pass = sched == schedules.front() && ck == cp_kinds.front() &&
                               zero == (dp > 1 ? 2 : 0) && ov == tp_overlaps.front() &&
                               eo == ep_overlaps.front() && bucket == buckets.front();
                c.order_hint = order_hint(pp, vpp, micro, a.recompute);
                c.bound_s = to_s(bound.step_floor_ns(plan_spec(base.parallel, a)));
              }
      }
}

SearchRunOptions search_run_options(const SearchOptions& opt) {
  // Plans whose resident state alone exceeds memory are only counted, never simulated
  // (the search keeps fitting plans only; the bound is exact, see SearchRunOptions).
  SearchRunOptions run;
  run.skip_when_state_exceeds_memory = opt.skip_plans_that_cannot_fit;
  return run;
}

SearchOutcome summarize_search(std::vector<ExplorePoint> pts, int top) {
  SearchOutcome out;
  out.considered = static_cast<int>(pts.size());
  std::vector<ExplorePoint> good;
  for (auto& p : pts) {
    if (!p.valid) {
      ++out.invalid;
    } else if (p.result.pruned) {
      ++out.pruned;
    } else if (!p.result.fits_memory) {
      ++out.not_fitting;
    } else {
      good.push_back(std::move(p));
    }
  }
  for (const auto& p : good) out.fitting_step_times.push_back(p.result.step_time_s);
  std::sort(out.fitting_step_times.begin(), out.fitting_step_times.end());
  std::stable_sort(good.begin(), good.end(), [](const ExplorePoint& a, const ExplorePoint& b) {
    if (a.result.step_time_s != b.result.step_time_s)
      return a.result.step_time_s < b.result.step_time_s;
    return a.result.layout < b.result.layout;
  });
  if (static_cast<int>(good.size()) > top) good.resize(static_cast<size_t>(top));
  out.best = std::move(good);
  return out;
}

SearchOutcome search_in_chunks(
    const std::vector<PlanCandidate>& cands, const SearchRunOptions& run, int top,
    const std::function<std::vector<ExplorePoint>(
        const std::vector<PlanCandidate>&, const SearchRunOptions&, const Progress&)>& evaluate,
    const std::function<double(double)>& share, const Progress& progress) {
  std::vector<size_t> order(cands.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const PlanCandidate &a = cands[x], &b = cands[y];
    if (a.bound_s != b.bound_s) return a.bound_s < b.bound_s;
    if (a.order_hint != b.order_hint) return a.order_hint < b.order_hint;
    return a.first_pass && !b.first_pass;
  });
  std::vector<ExplorePoint> all;
  std::vector<double> times;   // of the fitting simulated plans so far
  std::vector<double> ratios;  // their step over their bound
  double threshold = std::numeric_limits<double>::infinity();
  bool holds_points = false;  // MPI ranks other than 0 hold no points
  int unlowered = 0;
  for (size_t begin = 0; begin < order.size(); begin += kSearchChunk) {
    const size_t end = std::min(order.size(), begin + kSearchChunk);
    // In bound order, the plans whose bound is above the threshold end the chunk.
    size_t live = begin;
    while (live < end && !(cands[order[live]].bound_s > threshold)) ++live;
    std::vector<PlanCandidate> chunk;
    chunk.reserve(live - begin);
    for (size_t k = begin; k < live; ++k) chunk.push_back(cands[order[k]]);
    SearchRunOptions bounded = run;
    bounded.skip_when_compute_exceeds_s = threshold;
    Progress chunk_progress;
    if (progress)
      chunk_progress = [&, begin](size_t done, size_t) { progress(begin + done, cands.size()); };
    std::vector<ExplorePoint> pts;
    if (!chunk.empty()) pts = evaluate(chunk, bounded, chunk_progress);
    if (!pts.empty()) {
      holds_points = true;
      if (all.empty()) all.resize(cands.size());
      for (size_t k = 0; k < pts.size(); ++k) {
        const ExplorePoint& p = pts[k];
        if (p.valid && p.result.simulated && p.result.fits_memory) {
          times.push_back(p.result.step_time_s);
          const double b = cands[order[begin + k]].bound_s;
          if (b > 0) ratios.push_back(p.result.step_time_s / b);
        }
        all[order[begin + k]] = std::move(pts[k]);
      }
    }
    // Every plan from `live` on: its bound, hence its step, is above the top-th best step.
    const size_t stop = live < end ? order.size() : end;
    unlowered += static_cast<int>(stop - live);
    if (holds_points) {
      for (size_t k = live; k < stop; ++k) {
        ExplorePoint& p = all[order[k]];
        p.settings = cands[order[k]].settings;
        p.result.simulated = false;
        p.result.pruned = true;
        p.result.step_time_s = cands[order[k]].bound_s;
      }
    }
    if (live < end) {
      if (progress) progress(cands.size(), cands.size());
      break;
    }
    // The top-th best fitting step time so far (every process that holds the points
    // computes the same; `share` hands rank 0's to the others).
    if (top >= 1 && times.size() >= static_cast<size_t>(top)) {
      std::vector<double> t = times;
      std::nth_element(t.begin(), t.begin() + (top - 1), t.end());
      threshold = t[static_cast<size_t>(top - 1)];
    }
    if (share) threshold = share(threshold);
  }
  SearchOutcome out = summarize_search(std::move(all), top);
  out.prune_threshold_s = threshold;
  out.pruned_unlowered = unlowered;
  std::sort(ratios.begin(), ratios.end());
  out.bound_ratios = std::move(ratios);
  return out;
}

SearchOutcome run_search(const Scenario& base, const SearchOptions& opt) {
  if (!opt.skip_plans_that_cannot_be_best)
    return summarize_search(evaluate_candidates(search_candidates(base), base.file,
                                                search_run_options(opt), opt.threads, opt.progress),
                            opt.top);
  return search_in_chunks(
      search_candidates(base), search_run_options(opt), opt.top,
      [&](const std::vector<PlanCandidate>& c, const SearchRunOptions& run,
          const Progress& progress) {
        return evaluate_candidates(c, base.file, run, opt.threads, progress);
      },
      nullptr, opt.progress);
}

std::vector<std::uint8_t> points_to_cbor(const std::vector<const ExplorePoint*>& pts) {
  nlohmann::json arr = nlohmann::json::array();
  for (const ExplorePoint* p : pts) {
    nlohmann::json j;
    j["settings"] = p->settings;
    j["valid"] = p->valid;
    j["error"] = p->error;
    // The result JSON plus the two fields its schema leaves out.
    nlohmann::json r = result_to_json(p->result);
    r["scenario_file"] = p->result.scenario_file;
    r["simulated"] = p->result.simulated;
    r["pruned"] = p->result.pruned;
    j["result"] = std::move(r);
    arr.push_back(std::move(j));
  }
  return nlohmann::json::to_cbor(arr);
}

std::vector<ExplorePoint> points_from_cbor(const std::vector<std::uint8_t>& bytes) {
  const nlohmann::json arr = nlohmann::json::from_cbor(bytes);
  std::vector<ExplorePoint> out;
  out.reserve(arr.size());
  for (const auto& j : arr) {
    ExplorePoint p;
    j.at("settings").get_to(p.settings);
    j.at("valid").get_to(p.valid);
    j.at("error").get_to(p.error);
    p.result = result_from_json(j.at("result"));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace stepcast
