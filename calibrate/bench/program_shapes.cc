// GEMM shapes of a Program (stepcast lower -o PROGRAM.json, schema "stepcast.program/1").
// The reader does not depend on the Program's exact nesting: it walks the whole document
// and takes every object with integer m, n, k that is either the value of a "gemm" key or
// carries "kind": "gemm"; batch defaults to 1 and dtype to bf16. Each carries its task's
// phase, which sets the cuBLAS call as Transformer Engine makes it (cublas_gemm, bench.h).
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

bool positive_int(const Json* v, std::int64_t& out) {
  if (!v || !v->is_number()) return false;
  const double number = v->get<double>();
  if (number < 1 || number != std::floor(number) || number > 9.0e15) return false;
  out = static_cast<std::int64_t>(number);
  return true;
}

// `phase`: the nearest enclosing object's "phase" (a task's), which sets the GEMM's layout
// as Transformer Engine runs it (cublas_gemm).
void collect(const Json& v, bool under_gemm_key, const std::string& where, std::string phase,
             std::vector<GemmShapeSpec>& out) {
  if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i)
      collect(v[i], false, where + "/" + std::to_string(i), phase, out);
    return;
  }
  if (!v.is_object()) return;
  if (const Json* p = find(v, "phase"); p && p->is_string()) phase = p->get<std::string>();
  const Json* kind = find(v, "kind");
  const bool gemm_kind = kind && kind->is_string() && kind->get_ref<const std::string&>() == "gemm";
  GemmShapeSpec s;
  if ((under_gemm_key || gemm_kind) && positive_int(find(v, "m"), s.m) &&
      positive_int(find(v, "n"), s.n) && positive_int(find(v, "k"), s.k)) {
    if (const Json* b = find(v, "batch"); b && !positive_int(b, s.batch))
      throw BenchError(where + "/batch: expected a positive integer");
    if (const Json* d = find(v, "dtype")) {
      const std::string* dt = d->is_string() ? &d->get_ref<const std::string&>() : nullptr;
      if (!dt || (*dt != "bf16" && *dt != "fp16" && *dt != "fp8"))
        throw BenchError(where + "/dtype: expected \"bf16\", \"fp16\" or \"fp8\"");
      s.dtype = *dt;
    }
    s.phase = phase;
    out.push_back(s);
    return;
  }
  for (const auto& [key, child] : v.items())
    collect(child, key == "gemm", where + "/" + key, phase, out);
}

}  // namespace

std::vector<GemmShapeSpec> program_gemm_shapes(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw BenchError(path + ": cannot open the Program file");
  std::stringstream ss;
  ss << f.rdbuf();
  const Json doc = parse_json(ss.str(), path);
  if (!doc.is_object()) throw BenchError(path + ": expected a JSON object");
  const Json* schema = find(doc, "schema");
  if (!schema || !schema->is_string() ||
      schema->get_ref<const std::string&>().rfind("stepcast.program/", 0) != 0)
    throw BenchError(path + ": /schema: expected \"stepcast.program/1\"");
  std::vector<GemmShapeSpec> all;
  try {
    collect(doc, false, "", "fwd", all);
  } catch (const BenchError& e) {
    throw BenchError(path + ": " + e.what());
  }
  std::vector<GemmShapeSpec> unique;
  std::set<
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, std::string>>
      seen;
  for (const auto& s : all)
    if (seen.insert({s.m, s.n, s.k, s.batch, s.dtype, cublas_gemm(s).layout}).second)
      unique.push_back(s);
  if (unique.empty()) throw BenchError(path + ": no GEMM tasks found");
  return unique;
}

}  // namespace stepcast::bench
