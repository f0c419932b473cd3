// Reading and writing the JSON of the GPU programs with nlohmann::json (json_io.h).
#include "json_io.h"

#include "bench_error.h"

namespace stepcast::bench {

namespace {

constexpr int kMaxDepth = 512;

// nlohmann's DOM builder that keeps where the first error is (the byte after it, as
// nlohmann reports it: also for a number too large for a double, an out_of_range error
// with no position of its own) and refuses nesting deeper than kMaxDepth.
class PlacedDomParser : public nlohmann::detail::json_sax_dom_parser<Json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<Json>;
  explicit PlacedDomParser(Json& doc) : Base(doc, false) {}

  bool start_object(std::size_t n) { return deeper() && Base::start_object(n); }
  bool end_object() {
    --depth_;
    return Base::end_object();
  }
  bool start_array(std::size_t n) { return deeper() && Base::start_array(n); }
  bool end_array() {
    --depth_;
    return Base::end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t byte, const std::string& /*token*/, const Exception& ex) {
    byte_ = byte;
    what_ = ex.what();
    return false;
  }

  std::size_t byte_ = 0;  // 0: no syntax error (too deep)
  std::string what_ = "nesting too deep";

 private:
  bool deeper() { return ++depth_ <= kMaxDepth; }
  int depth_ = 0;
};

}  // namespace

Json parse_json(const std::string& text, const std::string& name) {
  Json doc;
  PlacedDomParser sax(doc);
  if (Json::sax_parse(text, &sax)) return doc;
  // The line and column of the byte before the one nlohmann reports (as
  // sim/io/json_locator.h, json_syntax_issue).
  int line = 1, col = 1;
  for (std::size_t i = 0; i + 1 < sax.byte_ && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." is
  // kept from its first ": ", "[json.exception.out_of_range.406] number overflow ..." from
  // after its "] ".
  std::string what = sax.what_;
  if (const std::size_t colon = what.find(": "); colon != std::string::npos) {
    what = what.substr(colon + 2);
  } else if (const std::size_t bracket = what.find("] "); bracket != std::string::npos) {
    what = what.substr(bracket + 2);
  }
  throw BenchError(name + ":" + std::to_string(line) + ":" + std::to_string(col) +
                   ": invalid JSON: " + what);
}

void write_json(std::ostream& out, const Json& doc) {
  // Bytes that are not UTF-8 (a label, a host name) are written as U+FFFD, not refused.
  out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
}

}  // namespace stepcast::bench
