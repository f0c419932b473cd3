// The `framework:` key (sim/plan/framework.h, sim/scenario/framework_section.cc): presets,
// rule overrides, and the errors for unknown names, unknown rules and bad values.
#include <gtest/gtest.h>

#include <array>

#include "tests/sim/scenario/scenario_doc.h"

namespace stepcast {
namespace {

using scenario_test::base;
using scenario_test::Doc;
using scenario_test::expect_issue;
using scenario_test::load;

TEST(Framework, DefaultIsMegatronCoreAndEveryPresetLoads) {
  const Scenario sc = load(base());
  EXPECT_EQ(sc.framework.name, Framework::kMegatronCore);
  EXPECT_EQ(sc.framework.zero3_gather, GatherUnit::kBlock);
  for (const std::string& name : framework_names()) {
    const Scenario s = load(base().insert(2, "framework: " + name));
    EXPECT_STREQ(framework_name(s.framework.name), name.c_str());
  }
}

TEST(Framework, DeepSpeedPresetCarriesItsStage3Defaults) {
  // DeepSpeedZeroConfig: stage3_prefetch_bucket_size 5e7, stage3_param_persistence_threshold
  // 1e5, stage3_max_reuse_distance 1e9; __max_ongoing_fetch_events 2.
  const FrameworkRules r = load(base().insert(2, "framework: deepspeed")).framework;
  EXPECT_EQ(r.zero3_gather, GatherUnit::kSubmodule);
  EXPECT_DOUBLE_EQ(r.zero3_prefetch_elements, 5e7);
  EXPECT_DOUBLE_EQ(r.zero3_persistence_elements, 1e5);
  EXPECT_DOUBLE_EQ(r.zero3_reuse_distance_elements, 1e9);
  EXPECT_EQ(r.zero3_max_inflight_fetches, 2);
}

// The lowering rules per preset (framework.cc): Megatron-Core runs the asynchronous
// input-gradient reduction, the blocking batched 1F1B p2p and TE's fp8 storage;
// Megatron-LM 2020-22 the blocking p2p only (its _communicate synchronizes), in the
// interleaved schedule too, and the scatter-gather of pipeline messages; DeepSpeed and
// Megatron-DeepSpeed none of the TP / TE rules; FSDP2 none (DTensor TP, pipelining's
// asynchronous p2p, no TE).
TEST(Framework, PresetsCarryTheirLoweringRules) {
  struct Want {
    const char* name;
    bool async_tp, blocking_p2p, te_fp8, megatron_lm_p2p;
  };
  for (const Want& w :
       {Want{"megatron-core", true, true, true, false},
        Want{"megatron-lm", false, true, false, true},
        Want{"megatron-deepspeed", false, true, false, false},
        Want{"deepspeed", false, true, false, false}, Want{"fsdp2", false, false, false, false}}) {
    const FrameworkRules r = load(base().insert(2, std::string("framework: ") + w.name)).framework;
    EXPECT_EQ(r.async_tp_dgrad_reduce, w.async_tp) << w.name;
    EXPECT_EQ(r.blocking_p2p_1f1b, w.blocking_p2p) << w.name;
    EXPECT_EQ(r.te_fp8_storage, w.te_fp8) << w.name;
    EXPECT_EQ(r.blocking_p2p_interleaved, w.megatron_lm_p2p) << w.name;
    EXPECT_EQ(r.p2p_scatter_gather, w.megatron_lm_p2p) << w.name;
  }
  // Megatron-Core with Megatron-LM's interleaved p2p, Megatron-LM without it.
  const FrameworkRules core =
      load(
          base().insert(2, "framework: {blocking_p2p_interleaved: true, p2p_scatter_gather: true}"))
          .framework;
  EXPECT_TRUE(core.blocking_p2p_interleaved);
  EXPECT_TRUE(core.p2p_scatter_gather);
  EXPECT_TRUE(core.async_tp_dgrad_reduce);  // the preset's
  const FrameworkRules lm = load(base().insert(2,
                                               "framework: {name: megatron-lm, "
                                               "blocking_p2p_interleaved: false, "
                                               "p2p_scatter_gather: false}"))
                                .framework;
  EXPECT_FALSE(lm.blocking_p2p_interleaved);
  EXPECT_FALSE(lm.p2p_scatter_gather);
  EXPECT_TRUE(lm.blocking_p2p_1f1b);                          // the preset's
  EXPECT_TRUE(load(base()).framework.async_tp_dgrad_reduce);  // the default is megatron-core
  const FrameworkRules o =
      load(base().insert(2,
                         "framework: {name: megatron-lm, async_tp_dgrad_reduce: true, "
                         "blocking_p2p_1f1b: false}"))
          .framework;
  EXPECT_TRUE(o.async_tp_dgrad_reduce);
  EXPECT_FALSE(o.blocking_p2p_1f1b);
  EXPECT_FALSE(o.te_fp8_storage);  // the preset's
  EXPECT_FALSE(
      load(base().insert(2, "framework: {te_fp8_storage: false}")).framework.te_fp8_storage);
  // FP8 primary weights: Megatron's default off in every preset, on when stated.
  for (const std::string& name : framework_names())
    EXPECT_FALSE(load(base().insert(2, "framework: " + name)).framework.fp8_param_gather) << name;
  EXPECT_TRUE(
      load(base().insert(2, "framework: {fp8_param_gather: true}")).framework.fp8_param_gather);
  // The fused loss: Megatron-Core's default (cross_entropy_loss_fusion) off in every preset.
  for (const std::string& name : framework_names())
    EXPECT_FALSE(load(base().insert(2, "framework: " + name)).framework.fused_cross_entropy)
        << name;
  EXPECT_TRUE(load(base().insert(2, "framework: {fused_cross_entropy: true}"))
                  .framework.fused_cross_entropy);
  // The host: 10 us a launch and 2 us a view-like op in every preset (eager PyTorch); the
  // loss NaN check only in
  // Megatron-Core's; list collectives in none (the flat forms since PyTorch 1.11).
  for (const std::string& name : framework_names()) {
    const FrameworkRules r = load(base().insert(2, "framework: " + name)).framework;
    EXPECT_DOUBLE_EQ(r.host_launch_us, 10.0) << name;
    EXPECT_DOUBLE_EQ(r.host_op_us, 2.0) << name;
    EXPECT_EQ(r.loss_nan_check, name == "megatron-core") << name;
    EXPECT_FALSE(r.list_collectives) << name;
    EXPECT_FALSE(r.zero3_fetch_sync) << name;  // an era's rule (DeepSpeed <= 0.5), no preset's
  }
  const FrameworkRules h = load(base().insert(2,
                                              "framework: {name: deepspeed, host_launch_us: 0, "
                                              "list_collectives: true, loss_nan_check: true, "
                                              "host_op_us: 3.5}"))
                               .framework;
  EXPECT_DOUBLE_EQ(h.host_launch_us, 0.0);
  EXPECT_DOUBLE_EQ(h.host_op_us, 3.5);
  EXPECT_TRUE(h.list_collectives);
  EXPECT_TRUE(h.loss_nan_check);
  // ZeRO-3's copies: DeepSpeed's and FSDP2's own, none for the Megatron presets (their
  // gathers land in the buffers the parameters view); any preset takes another's.
  for (const std::string& name : framework_names()) {
    const FrameworkRules r = load(base().insert(2, "framework: " + name)).framework;
    EXPECT_STREQ(zero3_copies_name(r.zero3_copies),
                 name == "deepspeed" || name == "fsdp2" ? name.c_str() : "none")
        << name;
  }
  EXPECT_EQ(load(base().insert(2, "framework: {name: deepspeed, zero3_copies: fsdp2}"))
                .framework.zero3_copies,
            Zero3Copies::kFsdp2);
  EXPECT_EQ(
      load(base().insert(2, "framework: {name: fsdp2, zero3_copies: none}")).framework.zero3_copies,
      Zero3Copies::kNone);
  // DeepSpeed's host waits on its reduce-scatters: at most 2 outstanding, all done at the end
  // of every backward; FSDP2's compute stream on the previous group's; no other preset
  // waits.
  for (const std::string& name : framework_names()) {
    const FrameworkRules r = load(base().insert(2, "framework: " + name)).framework;
    EXPECT_EQ(r.zero3_max_inflight_reduces, name == "deepspeed" ? 2
                                            : name == "fsdp2"   ? 0
                                                                : -1)
        << name;
    // DeepSpeed's engine (also under Megatron-DeepSpeed) syncs each ZeRO-2/3 backward,
    // reduces after the backward without ZeRO-2/3, all-reduces ZeRO-1/2 buckets of 5e8.
    const bool ds_engine = name == "deepspeed" || name == "megatron-deepspeed";
    EXPECT_EQ(r.sync_reduces_each_backward, ds_engine) << name;
    EXPECT_EQ(r.dp_reduce_after_backward, ds_engine) << name;
    EXPECT_EQ(r.zero12_all_reduce, ds_engine) << name;
    EXPECT_EQ(r.zero12_gather_after_step, ds_engine) << name;
    EXPECT_EQ(r.grad_bucket_elements, ds_engine ? 5e8 : 0.0) << name;
    // Megatron-Core's DDP buckets pipeline rank 0's first chunk only.
    EXPECT_EQ(r.buckets_first_chunk_only, name == "megatron-core") << name;
    EXPECT_EQ(r.grad_nan_check, name == "megatron-core") << name;
    EXPECT_EQ(r.pipeline_max_zero, ds_engine ? 1 : 3) << name;
    EXPECT_EQ(r.deepspeed_pipe_engine, ds_engine) << name;
    EXPECT_TRUE(r.fused_optimizer) << name;  // every stack's default (frameworks.md)
    // Megatron-Core fuses the weight-gradient accumulation; the 2021 Megatron-LM, DeepSpeed's
    // engine and PyTorch add each microbatch's gradient with a kernel of its own.
    EXPECT_EQ(r.grad_accumulation_fusion, name == "megatron-core") << name;
    EXPECT_EQ(r.zero3_fp32_shards, name == "fsdp2") << name;
  }
  const FrameworkRules w = load(base().insert(2,
                                              "framework: {name: deepspeed, "
                                              "zero3_max_inflight_reduces: -1, "
                                              "sync_reduces_each_backward: false, "
                                              "dp_reduce_after_backward: false, "
                                              "zero12_all_reduce: false, "
                                              "zero12_gather_after_step: false, "
                                              "grad_bucket_elements: 2e8}"))
                               .framework;
  EXPECT_EQ(w.zero3_max_inflight_reduces, -1);
  EXPECT_FALSE(w.sync_reduces_each_backward);
  EXPECT_FALSE(w.dp_reduce_after_backward);
  EXPECT_FALSE(w.zero12_all_reduce);
  EXPECT_FALSE(w.zero12_gather_after_step);
  EXPECT_EQ(w.grad_bucket_elements, 2e8);
  // Every preset reshards after the forward; a run may keep its blocks unsharded.
  EXPECT_FALSE(
      load(base().insert(2, "framework: {name: fsdp2, zero3_reshard_after_forward: false}"))
          .framework.zero3_reshard_after_forward);
  const FrameworkRules pp = load(base().insert(2,
                                               "framework: {name: fsdp2, "
                                               "zero3_reshard_after_backward: false, "
                                               "zero3_reduce_every_microbatch: false}"))
                                .framework;
  EXPECT_FALSE(pp.zero3_reshard_after_backward);
  EXPECT_FALSE(pp.zero3_reduce_every_microbatch);
}

TEST(Framework, MappingOverridesOneRuleOfItsPreset) {
  const FrameworkRules r =
      load(base().insert(2, "framework: {name: deepspeed, zero3_prefetch_elements: 2e8}"))
          .framework;
  EXPECT_EQ(r.name, Framework::kDeepSpeed);
  EXPECT_DOUBLE_EQ(r.zero3_prefetch_elements, 2e8);
  EXPECT_DOUBLE_EQ(r.zero3_reuse_distance_elements, 1e9);  // the preset's
  // Without a name: megatron-core's preset with the rule changed.
  const FrameworkRules m = load(base().insert(2, "framework: {zero3_gather: submodule}")).framework;
  EXPECT_EQ(m.name, Framework::kMegatronCore);
  EXPECT_EQ(m.zero3_gather, GatherUnit::kSubmodule);
  EXPECT_EQ(m.zero3_max_inflight_fetches, 0);
}

TEST(Framework, UnknownNamesAndRulesSuggestTheClosest) {
  expect_issue(base().insert(2, "framework: deepsped"), "framework", 2,
               "did you mean 'deepspeed'?");
  expect_issue(base().insert(2, "framework: {name: fsdp}"), "framework.name", 2,
               "did you mean 'fsdp2'?");
  expect_issue(base().insert(2, "framework: {name: deepspeed, zero3_prefetch_element: 1}"),
               "framework.zero3_prefetch_element", 2, "did you mean 'zero3_prefetch_elements'?");
  // The issue's own spelling, another unit for the same rule.
  expect_issue(base().insert(2, "framework: {name: deepspeed, zero3_prefetch_mb: 50}"),
               "framework.zero3_prefetch_mb", 2, "did you mean 'zero3_prefetch_elements'?");
  expect_issue(base().insert(2, "framework: {zero3_gather: layer}"), "framework.zero3_gather", 2,
               "known: block, submodule");
}

TEST(Framework, BadValuesAreLocated) {
  struct Bad {
    const char* line;  // inserted as line 2
    const char* key;
    const char* text;  // in the message
  };
  for (const Bad& b : {
           Bad{"framework: [deepspeed]", "framework", "expected a framework name"},
           Bad{"framework: {zero3_prefetch_elements: -5}", "framework.zero3_prefetch_elements", ""},
           Bad{"framework: {zero3_reuse_distance_elements: -0.5}",
               "framework.zero3_reuse_distance_elements", "or -1"},
           Bad{"framework: {zero3_max_inflight_fetches: two}",
               "framework.zero3_max_inflight_fetches", ""},
           Bad{"framework: {te_fp8_storage: maybe}", "framework.te_fp8_storage", ""},
           Bad{"framework: {fused_cross_entropy: 1.5}", "framework.fused_cross_entropy", ""},
           Bad{"framework: {name: megatron-lm, async_tp_reduce: true}", "framework.async_tp_reduce",
               "unknown key"},
           Bad{"framework: {blocking_p2p_interleaved: 1.5}", "framework.blocking_p2p_interleaved",
               ""},
           Bad{"framework: {p2p_scatter_gather: sometimes}", "framework.p2p_scatter_gather", ""},
           Bad{"framework: {host_launch_us: -1}", "framework.host_launch_us", ""},
           Bad{"framework: {host_launch_us: 5000}", "framework.host_launch_us", ""},
           Bad{"framework: {host_launch_us: fast}", "framework.host_launch_us", ""},
           Bad{"framework: {host_op_us: -0.5}", "framework.host_op_us", ""},
           Bad{"framework: {host_op_us: 2000}", "framework.host_op_us", ""},
           Bad{"framework: {list_collectives: 2}", "framework.list_collectives", ""},
           Bad{"framework: {zero3_fetch_sync: later}", "framework.zero3_fetch_sync", ""},
           Bad{"framework: {zero3_copies: torch}", "framework.zero3_copies",
               "none, deepspeed, fsdp2"},
           Bad{"framework: {zero3_copies: [none]}", "framework.zero3_copies", ""},
           Bad{"framework: {zero3_max_inflight_reduces: -2}",
               "framework.zero3_max_inflight_reduces", ""},
           Bad{"framework: {zero3_max_inflight_reduces: 1.5}",
               "framework.zero3_max_inflight_reduces", ""},
           Bad{"framework: {zero3_reshard_after_backward: never}",
               "framework.zero3_reshard_after_backward", ""},
           Bad{"framework: {zero3_reduce_every_microbatch: [true]}",
               "framework.zero3_reduce_every_microbatch", ""},
           Bad{"framework: {zero3_reshard_after_forward: 0.5}",
               "framework.zero3_reshard_after_forward", ""},
           Bad{"framework: {sync_reduces_each_backward: yes please}",
               "framework.sync_reduces_each_backward", ""},
           Bad{"framework: {zero3_sync_reduces_each_backward: true}",
               "framework.zero3_sync_reduces_each_backward",
               "did you mean 'sync_reduces_each_backward'?"},
           Bad{"framework: {dp_reduce_after_backward: later}", "framework.dp_reduce_after_backward",
               ""},
           Bad{"framework: {zero12_all_reduce: 3}", "framework.zero12_all_reduce", ""},
           Bad{"framework: {buckets_first_chunk_only: first}", "framework.buckets_first_chunk_only",
               ""},
           Bad{"framework: {zero12_gather_after_step: soon}", "framework.zero12_gather_after_step",
               ""},
           Bad{"framework: {grad_bucket_elements: 1000}", "framework.grad_bucket_elements",
               "at least 1e5"},
           Bad{"framework: {grad_bucket_elements: -5}", "framework.grad_bucket_elements", ""},
           Bad{"framework: {grad_bucket_elements: big}", "framework.grad_bucket_elements", ""},
           Bad{"framework: {loss_nan_check: often}", "framework.loss_nan_check", ""},
           Bad{"framework: {grad_nan_check: always}", "framework.grad_nan_check", ""},
           Bad{"framework: {pipeline_max_zero: 4}", "framework.pipeline_max_zero", ""},
           Bad{"framework: {fused_optimizer: 2}", "framework.fused_optimizer", ""},
           Bad{"framework: {grad_accumulation_fusion: fp32}", "framework.grad_accumulation_fusion",
               ""},
           Bad{"framework: {zero3_fp32_shards: fp32}", "framework.zero3_fp32_shards", ""},
           Bad{"framework: {pipeline_max_zero: one}", "framework.pipeline_max_zero", ""},
           Bad{"framework: {name: megatron-lm, blocking_p2p_interleave: true}",
               "framework.blocking_p2p_interleave", "did you mean 'blocking_p2p_interleaved'?"},
       })
    expect_issue(base().insert(2, b.line), b.key, 2, b.text);
}

TEST(Framework, DeepSpeedPipelinesTakeZero1AtMost) {
  // DeepSpeed's pipeline engine asserts ZeRO-2/3 are incompatible with pipelining
  // (pipe/engine.py): zero 2 with pp 2 under deepspeed is an error at parallel.zero (line
  // 20 once the framework line is in) naming the rule; zero 1 with pp 2, zero 2 with pp 1,
  // Megatron-Core and the rule lifted all load.
  auto plan = [](const std::string& fw, int pp, int zero) {
    Doc d = base().insert(2, "framework: " + fw);
    d.set(18, "  pp: " + std::to_string(pp));
    d.lines.push_back("  zero: " + std::to_string(zero));  // line 20
    return d;
  };
  expect_issue(plan("deepspeed", 2, 2), "parallel.zero", 20, "pipeline_max_zero");
  expect_issue(plan("megatron-deepspeed", 2, 3), "parallel.zero", 20, "refuses ZeRO-2 and ZeRO-3");
  EXPECT_EQ(load(plan("deepspeed", 2, 1)).parallel.zero, 1);
  EXPECT_EQ(load(plan("deepspeed", 1, 2)).parallel.zero, 2);
  EXPECT_EQ(load(plan("megatron-core", 2, 2)).parallel.zero, 2);
  EXPECT_EQ(load(plan("{name: deepspeed, pipeline_max_zero: 3}", 2, 2)).parallel.zero, 2);
  // A limit the scenario sets is its own, not DeepSpeed's: the message says so.
  const std::string mine = "framework rule pipeline_max_zero, as the scenario sets it";
  expect_issue(plan("{name: megatron-core, pipeline_max_zero: 1}", 2, 2), "parallel.zero", 20,
               mine);
  expect_issue(plan("{name: deepspeed, pipeline_max_zero: 0}", 2, 1), "parallel.zero", 20, mine);
  for (const char* fw :
       {"{name: megatron-core, pipeline_max_zero: 1}", "{name: deepspeed, pipeline_max_zero: 0}"}) {
    try {
      load(plan(fw, 2, 2));
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find("DeepSpeed's pipeline engine"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Framework, EachStackRunsItsZeroLevels) {
  // Megatron-LM before Megatron-Core has replicas and the distributed optimizer (zero 0, 1);
  // FSDP2 replicas (DDP) or fully_shard (0, 3); the others all four. Another level is an
  // error at parallel.zero (line 20) naming the stack's reason, or the scenario's own rule
  // when it sets the levels.
  auto plan = [](const std::string& fw, int zero) {
    Doc d = base().insert(2, "framework: " + fw);
    d.lines.push_back("  zero: " + std::to_string(zero));  // line 20
    return d;
  };
  for (const std::string& name : framework_names()) {
    const auto levels = load(base().insert(2, "framework: " + name)).framework.zero_levels;
    const std::array<bool, 4> want = name == "megatron-lm" ? std::array{true, true, false, false}
                                     : name == "fsdp2"     ? std::array{true, false, false, true}
                                                           : std::array{true, true, true, true};
    EXPECT_EQ(levels, want) << name;
  }
  expect_issue(plan("megatron-lm", 2), "parallel.zero", 20,
               "megatron-lm runs zero 0 or 1 (got zero 2; Megatron-LM before Megatron-Core");
  expect_issue(plan("megatron-lm", 3), "parallel.zero", 20, "distrib_optimizer.py");
  expect_issue(plan("fsdp2", 1), "parallel.zero", 20, "fsdp2 runs zero 0 or 3 (got zero 1; FSDP2");
  expect_issue(plan("fsdp2", 2), "parallel.zero", 20, "SHARD_GRAD_OP");
  EXPECT_EQ(load(plan("megatron-lm", 1)).parallel.zero, 1);
  EXPECT_EQ(load(plan("fsdp2", 3)).parallel.zero, 3);
  EXPECT_EQ(load(plan("fsdp2", 0)).parallel.zero, 0);
  EXPECT_EQ(load(plan("{name: fsdp2, zero_levels: [0, 1, 2, 3]}", 2)).parallel.zero, 2);
  expect_issue(plan("{name: megatron-core, zero_levels: [3, 0]}", 1), "parallel.zero", 20,
               "megatron-core runs zero 0 or 3 (got zero 1; framework rule zero_levels, as the "
               "scenario sets it)");
  struct Bad {
    const char* line;
    const char* key;
    const char* text;
  };
  for (const Bad& b : {
           Bad{"framework: {zero_levels: 1}", "framework.zero_levels", "non-empty list"},
           Bad{"framework: {zero_levels: []}", "framework.zero_levels", "non-empty list"},
           Bad{"framework: {zero_levels: [0, 4]}", "framework.zero_levels[1]", "[0, 3]"},
           Bad{"framework: {zero_levels: [1, 1]}", "framework.zero_levels[1]", "duplicate level 1"},
           Bad{"framework: {zero_levels: [zero]}", "framework.zero_levels[0]", ""},
       })
    expect_issue(base().insert(2, b.line), b.key, 2, b.text);
}

TEST(Framework, TpCommOverlapOnlyWhereTheStackHasIt) {
  // Transformer Engine's userbuffers (Megatron-Core) or TorchTitan's async TP (FSDP2): the
  // other stacks have no TP communication overlap, and a scenario asking for it is an error
  // at parallel.overlap.tp_comm (line 21 once the framework line is in), naming the rule;
  // with the rule set, or under Megatron-Core, it loads.
  auto plan = [](const std::string& fw) {
    Doc d = base().insert(2, "framework: " + fw);
    d.lines.push_back("  sequence_parallel: true");   // line 20
    d.lines.push_back("  overlap: {tp_comm: true}");  // line 21
    return d;
  };
  for (const std::string& name : framework_names()) {
    const bool has = name == "megatron-core" || name == "fsdp2";
    EXPECT_EQ(load(base().insert(2, "framework: " + name)).framework.tp_comm_overlap, has) << name;
    if (has) {
      EXPECT_TRUE(load(plan(name)).parallel.overlap_tp_comm) << name;
    } else {
      expect_issue(plan(name), "parallel.overlap.tp_comm", 21,
                   name + " has no tensor-parallel communication overlap");
    }
  }
  EXPECT_TRUE(load(plan("{name: megatron-lm, tp_comm_overlap: true}")).parallel.overlap_tp_comm);
  expect_issue(plan("{name: megatron-core, tp_comm_overlap: false}"), "parallel.overlap.tp_comm",
               21, "framework rule tp_comm_overlap");
  expect_issue(base().insert(2, "framework: {tp_comm_overlap: yes please}"),
               "framework.tp_comm_overlap", 2, "");
}

TEST(Framework, DeepSpeedPipelinesRun1f1bOnly) {
  // DeepSpeed's pipeline engine has one training schedule, TrainSchedule (1F1B;
  // pipe/schedule.py): another schedule with pp > 1 under deepspeed or megatron-deepspeed is
  // an error at parallel.schedule (line 21 once the framework line is in) naming the rule;
  // 1F1B, one stage, Megatron-Core and the rule lifted all load.
  auto plan = [](const std::string& fw, int pp, const std::string& sched, int vpp) {
    Doc d = base().insert(2, "framework: " + fw);
    d.set(18, "  pp: " + std::to_string(pp));
    d.lines.push_back("  vpp: " + std::to_string(vpp));  // line 20
    d.lines.push_back("  schedule: " + sched);           // line 21
    return d;
  };
  expect_issue(plan("deepspeed", 2, "interleaved", 2), "parallel.schedule", 21,
               "deepspeed runs its pipeline on DeepSpeed's engine, whose only training schedule "
               "is 1F1B (got interleaved with pp 2");
  expect_issue(plan("megatron-deepspeed", 2, "zb-h1", 1), "parallel.schedule", 21,
               "framework rule deepspeed_pipe_engine");
  expect_issue(plan("megatron-deepspeed", 2, "gpipe", 1), "parallel.schedule", 21, "got gpipe");
  EXPECT_EQ(load(plan("deepspeed", 2, "1f1b", 1)).parallel.schedule, Schedule::k1F1B);
  EXPECT_EQ(load(plan("deepspeed", 1, "zb-h1", 1)).parallel.pp, 1);
  EXPECT_EQ(load(plan("megatron-core", 2, "interleaved", 2)).parallel.vpp, 2);
  EXPECT_EQ(
      load(plan("{name: megatron-deepspeed, deepspeed_pipe_engine: false}", 2, "interleaved", 2))
          .parallel.vpp,
      2);
  expect_issue(base().insert(2, "framework: {deepspeed_pipe_engine: often}"),
               "framework.deepspeed_pipe_engine", 2, "");
  // DeepSpeed's engine blocks on every message: asynchronous 1F1B p2p beside it is a
  // contradiction, reported at the key the scenario set (line 2), not a silent choice.
  expect_issue(base().insert(2, "framework: {name: deepspeed, blocking_p2p_1f1b: false}"),
               "framework.blocking_p2p_1f1b", 2, "needs blocking_p2p_1f1b: true");
  expect_issue(base().insert(2, "framework: {name: fsdp2, deepspeed_pipe_engine: true}"),
               "framework.deepspeed_pipe_engine", 2, "set deepspeed_pipe_engine: false");
  EXPECT_TRUE(load(base().insert(2,
                                 "framework: {name: deepspeed, blocking_p2p_1f1b: false, "
                                 "deepspeed_pipe_engine: false}"))
                  .framework.name == Framework::kDeepSpeed);
}

TEST(Framework, MasterWeightRemaindersNeedBf16Weights) {
  // Apex DistributedFusedAdam's store_param_remainders: off in every preset; it loads with
  // bf16 or fp8 training (bf16 weights); fp16 weights are an error at
  // framework.master_weight_remainders (line 2), a non-boolean at the same key.
  for (const std::string& name : framework_names())
    EXPECT_FALSE(load(base().insert(2, "framework: " + name)).framework.master_weight_remainders)
        << name;
  auto doc = [](const std::string& dtype) {  // training.dtype at line 16
    return base()
        .insert(2, "framework: {master_weight_remainders: true}")
        .insert(16, "  dtype: " + dtype);
  };
  EXPECT_TRUE(load(doc("bf16")).framework.master_weight_remainders);
  EXPECT_TRUE(load(doc("fp8")).framework.master_weight_remainders);
  const std::string key = "framework.master_weight_remainders";
  expect_issue(doc("fp16"), key, 2, "needs bf16 weights (training.dtype bf16 or fp8, got fp16)");
  expect_issue(base().insert(2, "framework: {master_weight_remainders: 2}"), key, 2, "");
}

TEST(Framework, DeferredOutputWgradOnlyWhereItIsModelled) {
  // Megatron-Core's defer_embedding_wgrad_compute with its wgrad_deferral_limit (0: every
  // call): off in every preset; set, it loads under Megatron-Core with zero 0 or 1 and a
  // schedule that keeps each weight gradient in its backward. Another stack, zero 2 or 3, or
  // ZB-H1 / DualPipeV is an error at framework.defer_embedding_wgrad_compute (line 2) saying
  // why; a negative limit or a non-boolean at its own key.
  auto doc = [](const std::string& fw, int zero, const std::string& sched) {
    Doc d = base().insert(2, "framework: " + fw);
    d.lines.push_back("  zero: " + std::to_string(zero));  // line 20
    d.lines.push_back("  schedule: " + sched);             // line 21
    return d;
  };
  for (const std::string& name : framework_names()) {
    const FrameworkRules f = load(base().insert(2, "framework: " + name)).framework;
    EXPECT_FALSE(f.defer_embedding_wgrad_compute) << name;
    EXPECT_EQ(f.wgrad_deferral_limit, 0) << name;
  }
  const FrameworkRules on =
      load(doc("{defer_embedding_wgrad_compute: true, wgrad_deferral_limit: 22}", 1, "1f1b"))
          .framework;
  EXPECT_TRUE(on.defer_embedding_wgrad_compute);
  EXPECT_EQ(on.wgrad_deferral_limit, 22);
  EXPECT_TRUE(load(doc("{defer_embedding_wgrad_compute: true}", 0, "gpipe"))
                  .framework.defer_embedding_wgrad_compute);
  const std::string key = "framework.defer_embedding_wgrad_compute";
  expect_issue(doc("{name: deepspeed, defer_embedding_wgrad_compute: true}", 1, "1f1b"), key, 2,
               "deepspeed has no defer_embedding_wgrad_compute");
  expect_issue(doc("{defer_embedding_wgrad_compute: true}", 2, "1f1b"), key, 2,
               "only as modelled with zero 0 or 1 (Megatron's DDP or distributed optimizer), got "
               "zero 2");
  expect_issue(doc("{defer_embedding_wgrad_compute: true}", 3, "1f1b"), key, 2, "got zero 3");
  expect_issue(doc("{defer_embedding_wgrad_compute: true}", 1, "zb-h1"), key, 2,
               "keep each weight gradient in its backward, got zb-h1");
  // The limit alone, as Megatron allows, changes nothing; a bad one is located.
  EXPECT_FALSE(
      load(doc("{wgrad_deferral_limit: 5}", 2, "1f1b")).framework.defer_embedding_wgrad_compute);
  expect_issue(base().insert(2, "framework: {wgrad_deferral_limit: -1}"),
               "framework.wgrad_deferral_limit", 2, "");
  expect_issue(base().insert(2, "framework: {defer_embedding_wgrad_compute: sometimes}"), key, 2,
               "");
}

}  // namespace
}  // namespace stepcast
