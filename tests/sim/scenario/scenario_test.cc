// Scenario loading: every validation rule has a test asserting the message, the key path
// and the line (sim/scenario/scenario.cc lists the rules). Inline documents are built from
// numbered lines (Doc, scenario_doc.h) so the expected line of each problem is visible in
// the test. This file: each key and section (model, cluster, training), the shipped
// files; scenario_plan_test.cc: the rules across sections, problems at once, sweeps.
#include "sim/scenario/scenario.h"

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sim/io/yaml_util.h"
#include "tests/sim/scenario/scenario_doc.h"

namespace stepcast {
namespace {

using namespace scenario_test;

TEST(ScenarioLoad, BaseLoadsWithDerivedDp) {
  Scenario s = load(base());
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.gpus, 16);
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.parallel.dp, 4);      // 16 / (2*2*1)
  EXPECT_EQ(s.microbatches(), 16);  // 64 / (4*1)
  EXPECT_EQ(s.model.kv_heads, 8);
  EXPECT_EQ(s.model.activation, Activation::kGelu);  // documented default
  EXPECT_EQ(s.profile.name, "h100-sxm");
  EXPECT_EQ(s.training.dtype, DType::kBf16);
  EXPECT_EQ(s.parallel.schedule, Schedule::k1F1B);
  EXPECT_EQ(s.network, NetworkMode::kAnalytical);
}

// ---- generic key checks ------------------------------------------------------------------
TEST(ScenarioRules, UnknownKeySuggestsNearest) {
  expect_issue(base().insert(19, "  shedule: gpipe"), "parallel.shedule", 19,
               "unknown key (did you mean 'schedule'?)");
}

TEST(ScenarioRules, UnknownTopLevelKeySuggestsNearest) {
  auto issues = issues_of(base().set(12, "trainig:"));
  expect_issue(issues, "trainig", 12, "did you mean 'training'?");
  expect_issue(issues, "training", 1, "missing required key");  // the root mapping: line 1
}

TEST(ScenarioRules, DuplicateKey) {
  expect_issue(base().insert(19, "  tp: 4"), "parallel.tp", 19, "duplicate key");
}

// Found by hand beside the fuzzer: a second document after `---` was silently ignored (only
// the first was read), and control characters in a string (a NUL, an escape sequence that
// recolours the terminal) went to the terminal and the reports as they were.
TEST(ScenarioRules, SecondYamlDocumentIsRefused) {
  // base() has 18 lines: `---` is line 19, the second document starts on line 20.
  const std::vector<InputIssue> issues = issues_of(base().insert(19, "---").insert(20, "name: u"));
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].file, "t.yaml");
  EXPECT_EQ(issues[0].line, 20);
  EXPECT_EQ(issues[0].message, "a second YAML document (after `---`): the file must hold one");
  // A `---` before the only document, or after it with nothing following, is fine.
  EXPECT_EQ(load(base().insert(1, "---")).name, "t");
  EXPECT_EQ(load(base().insert(19, "---")).name, "t");
}

TEST(ScenarioRules, ControlCharactersInTextAreRefused) {
  expect_issue(base().set(1, "name: \"a\\x1b[31mred\""), "name", 1,
               "expected text without control characters, got byte 0x1b");
  expect_issue(base().set(1, "name: \"a\\0b\""), "name", 1, "got byte 0x00");
  EXPECT_EQ(load(base().set(1, "name: \"two\\nlines\\tand a tab\"")).name, "two\nlines\tand a tab");
}

TEST(ScenarioRules, WrongType) {
  expect_issue(base().set(16, "  tp: two"), "parallel.tp", 16, "expected an integer, got \"two\"");
  expect_issue(base().insert(19, "  sequence_parallel: maybe"), "parallel.sequence_parallel", 19,
               "expected true or false");
  expect_issue(base().insert(19, "  overlap: [1]"), "parallel.overlap", 19, "expected a mapping");
}

TEST(ScenarioRules, OutOfRange) {
  expect_issue(base().insert(19, "  zero: 4"), "parallel.zero", 19,
               "expected an integer in [0, 3], got 4");
  expect_issue(base().set(16, "  tp: 0"), "parallel.tp", 16, "expected an integer in [1,");
  expect_issue(base().set(14, "  global_batch: -8"), "training.global_batch", 14,
               "expected an integer in [1,");
  expect_issue(base().insert(19, "  bucket_mb: 0"), "parallel.bucket_mb", 19,
               "expected a positive number");
}

TEST(ScenarioRules, MissingRequiredKey) {
  expect_issue(base().set(13, "  dtype: bf16"), "training.seq_len", 13, "missing required key");
  expect_issue(base().set(3, "  norm: rmsnorm"), "model.layers", 3, "missing required key");
}

TEST(ScenarioRules, UnknownNamesListTheKnownOnes) {
  expect_issue(
      base().insert(19, "  schedule: 1f1c"), "parallel.schedule", 19,
      "unknown value \"1f1c\" (known: gpipe, 1f1b, interleaved, zb-h1, dualpipev); did you mean "
      "'1f1b'?");
  expect_issue(base().insert(19, "  recompute: some"), "parallel.recompute", 19,
               "(known: none, selective, full)");
  expect_issue(base().insert(19, "  cp_kind: ulysses"), "parallel.cp_kind", 19,
               "(known: ring, allgather)");
  expect_issue(base().insert(19, "network: packet"), "network", 19, "(known: analytical, flow)");
  expect_issue(base().insert(15, "  optimizer: lion"), "training.optimizer", 15,
               "(known: adam, sgd)");
  expect_issue(base().insert(15, "  dtype: fp4"), "training.dtype", 15,
               "(known: bf16, fp16, fp8, mxfp8, nvfp4)");
  expect_issue(base().set(10, "  profile: h100-sxn"), "cluster.profile", 10,
               "unknown profile \"h100-sxn\"");
  expect_issue(base().set(10, "  profile: h100-sxn"), "cluster.profile", 10,
               "did you mean 'h100-sxm'?");
}

TEST(ScenarioRules, UnknownBuiltinModelListsKnownOnes) {
  Doc d{{"model: llama9-8b", "cluster: {profile: h100-sxm, nodes: 1}",
         "training: {seq_len: 2048, global_batch: 8}"}};
  auto issues = issues_of(d);
  expect_issue(issues, "model", 1, "unknown model \"llama9-8b\" (built-in: ");
  for (const auto& n : builtin_model_names())
    EXPECT_NE(issues.at(0).message.find(n), std::string::npos) << n;
}

TEST(ScenarioLoad, BuiltinModelByName) {
  ASSERT_NE(find_builtin_model("llama3-8b"), nullptr);
  Doc d{{"model: llama3-8b", "cluster: {profile: h100-sxm, nodes: 1}",
         "training: {seq_len: 2048, global_batch: 8}", "parallel: {tp: 8}"}};
  Scenario s = load(d);
  EXPECT_EQ(s.model.layers, find_builtin_model("llama3-8b")->layers);
  EXPECT_EQ(s.parallel.dp, 1);  // 8 GPUs / tp 8
}

// ---- inline model ------------------------------------------------------------------------
TEST(ScenarioRules, InlineModelKeys) {
  expect_issue(base().set(4, "  hiden: 1024"), "model.hiden", 4, "did you mean 'hidden'?");
  expect_issue(base().set(7, "  activation: relu"), "model.activation", 7, "(known: gelu, swiglu)");
  expect_issue(base().set(7, "  norm: batchnorm"), "model.norm", 7, "(known: layernorm, rmsnorm)");
  expect_issue(base().set(7, "  kv_heads: 6"), "model.kv_heads", 7,
               "heads (16) must be a multiple of kv_heads (6)");
  expect_issue(base().set(7, "  kv_heads: 32"), "model.kv_heads", 7,
               "expected at most heads (16) KV heads");
  expect_issue(base().set(4, "  hidden: 1000"), "model.heads", 6,
               "hidden (1000) must be divisible by heads (16)");
  // With head_dim given, hidden need not divide: 1000 hidden, 16 heads of 64.
  EXPECT_EQ(load(base().set(4, "  hidden: 1000").insert(9, "  head_dim: 64")).model.head_dim, 64);
}

TEST(ScenarioRules, InlineModelDropoutAndAttentionShapes) {
  expect_issue(base().insert(9, "  dropout: sometimes"), "model.dropout", 9,
               "expected true or false");
  expect_issue(base().insert(9, "  qk_head_dim: 0"), "model.qk_head_dim", 9,
               "expected an integer in [1,");
  expect_issue(base().insert(9, "  qkv_features: -1"), "model.qkv_features", 9,
               "expected an integer in [1,");
  const Scenario s = load(base()
                              .insert(9, "  dropout: false")
                              .insert(10, "  qk_head_dim: 96")
                              .insert(11, "  qkv_features: 3000"));
  EXPECT_FALSE(s.model.dropout);
  EXPECT_EQ(s.model.qk_head_dim, 96);
  EXPECT_EQ(s.model.qkv_features, 3000);
  EXPECT_TRUE(load(base()).model.dropout);  // Megatron GPT's default
}

TEST(ScenarioRules, InlineModelMlaKeys) {
  // Multi-head latent attention (model/arch.h): base() has 16 heads, 8 KV heads, hidden 1024.
  Doc mla = base().set(7, "  kv_heads: 16");
  mla.insert(9, "  qk_head_dim: 96").insert(10, "  kv_lora_rank: 256");
  mla.insert(11, "  qk_rope_head_dim: 32").insert(12, "  q_lora_rank: 384");
  const Scenario s = load(mla);
  EXPECT_EQ(s.model.q_lora_rank, 384);
  EXPECT_EQ(s.model.kv_lora_rank, 256);
  EXPECT_EQ(s.model.qk_rope_head_dim, 32);
  expect_issue(base().insert(9, "  kv_lora_rank: 0"), "model.kv_lora_rank", 9,
               "expected an integer in [1,");
  expect_issue(base().insert(9, "  q_lora_rank: 384"), "model.q_lora_rank", 9,
               "needs kv_lora_rank");
  expect_issue(base().insert(9, "  qk_rope_head_dim: 32"), "model.qk_rope_head_dim", 9,
               "needs kv_lora_rank");
  expect_issue(base().set(7, "  kv_heads: 16").insert(9, "  kv_lora_rank: 256"),
               "model.kv_lora_rank", 9, "needs qk_rope_head_dim");
  // qk_head_dim (here head_dim 64 by default) must exceed the rope part.
  expect_issue(base()
                   .set(7, "  kv_heads: 16")
                   .insert(9, "  kv_lora_rank: 256")
                   .insert(10, "  qk_rope_head_dim: 64"),
               "model.qk_rope_head_dim", 10, "above qk_rope_head_dim (64), got 64");
  Doc fused = mla;
  expect_issue(fused.insert(13, "  qkv_features: 3072"), "model.qkv_features", 13,
               "cannot go with kv_lora_rank");
  Doc gqa = mla;
  expect_issue(gqa.set(7, "  kv_heads: 8"), "model.kv_heads", 7,
               "one key/value head per query head (16), got 8");
}

TEST(ScenarioLoad, InlineModelCanRestateEveryBuiltIn) {
  // Each built-in, written out as an inline mapping with every field it sets, loads to the
  // same architecture (the audit found llama3-8b inline 13.656 s / 53.61 GiB against 13.632 s
  // / 52.61 GiB built-in: dropout had no key).
  for (const std::string& name : builtin_model_names()) {
    const ModelArch& a = *find_builtin_model(name);
    std::string m = fmt::format(
        "model: {{name: {}, layers: {}, hidden: {}, ffn_hidden: {}, heads: {}, kv_heads: {}, "
        "vocab: {}, activation: {}, norm: {}, tied_embeddings: {}, dropout: {}",
        a.name, a.layers, a.hidden, a.ffn_hidden, a.heads, a.kv_heads, a.vocab,
        a.activation == Activation::kSwiglu ? "swiglu" : "gelu",
        a.norm == Norm::kRmsNorm ? "rmsnorm" : "layernorm", a.tied_embeddings, a.dropout);
    if (a.head_dim > 0) m += fmt::format(", head_dim: {}", a.head_dim);
    if (a.max_positions > 0) m += fmt::format(", max_positions: {}", a.max_positions);
    if (a.qk_head_dim > 0) m += fmt::format(", qk_head_dim: {}", a.qk_head_dim);
    if (a.qkv_features > 0) m += fmt::format(", qkv_features: {}", a.qkv_features);
    if (a.mla())
      m += fmt::format(", q_lora_rank: {}, kv_lora_rank: {}, qk_rope_head_dim: {}", a.q_lora_rank,
                       a.kv_lora_rank, a.qk_rope_head_dim);
    if (a.linear_bias) m += fmt::format(", linear_bias: {}", *a.linear_bias);
    if (a.qk_norm) m += ", qk_norm: true";
    if (a.attention_sinks) m += ", attention_sinks: true";
    if (a.window > 0) m += fmt::format(", window: {}, window_every: {}", a.window, a.window_every);
    if (a.mtp_layers > 0) m += fmt::format(", mtp_layers: {}", a.mtp_layers);
    if (a.moe) {
      m += fmt::format(
          ", moe: {{experts: {}, top_k: {}, ffn_hidden: {}, every: {}, imbalance: {}, "
          "shared_experts: {}, first_dense_layers: {}",
          a.moe->experts, a.moe->top_k, a.moe->ffn_hidden, a.moe->every, a.moe->imbalance,
          a.moe->shared_experts, a.moe->first_dense_layers);
      if (a.moe->capacity_factor > 0)
        m += fmt::format(", capacity_factor: {}", a.moe->capacity_factor);
      if (a.moe->router_groups > 0)
        m += fmt::format(", router_groups: {}, router_group_topk: {}", a.moe->router_groups,
                         a.moe->router_group_topk);
      m += "}";
    }
    m += "}";
    Doc d = base();
    d.lines.erase(d.lines.begin() + 1, d.lines.begin() + 8);  // the base's inline model
    d.insert(2, m);
    d.set(7, "  seq_len: 2048");              // within every built-in's learned positions
    d.set(10, "  tp: 1").set(11, "  pp: 1");  // any layer and head count
    const ModelArch got = load(d).model;
    EXPECT_EQ(got.layers, a.layers) << name;
    EXPECT_EQ(got.hidden, a.hidden) << name;
    EXPECT_EQ(got.ffn_hidden, a.ffn_hidden) << name;
    EXPECT_EQ(got.heads, a.heads) << name;
    EXPECT_EQ(got.kv_heads, a.kv_heads) << name;
    EXPECT_EQ(got.dim_per_head(), a.dim_per_head()) << name;
    EXPECT_EQ(got.dim_qk(), a.dim_qk()) << name;
    EXPECT_EQ(got.qkv_out_features(), a.qkv_out_features()) << name;
    EXPECT_EQ(got.mla_replicated_params(), a.mla_replicated_params()) << name;
    EXPECT_EQ(got.vocab, a.vocab) << name;
    EXPECT_EQ(got.activation, a.activation) << name;
    EXPECT_EQ(got.norm, a.norm) << name;
    EXPECT_EQ(got.tied_embeddings, a.tied_embeddings) << name;
    EXPECT_EQ(got.max_positions, a.max_positions) << name;
    EXPECT_EQ(got.dropout, a.dropout) << name;
    ASSERT_EQ(got.moe.has_value(), a.moe.has_value()) << name;
    if (a.moe) {
      EXPECT_EQ(got.moe->experts, a.moe->experts) << name;
      EXPECT_EQ(got.moe->ffn_hidden, a.moe->ffn_hidden) << name;
      EXPECT_EQ(got.moe->shared_experts, a.moe->shared_experts) << name;
      EXPECT_EQ(got.moe->first_dense_layers, a.moe->first_dense_layers) << name;
      EXPECT_EQ(got.moe->capacity_factor, a.moe->capacity_factor) << name;
      EXPECT_EQ(got.moe->router_groups, a.moe->router_groups) << name;
    }
    EXPECT_EQ(got.has_bias(), a.has_bias()) << name;
    EXPECT_EQ(got.qk_norm, a.qk_norm) << name;
    EXPECT_EQ(got.attention_sinks, a.attention_sinks) << name;
    EXPECT_EQ(got.window, a.window) << name;
    EXPECT_EQ(got.mtp_layers, a.mtp_layers) << name;
  }
}

TEST(ScenarioRules, MoeTopKAtMostExperts) {
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 8, ffn_hidden: 1024}"), "model.moe.top_k",
               7, "top_k (8) must not exceed experts (4)");
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, evry: 2}"),
               "model.moe.evry", 7, "did you mean 'every'?");
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 1}"), "model.moe.ffn_hidden", 7,
               "missing required key");
}

TEST(ScenarioRules, MoeRanges) {
  expect_issue(
      base().set(7, "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, first_dense_layers: 8}"),
      "model.moe.first_dense_layers", 7,
      "expected fewer than layers (8) leading dense layers, got 8");
  // No layer l >= first_dense_layers has (l + 1) % every == 0: the model would run dense
  // (8 layers: every 9; every 4 after 5 dense layers, whose first candidate is layer 7
  // (8 % 4 == 0), is fine; every 3 after 6 dense layers would be layer 8, out of range).
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, every: 9}"),
               "model.moe.every", 7,
               "no layer would be a MoE layer: every 9 with 0 leading dense layers over 8 layers");
  expect_issue(base().set(7,
                          "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, every: 3, "
                          "first_dense_layers: 6}"),
               "model.moe.every", 7, "no layer would be a MoE layer");
  EXPECT_TRUE(issues_of(base().set(7,
                                   "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, every: 4, "
                                   "first_dense_layers: 5}"))
                  .empty());
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 1, ffn_hidden: 1024, capacity_factor: 0}"),
               "model.moe.capacity_factor", 7, "expected a positive number");
  expect_issue(base().set(7, "  moe: {experts: 0, top_k: 1, ffn_hidden: 1024}"),
               "model.moe.experts", 7, "expected an integer in [1,");
}

TEST(ScenarioRules, MoeRoutingKeys) {
  // The busiest expert takes each token at most once: imbalance <= experts / top_k.
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, imbalance: 3}"),
               "model.moe.imbalance", 7, "expected at most experts/top_k = 2");
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, imbalance: 0.5}"),
               "model.moe.imbalance", 7, "expected a number in [1,");
  expect_issue(base().set(7,
                          "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, imbalance: 1.5, "
                          "capacity_factor: 1}"),
               "model.moe.imbalance", 7, "imbalance applies to dropless routing");
  expect_issue(base().set(7, "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, router_groups: 2}"),
               "model.moe.router_groups", 7, "router_groups and router_group_topk go together");
  expect_issue(base().set(7,
                          "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, router_groups: 3, "
                          "router_group_topk: 1}"),
               "model.moe.router_groups", 7, "expected groups dividing experts (4)");
  expect_issue(base().insert(19, "  moe_dispatcher: nccl"), "parallel.moe_dispatcher", 19,
               "deepep");
  expect_issue(base().insert(19, "  overlap: {moe_shared_experts: sometimes}"),
               "parallel.overlap.moe_shared_experts", 19, "expected true or false");
  expect_issue(base().insert(8, "  window: -1"), "model.window", 8, "expected an integer in [0,");
  expect_issue(base().insert(8, "  mtp_layers: -1"), "model.mtp_layers", 8,
               "expected an integer in [0,");
  EXPECT_EQ(load(base().insert(8, "  mtp_layers: 1")).model.mtp_layers, 1);
  const Scenario ok = load(base()
                               .set(7,
                                    "  moe: {experts: 4, top_k: 2, ffn_hidden: 1024, "
                                    "imbalance: 1.5, router_groups: 2, router_group_topk: 1}")
                               .insert(8, "  qk_norm: true")
                               .insert(9, "  window: 128")
                               .insert(10, "  window_every: 2")
                               .insert(22, "  moe_dispatcher: deepep"));
  EXPECT_DOUBLE_EQ(ok.model.moe->imbalance, 1.5);
  EXPECT_DOUBLE_EQ(ok.model.moe->capacity_factor, 0.0);  // dropless
  EXPECT_EQ(ok.model.moe->router_group_topk, 1);
  EXPECT_TRUE(ok.model.qk_norm);
  EXPECT_TRUE(ok.model.windowed_layer(2));
  EXPECT_FALSE(ok.model.windowed_layer(1));
  EXPECT_EQ(ok.parallel.moe_dispatcher, MoeDispatcher::kDeepEp);
}

TEST(ScenarioRules, SeqLenWithinLearnedPositions) {
  expect_issue(base().set(7, "  max_positions: 2048"), "training.seq_len", 13,
               "seq_len (4096) exceeds the model's learned positions (max_positions = 2048)");
}

// ---- cluster -------------------------------------------------------------------------------
TEST(ScenarioRules, NodesOrGpusExactlyOne) {
  expect_issue(base().insert(12, "  gpus: 16"), "cluster.nodes", 11, "exactly one of");
  // Neither: reported at the cluster mapping, which starts at its first key (line 10).
  expect_issue(base().set(11, "  overrides: {}"), "cluster.nodes", 10, "exactly one of");
}

TEST(ScenarioRules, GpusMultipleOfNodeSize) {
  expect_issue(base().set(11, "  gpus: 12"), "cluster.gpus", 11,
               "expected a multiple of the 8 GPUs per node of profile h100-sxm");
}

TEST(ScenarioLoad, PartialNodeAccepted) {
  // 4 GPUs < 8 per node: one partial node; dp = 4 / (2*2) = 1.
  Scenario s = load(base().set(11, "  gpus: 4").set(14, "  global_batch: 8"));
  EXPECT_EQ(s.gpus, 4);
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.parallel.dp, 1);
  // 16 GPUs = 2 whole nodes.
  EXPECT_EQ(load(base().set(11, "  gpus: 16")).nodes, 2);
}

TEST(ScenarioRules, OverridesValidatedLikeTheProfile) {
  expect_issue(base().insert(12, "  overrides: {node.nicz: 4}"), "cluster.overrides.node.nicz", 12,
               "unknown key (did you mean 'nics'?)");
  expect_issue(base().insert(12, "  overrides: {node.nic: 100}"), "cluster.overrides.node.nic", 12,
               "bare number");
  expect_issue(base().insert(12, "  overrides: {fabric.oversubscription: 0.5}"),
               "cluster.overrides.fabric.oversubscription", 12, "expected a number in [1,");
  expect_issue(base().insert(12, "  overrides: {gpu.memory.size: 4}"),
               "cluster.overrides.gpu.memory.size", 12, "'gpu.memory' is a value, not a section");
  // Block style: the message points at the value's own line.
  expect_issue(base()
                   .insert(12, "  overrides:")
                   .insert(13, "    node.nics: 4")
                   .insert(14, "    gpu.sms: many"),
               "cluster.overrides.gpu.sms", 14, "expected an integer, got \"many\"");
}

TEST(ScenarioRules, MultiNodeNeedsNics) {
  // 2 nodes and the override node.nics: 0 (a single-node machine).
  expect_issue(base().insert(12, "  overrides: {node.nics: 0}"), "cluster.nodes", 11,
               "2 nodes need NICs, but profile h100-sxm has node.nics: 0");
  EXPECT_EQ(load(base().set(11, "  nodes: 1").insert(12, "  overrides: {node.nics: 0}"))
                .profile.node.nics,
            0);
}

TEST(ScenarioRules, DuplicateOverride) {
  expect_issue(base()
                   .insert(12, "  overrides:")
                   .insert(13, "    node.nics: 4")
                   .insert(14, "    node.nics: 2"),
               "cluster.overrides.node.nics", 14, "duplicate key");
}

TEST(ScenarioLoad, OverridesChangeTheProfile) {
  // node.nic 100 Gb/s = 100e9 / 8 = 12.5e9 bytes/s.
  Scenario s = load(base().insert(12,
                                  "  overrides: {node.nics: 4, node.nic: 100 Gb/s, "
                                  "collectives.nic_busbw: 11 GB/s}"));
  EXPECT_EQ(s.profile.node.nics, 4);
  EXPECT_DOUBLE_EQ(s.profile.node.nic_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(s.profile.collectives.nic_busbw, 11e9);
  EXPECT_EQ(s.profile.node.gpus, 8);  // untouched keys keep the file's values
}

// cluster.stragglers: the base cluster is 2 nodes x 8 GPUs (ranks 0..15, nodes 0..1).
TEST(ScenarioLoad, StragglersGiveEachGpuItsSpeed) {
  EXPECT_TRUE(load(base()).stragglers.empty());
  EXPECT_TRUE(gpu_speeds(load(base())).empty());
  const Scenario s = load(base()
                              .insert(12, "  stragglers:")
                              .insert(13, "    - {gpu: 9, compute: 0.8, nvlink: 0.5}")
                              .insert(14, "    - {node: 1, nic: 0.5}")
                              .insert(15, "    - {gpu: 2, nic: 0.25}"));
  ASSERT_EQ(s.stragglers.size(), 3u);
  EXPECT_EQ(s.stragglers[0].gpu, 9);
  EXPECT_EQ(s.stragglers[1].node, 1);
  const GpuSpeeds v = gpu_speeds(s);
  ASSERT_EQ(v.size(), 16u);
  // GPU 9 is named by itself and by node 1: the product of the factors.
  EXPECT_EQ(v[9], (GpuSpeed{0.8, 0.5, 0.5}));
  for (int g : {8, 10, 15}) EXPECT_EQ(v[static_cast<size_t>(g)], (GpuSpeed{1, 0.5, 1})) << g;
  EXPECT_EQ(v[2], (GpuSpeed{1, 0.25, 1}));
  for (int g : {0, 1, 3, 7}) EXPECT_TRUE(v[static_cast<size_t>(g)].nominal()) << g;
  EXPECT_EQ(stragglers_text(s),
            "gpu 9: compute x0.8, nvlink x0.5; node 1: nic x0.5; gpu 2: nic x0.25");
}

TEST(ScenarioRules, Stragglers) {
  auto with = [](const std::string& entry) {
    return base().insert(12, "  stragglers:").insert(13, "    - " + entry);
  };
  expect_issue(base().insert(12, "  stragglers: {gpu: 1}"), "cluster.stragglers", 12,
               "expected a list of entries like {gpu: 5, compute: 0.8}");
  EXPECT_TRUE(load(base().insert(12, "  stragglers: []")).stragglers.empty());  // none (sweeps)
  expect_issue(with("{gpu: 1, compte: 0.5}"), "cluster.stragglers[0].compte", 13,
               "did you mean 'compute'?");
  expect_issue(with("{gpu: 16, compute: 0.5}"), "cluster.stragglers[0].gpu", 13,
               "expected an integer in [0, 15], got 16");
  expect_issue(with("{node: 2, nic: 0.5}"), "cluster.stragglers[0].node", 13,
               "expected an integer in [0, 1], got 2");
  expect_issue(with("{gpu: 1, node: 0, nic: 0.5}"), "cluster.stragglers[0].node", 13,
               "give one of gpu and node, not both");
  expect_issue(with("{compute: 0.5}"), "cluster.stragglers[0].gpu", 13,
               "missing: name the slow GPU");
  expect_issue(with("{gpu: 1}"), "cluster.stragglers[0].compute", 13,
               "missing: give at least one of compute, nic, nvlink");
  expect_issue(with("{gpu: 1, compute: 0}"), "cluster.stragglers[0].compute", 13,
               "expected a fraction of nominal speed in [0.01, 1], got 0");
  expect_issue(with("{gpu: 1, nic: 1.5}"), "cluster.stragglers[0].nic", 13,
               "expected a fraction of nominal speed in [0.01, 1], got 1.5");
  expect_issue(with("{gpu: 1, nic: -0.5}"), "cluster.stragglers[0].nic", 13,
               "expected a fraction of nominal speed in [0.01, 1], got -0.5");
  expect_issue(with("{gpu: 1, compute: 1e-300}"), "cluster.stragglers[0].compute", 13,
               "got 1e-300 (below that the GPU or link is down, not slow");
  expect_issue(with("{gpu: 1, nvlink: fast}"), "cluster.stragglers[0].nvlink", 13,
               "expected a number, got");
  expect_issue(with("{gpu: 3, compute: 0.5}").insert(14, "    - {gpu: 3, nic: 0.5}"),
               "cluster.stragglers[1].gpu", 14, "gpu 3 is already listed in cluster.stragglers[0]");
  expect_issue(with("[gpu, 3]"), "cluster.stragglers[0]", 13, "expected a mapping");
}

// ---- training ------------------------------------------------------------------------------
TEST(ScenarioRules, GradReduceDtype) {
  // Default: fp32 gradients for bf16 and fp8 training, the parameters' fp16 for fp16.
  EXPECT_EQ(grad_reduce_dtype(load(base()).training), DType::kFp32);
  EXPECT_EQ(grad_reduce_dtype(load(base().insert(15, "  dtype: fp8")).training), DType::kFp32);
  EXPECT_EQ(grad_reduce_dtype(load(base().insert(15, "  dtype: fp16")).training), DType::kFp16);
  // Stated: a 16-bit buffer in the parameters' dtype (bf16 for fp8 training too), or fp32.
  EXPECT_EQ(grad_reduce_dtype(load(base().insert(15, "  grad_reduce_dtype: bf16")).training),
            DType::kBf16);
  EXPECT_EQ(
      grad_reduce_dtype(
          load(base().insert(15, "  dtype: fp8").insert(16, "  grad_reduce_dtype: bf16")).training),
      DType::kBf16);
  EXPECT_EQ(grad_reduce_dtype(
                load(base().insert(15, "  dtype: fp16").insert(16, "  grad_reduce_dtype: fp32"))
                    .training),
            DType::kFp32);
  expect_issue(base().insert(15, "  grad_reduce_dtype: fp8"), "training.grad_reduce_dtype", 15,
               "(known: fp32, bf16, fp16)");
  expect_issue(base().insert(15, "  grad_reduce_dtype: fp16"), "training.grad_reduce_dtype", 15,
               "fp16 gradients need fp16 parameters, but training.dtype bf16 keeps them in bf16");
  expect_issue(base().insert(15, "  dtype: fp16").insert(16, "  grad_reduce_dtype: bf16"),
               "training.grad_reduce_dtype", 16, "bf16 gradients need bf16 parameters");
}

TEST(ScenarioRules, Fp8NeedsAnFp8Peak) {
  expect_issue(base().set(10, "  profile: a100-80g-sxm").insert(15, "  dtype: fp8"),
               "training.dtype", 15, "fp8 needs a GPU with an fp8 peak");
  EXPECT_EQ(load(base().insert(15, "  dtype: fp8")).training.dtype, DType::kFp8);  // H100: fine
}

TEST(ScenarioLoad, ProfilePathRelativeToTheScenario) {
  // tests/data/good/../../../hw_profiles/h200-sxm.yaml, relative to the scenario's folder.
  const std::string text = base().set(10, "  profile: ../../../hw_profiles/h200-sxm.yaml").text();
  const std::string file = kData + "good/virtual.yaml";
  Scenario s = load_scenario_node(load_yaml_text(text, file), file);
  EXPECT_EQ(s.profile.name, "h200-sxm");
}

TEST(ScenarioLoad, GoodFilesLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kData + "good")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW({
      try {
        load_scenario(e.path().string());
      } catch (const InputError& err) {
        ADD_FAILURE() << err.what();
      }
    });
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(ScenarioLoad, GoodFileDerivedValues) {
  Scenario d = load_scenario(kData + "good/dense_h100.yaml");
  EXPECT_EQ(d.parallel.dp, 4);     // 16 / (2*2*1)
  EXPECT_EQ(d.microbatches(), 8);  // 64 / (4*2)
  EXPECT_EQ(d.parallel.recompute, Recompute::kSelective);
  EXPECT_FALSE(d.parallel.overlap_param_gather);
  EXPECT_DOUBLE_EQ(d.parallel.bucket_bytes, 25e6);
  EXPECT_EQ(d.model.norm, Norm::kRmsNorm);

  Scenario m = load_scenario(kData + "good/moe_interleaved_h200.yaml");
  EXPECT_EQ(m.gpus, 32);
  EXPECT_EQ(m.parallel.dp, 4);     // 32 / (2*2*2)
  EXPECT_EQ(m.microbatches(), 8);  // 32 / (4*1)
  EXPECT_EQ(m.parallel.schedule, Schedule::kInterleaved);
  EXPECT_EQ(m.network, NetworkMode::kFlow);
  EXPECT_DOUBLE_EQ(m.model.moe->capacity_factor, 1.25);

  Scenario p = load_scenario(kData + "good/partial_node_a100.yaml");
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.gpus, 4);
  EXPECT_EQ(p.profile.node.nics, 4);
  EXPECT_DOUBLE_EQ(p.profile.node.nic_bytes_per_s, 12.5e9);  // 100 Gb/s / 8
  EXPECT_EQ(p.model.kv_heads, 12);                           // defaults to heads (MHA)
  EXPECT_EQ(p.training.optimizer, Optimizer::kSgd);

  Scenario s = load_scenario(kData + "good/sweep_h100.yaml");
  ASSERT_EQ(s.sweep.size(), 3u);
  EXPECT_EQ(s.sweep[0].key, "parallel.tp");
  EXPECT_EQ(s.sweep[1].values.size(), 3u);
}

TEST(ScenarioNames, ScheduleAndRecomputeNames) {
  EXPECT_STREQ(schedule_name(Schedule::kZbH1), "zb-h1");
  EXPECT_STREQ(schedule_name(Schedule::kInterleaved), "interleaved");
  EXPECT_STREQ(recompute_name(Recompute::kSelective), "selective");
}

}  // namespace
}  // namespace stepcast
