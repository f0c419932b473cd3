// Minimal JSON for the GPU benchmarks, which must build on a bare GPU box (no nlohmann):
//  - JsonWriter: a streaming writer with indentation and string escaping.
//  - JsonValue / parse_json: a small recursive-descent parser (RFC 8259 subset: objects,
//    arrays, strings with escapes incl. \uXXXX -> UTF-8, numbers, true/false/null), used to
//    read the GEMM shapes of a Program file. Errors throw BenchError with the byte offset,
//    line and column.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace stepcast::bench {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(const std::string& k);  // inside an object, before each value
  void value(const std::string& s);
  void value(const char* s) { value(std::string(s)); }
  void value(double d);             // non-finite values are written as null
  void value(std::int64_t i);
  void value(int i) { value(static_cast<std::int64_t>(i)); }
  void value(bool b);
  void null();

  // key + value in one call.
  template <typename T>
  void field(const std::string& k, const T& v) {
    key(k);
    value(v);
  }

 private:
  void before_value();
  void newline();
  static std::string escape(const std::string& s);

  std::ostream& out_;
  // One entry per open container: number of elements written so far.
  std::vector<int> counts_;
  bool after_key_ = false;
};

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in document order

  const JsonValue* find(const std::string& key) const;  // nullptr when absent / not object
};

// Parses a whole document; `name` labels error messages.
JsonValue parse_json(const std::string& text, const std::string& name);

}  // namespace stepcast::bench
