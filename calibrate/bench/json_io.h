// JSON of the GPU programs (stepcast-bench, stepcast-exec): nlohmann::json, as the rest of
// the project, in its ordered flavour (objects keep their keys in document order: written
// in the order the schema lists them, walked in the order the file gives them). Reading a
// document places a syntax error at its file:line:column (BenchError).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace stepcast::bench {

using Json = nlohmann::ordered_json;

// Parses a whole document; `name` labels error messages ("NAME:LINE:COL: invalid JSON: ...").
// More than 512 nested objects or arrays is an error (the readers walk them recursively).
Json parse_json(const std::string& text, const std::string& name);

// Writes `doc` indented by two spaces and a newline; non-finite numbers are written as null.
void write_json(std::ostream& out, const Json& doc);

// The value at `key` of an object; nullptr when absent or `v` is not an object.
inline const Json* find(const Json& v, const std::string& key) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

}  // namespace stepcast::bench
