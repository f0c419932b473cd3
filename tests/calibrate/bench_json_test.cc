// Host-side pieces of stepcast-bench (no GPU needed): writing and reading its JSON
// (nlohmann, json_io.h: errors at file:line:column), and reading the GEMM shapes of a Program.
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "calibrate/bench/bench.h"
#include "calibrate/bench/bench_error.h"
#include "calibrate/bench/json_io.h"

namespace stepcast::bench {
namespace {

TEST(BenchJson, WriterOutputParsesBack) {
  Json doc;
  doc["schema"] = kMeasurementsSchema;
  doc["text"] = std::string("quote \" backslash \\ newline \n tab \t");
  doc["time_us"] = 41.58;
  doc["count"] = std::int64_t{1} << 40;
  doc["ok"] = true;
  doc["empty"] = Json::array();
  doc["list"] = {1.0 / 3.0, std::numeric_limits<double>::quiet_NaN()};
  std::ostringstream o;
  write_json(o, doc);
  // Two-space indentation, keys in the order written, a newline at the end.
  EXPECT_EQ(o.str().rfind("{\n  \"schema\": \"stepcast.measurements/1\",\n  \"text\"", 0), 0u)
      << o.str();
  EXPECT_EQ(o.str().back(), '\n');
  const Json v = parse_json(o.str(), "w.json");
  EXPECT_EQ(v["schema"], "stepcast.measurements/1");
  EXPECT_EQ(v["text"], "quote \" backslash \\ newline \n tab \t");
  EXPECT_EQ(v["time_us"].get<double>(), 41.58);
  EXPECT_EQ(v["count"].get<double>(), 1099511627776.0);
  EXPECT_TRUE(v["ok"].get<bool>());
  EXPECT_TRUE(v["empty"].empty());
  // Doubles round-trip exactly; non-finite ones are written as null.
  EXPECT_EQ(v["list"][0].get<double>(), 1.0 / 3.0);
  EXPECT_TRUE(v["list"][1].is_null());
}

TEST(BenchJson, ParserHandlesEscapesAndReportsPosition) {
  const Json v = parse_json(R"({"a": "\u00e9\ud83d\ude00", "b": [1e3, -2.5E-1]})", "t");
  EXPECT_EQ(v["a"], "\xC3\xA9\xF0\x9F\x98\x80");  // U+00E9, U+1F600 in UTF-8
  EXPECT_EQ(v["b"][0].get<double>(), 1000);
  EXPECT_EQ(v["b"][1].get<double>(), -0.25);
  try {
    parse_json("{\n  \"a\": [1, 2,,]\n}", "bad.json");
    FAIL() << "no error";
  } catch (const BenchError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json:2:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(": invalid JSON: "), std::string::npos) << e.what();
  }
  // A number too large for a double is placed too (nlohmann reports it as out_of_range).
  try {
    parse_json("{\"a\":\n 1e400}", "big.json");
    FAIL() << "no error";
  } catch (const BenchError& e) {
    EXPECT_NE(std::string(e.what()).find("big.json:2:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_json("{\"a\": 1} x", "t"), BenchError);
  EXPECT_THROW(parse_json("\"unterminated", "t"), BenchError);
  EXPECT_THROW(parse_json(std::string(1000, '['), "t"), BenchError);  // nesting limit
  // Nesting deeper than 512 is refused even when well formed (the readers recurse).
  EXPECT_THROW(parse_json(std::string(600, '[') + std::string(600, ']'), "t"), BenchError);
  EXPECT_NO_THROW(parse_json(std::string(500, '[') + std::string(500, ']'), "t"));
}

std::string write(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("stepcast_bench_json_" + name);
  std::ofstream(p) << text;
  return p.string();
}

TEST(BenchProgram, GemmShapesFromAnyNesting) {
  // Two ranks with the same qkv GEMM (deduplicated), an expert GEMM with batch and fp8, and
  // a gemm-like object that is not a GEMM task (no "gemm" key, kind attention): ignored.
  // No phase: forward, run as Transformer Engine does, D[n,m] = W^T X ("TN").
  const std::string p = write("program.json", R"({"schema": "stepcast.program/1",
    "ranks": [
      {"rank": 0, "tasks": [
        {"id": 0, "kind": "gemm", "gemm": {"m": 8192, "n": 3072, "k": 4096, "batch": 1,
                                           "dtype": "bf16", "layout": "NN"}},
        {"id": 1, "kind": "attention", "attention": {"batch": 1, "heads": 8}},
        {"id": 2, "kind": "gemm", "m": 1024, "n": 4096, "k": 14336, "batch": 8,
         "dtype": "fp8"}]},
      {"rank": 1, "tasks": [
        {"id": 0, "kind": "gemm", "gemm": {"m": 8192, "n": 3072, "k": 4096, "dtype": "bf16"}},
        {"id": 1, "kind": "memory_bound", "m": 5, "n": 5, "k": 5}]}]})");
  const auto shapes = program_gemm_shapes(p);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].m, 8192);
  EXPECT_EQ(shapes[0].n, 3072);
  EXPECT_EQ(shapes[0].k, 4096);
  EXPECT_EQ(shapes[0].phase, "fwd");
  EXPECT_EQ(cublas_gemm(shapes[0]).layout, "TN");
  EXPECT_EQ(cublas_gemm(shapes[0]).m, 3072);
  EXPECT_EQ(shapes[0].dtype, "bf16");
  EXPECT_EQ(shapes[1].batch, 8);
  EXPECT_EQ(shapes[1].dtype, "fp8");
}

// Each task's phase sets the cuBLAS call (cublas_gemm, as Transformer Engine's general_gemm):
// one Program shape C[m,n] = A[m,k] B[k,n] = [4096, 8192] x [8192, 2048] becomes,
// column-major, forward D[2048, 4096] "TN" and input gradient D[2048, 4096] "NN" (the
// weight first), and weight gradient D[4096, 2048] "NT" (the task's own m, n); recompute
// is the forward's call, and the FLOPs never change. Without a phase: D[m, n] "NN".
TEST(BenchProgram, EachPhaseRunsTransformerEnginesLayout) {
  const std::string p = write("phases.json", R"({"schema": "stepcast.program/1",
    "ranks": [{"rank": 0, "tasks": [
      {"id": 0, "kind": "gemm", "phase": "fwd",
       "gemm": {"m": 4096, "n": 2048, "k": 8192, "dtype": "bf16"}},
      {"id": 1, "kind": "gemm", "phase": "bwd_input",
       "gemm": {"m": 4096, "n": 2048, "k": 8192, "dtype": "bf16"}},
      {"id": 2, "kind": "gemm", "phase": "bwd_weight",
       "gemm": {"m": 4096, "n": 2048, "k": 8192, "dtype": "bf16"}},
      {"id": 3, "kind": "gemm", "phase": "recompute",
       "gemm": {"m": 4096, "n": 2048, "k": 8192, "dtype": "bf16"}}]}]})");
  const auto s = program_gemm_shapes(p);
  ASSERT_EQ(s.size(), 3u);
  const CublasGemm f = cublas_gemm(s[0]), i = cublas_gemm(s[1]), w = cublas_gemm(s[2]);
  EXPECT_EQ(f.layout, "TN");
  EXPECT_EQ(f.m, 2048);
  EXPECT_EQ(f.n, 4096);
  EXPECT_EQ(i.layout, "NN");
  EXPECT_EQ(i.m, 2048);
  EXPECT_EQ(i.n, 4096);
  EXPECT_EQ(w.layout, "NT");
  EXPECT_EQ(w.m, 4096);
  EXPECT_EQ(w.n, 2048);
  for (const CublasGemm& g : {f, i, w}) EXPECT_EQ(g.m * g.n, 4096 * 2048);
  for (const auto& g : s) EXPECT_EQ(g.k, 8192);  // the Program's shape is kept as it is
  GemmShapeSpec grid{512, 1024, 2048, 1, "bf16", "grid", ""};
  EXPECT_EQ(cublas_gemm(grid).layout, "NN");
  EXPECT_EQ(cublas_gemm(grid).m, 512);
}

TEST(BenchProgram, BadProgramsAreRejected) {
  EXPECT_THROW(program_gemm_shapes("/nonexistent.json"), BenchError);
  EXPECT_THROW(program_gemm_shapes(write("noschema.json", R"({"ranks": []})")), BenchError);
  EXPECT_THROW(
      program_gemm_shapes(write("nogemm.json", R"({"schema": "stepcast.program/1", "ranks": []})")),
      BenchError);
  try {
    program_gemm_shapes(write("baddtype.json", R"({"schema": "stepcast.program/1",
      "t": [{"kind": "gemm", "m": 1, "n": 2, "k": 3, "dtype": "int4"}]})"));
    FAIL() << "no error";
  } catch (const BenchError& e) {
    EXPECT_NE(std::string(e.what()).find("/t/0/dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stepcast::bench
