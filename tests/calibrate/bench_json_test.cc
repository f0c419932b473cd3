// Host-side pieces of stepcast-bench (no GPU needed): the hand-written JSON writer and
// parser, and reading the GEMM shapes of a Program.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "calibrate/bench/bench.h"
#include "calibrate/bench/bench_error.h"
#include "calibrate/bench/json_io.h"

namespace stepcast::bench {
namespace {

TEST(BenchJson, WriterOutputParsesBack) {
  std::ostringstream o;
  JsonWriter w(o);
  w.begin_object();
  w.field("schema", kMeasurementsSchema);
  w.field("text", std::string("quote \" backslash \\ newline \n tab \t"));
  w.field("time_us", 41.58);
  w.field("count", std::int64_t{1} << 40);
  w.field("ok", true);
  w.key("empty");
  w.begin_array();
  w.end_array();
  w.key("list");
  w.begin_array();
  w.value(1.0 / 3.0);
  w.null();
  w.end_array();
  w.end_object();
  const JsonValue v = parse_json(o.str(), "w.json");
  EXPECT_EQ(v.find("schema")->str, "stepcast.measurements/1");
  EXPECT_EQ(v.find("text")->str, "quote \" backslash \\ newline \n tab \t");
  EXPECT_EQ(v.find("time_us")->number, 41.58);
  EXPECT_EQ(v.find("count")->number, 1099511627776.0);
  EXPECT_TRUE(v.find("ok")->b);
  EXPECT_TRUE(v.find("empty")->array.empty());
  // %.17g round-trips a double exactly.
  EXPECT_EQ(v.find("list")->array[0].number, 1.0 / 3.0);
  EXPECT_EQ(v.find("list")->array[1].type, JsonValue::Type::kNull);
}

TEST(BenchJson, ParserHandlesEscapesAndReportsPosition) {
  const JsonValue v = parse_json(R"({"a": "\u00e9\ud83d\ude00", "b": [1e3, -2.5E-1]})", "t");
  EXPECT_EQ(v.find("a")->str, "\xC3\xA9\xF0\x9F\x98\x80");  // U+00E9, U+1F600 in UTF-8
  EXPECT_EQ(v.find("b")->array[0].number, 1000);
  EXPECT_EQ(v.find("b")->array[1].number, -0.25);
  try {
    parse_json("{\n  \"a\": [1, 2,,]\n}", "bad.json");
    FAIL() << "no error";
  } catch (const BenchError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json:2:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_json("{\"a\": 1} x", "t"), BenchError);
  EXPECT_THROW(parse_json("\"unterminated", "t"), BenchError);
  EXPECT_THROW(parse_json(std::string(1000, '['), "t"), BenchError);  // nesting limit
}

std::string write(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("stepcast_bench_json_" + name);
  std::ofstream(p) << text;
  return p.string();
}

TEST(BenchProgram, GemmShapesFromAnyNesting) {
  // Two ranks with the same qkv GEMM (deduplicated), an expert GEMM with batch and fp8, and
  // a gemm-like object that is not a GEMM task (no "gemm" key, kind attention): ignored.
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
  EXPECT_EQ(shapes[0].dtype, "bf16");
  EXPECT_EQ(shapes[1].batch, 8);
  EXPECT_EQ(shapes[1].dtype, "fp8");
}

TEST(BenchProgram, BadProgramsAreRejected) {
  EXPECT_THROW(program_gemm_shapes("/nonexistent.json"), BenchError);
  EXPECT_THROW(program_gemm_shapes(write("noschema.json", R"({"ranks": []})")), BenchError);
  EXPECT_THROW(program_gemm_shapes(write("nogemm.json",
                                         R"({"schema": "stepcast.program/1", "ranks": []})")),
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
