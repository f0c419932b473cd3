#include "json_io.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "bench_error.h"

namespace stepcast::bench {

// ---------------------------------------------------------------- writer

void JsonWriter::newline() {
  out_ << '\n';
  for (std::size_t i = 0; i < counts_.size(); ++i) out_ << "  ";
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!counts_.empty()) {
    if (counts_.back()++ > 0) out_ << ',';
    newline();
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ << '{';
  counts_.push_back(0);
}

void JsonWriter::end_object() {
  const bool empty = counts_.back() == 0;
  counts_.pop_back();
  if (!empty) newline();
  out_ << '}';
  if (counts_.empty()) out_ << '\n';
}

void JsonWriter::begin_array() {
  before_value();
  out_ << '[';
  counts_.push_back(0);
}

void JsonWriter::end_array() {
  const bool empty = counts_.back() == 0;
  counts_.pop_back();
  if (!empty) newline();
  out_ << ']';
}

void JsonWriter::key(const std::string& k) {
  before_value();
  out_ << '"' << escape(k) << "\": ";
  after_key_ = true;
}

void JsonWriter::value(const std::string& s) {
  before_value();
  out_ << '"' << escape(s) << '"';
}

void JsonWriter::value(double d) {
  before_value();
  if (!std::isfinite(d)) {
    out_ << "null";
    return;
  }
  char buf[64];
  // 17 significant digits round-trip a double exactly.
  std::snprintf(buf, sizeof buf, "%.17g", d);
  // Shorter form when it round-trips.
  char shorter[64];
  std::snprintf(shorter, sizeof shorter, "%.10g", d);
  out_ << (std::strtod(shorter, nullptr) == d ? shorter : buf);
}

void JsonWriter::value(std::int64_t i) {
  before_value();
  out_ << i;
}

void JsonWriter::value(bool b) {
  before_value();
  out_ << (b ? "true" : "false");
}

void JsonWriter::null() {
  before_value();
  out_ << "null";
}

std::string JsonWriter::escape(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\r': r += "\\r"; break;
      case '\t': r += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          r += buf;
        } else {
          r += static_cast<char>(c);
        }
    }
  }
  return r;
}

// ---------------------------------------------------------------- parser

const JsonValue* JsonValue::find(const std::string& k) const {
  if (type != Type::kObject) return nullptr;
  for (const auto& [name, v] : object)
    if (name == k) return &v;
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  JsonValue document() {
    JsonValue v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, col = 1;
    for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw BenchError(name_ + ":" + std::to_string(line) + ":" + std::to_string(col) +
                     ": invalid JSON: " + what);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  char peek() {
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    return s_[pos_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) == 0) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      ++pos_;
      v.type = JsonValue::Type::kObject;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        if (peek() != '"') fail("expected a string key");
        std::string k = parse_string();
        expect(':');
        v.object.emplace_back(std::move(k), parse_value(depth + 1));
        const char d = peek();
        ++pos_;
        if (d == '}') break;
        if (d != ',') fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      ++pos_;
      v.type = JsonValue::Type::kArray;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.array.push_back(parse_value(depth + 1));
        const char d = peek();
        ++pos_;
        if (d == ']') break;
        if (d != ',') fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.type = JsonValue::Type::kString;
      v.str = parse_string();
    } else if (literal("true")) {
      v.type = JsonValue::Type::kBool;
      v.b = true;
    } else if (literal("false")) {
      v.type = JsonValue::Type::kBool;
    } else if (literal("null")) {
      v.type = JsonValue::Type::kNull;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = JsonValue::Type::kNumber;
      v.number = parse_number();
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  double parse_number() {
    const std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const std::size_t d0 = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == d0) fail("expected a digit");
    };
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    return std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
    return out;
  }

  const std::string& s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

}  // namespace

JsonValue parse_json(const std::string& text, const std::string& name) {
  return Parser(text, name).document();
}

}  // namespace stepcast::bench
