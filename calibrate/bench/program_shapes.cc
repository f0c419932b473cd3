// GEMM shapes of a Program (stepcast lower -o PROGRAM.json, schema "stepcast.program/1").
// The reader does not depend on the Program's exact nesting: it walks the whole document
// and takes every object with integer m, n, k that is either the value of a "gemm" key or
// carries "kind": "gemm"; batch defaults to 1 and dtype to bf16.
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "bench.h"
#include "bench_error.h"
#include "json_io.h"

namespace stepcast::bench {

namespace {

bool positive_int(const JsonValue* v, std::int64_t& out) {
  if (!v || v->type != JsonValue::Type::kNumber) return false;
  if (v->number < 1 || v->number != std::floor(v->number) || v->number > 9.0e15) return false;
  out = static_cast<std::int64_t>(v->number);
  return true;
}

void collect(const JsonValue& v, bool under_gemm_key, const std::string& where,
             std::vector<GemmShapeSpec>& out) {
  if (v.type == JsonValue::Type::kArray) {
    for (std::size_t i = 0; i < v.array.size(); ++i)
      collect(v.array[i], false, where + "/" + std::to_string(i), out);
    return;
  }
  if (v.type != JsonValue::Type::kObject) return;
  const JsonValue* kind = v.find("kind");
  const bool gemm_kind = kind && kind->type == JsonValue::Type::kString && kind->str == "gemm";
  GemmShapeSpec s;
  if ((under_gemm_key || gemm_kind) && positive_int(v.find("m"), s.m) &&
      positive_int(v.find("n"), s.n) && positive_int(v.find("k"), s.k)) {
    if (const JsonValue* b = v.find("batch"); b && !positive_int(b, s.batch))
      throw BenchError(where + "/batch: expected a positive integer");
    if (const JsonValue* d = v.find("dtype")) {
      if (d->type != JsonValue::Type::kString || (d->str != "bf16" && d->str != "fp16" &&
                                                  d->str != "fp8"))
        throw BenchError(where + "/dtype: expected \"bf16\", \"fp16\" or \"fp8\"");
      s.dtype = d->str;
    }
    out.push_back(s);
    return;
  }
  for (const auto& [key, child] : v.object) collect(child, key == "gemm", where + "/" + key, out);
}

}  // namespace

std::vector<GemmShapeSpec> program_gemm_shapes(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw BenchError(path + ": cannot open the Program file");
  std::stringstream ss;
  ss << f.rdbuf();
  const JsonValue doc = parse_json(ss.str(), path);
  if (doc.type != JsonValue::Type::kObject) throw BenchError(path + ": expected a JSON object");
  const JsonValue* schema = doc.find("schema");
  if (!schema || schema->type != JsonValue::Type::kString ||
      schema->str.rfind("stepcast.program/", 0) != 0)
    throw BenchError(path + ": /schema: expected \"stepcast.program/1\"");
  std::vector<GemmShapeSpec> all;
  try {
    collect(doc, false, "", all);
  } catch (const BenchError& e) {
    throw BenchError(path + ": " + e.what());
  }
  std::vector<GemmShapeSpec> unique;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string>> seen;
  for (const auto& s : all)
    if (seen.insert({s.m, s.n, s.k, s.batch, s.dtype}).second) unique.push_back(s);
  if (unique.empty()) throw BenchError(path + ": no GEMM tasks found");
  return unique;
}

}  // namespace stepcast::bench
