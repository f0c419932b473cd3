// Where each value of a JSON text starts (line and column): nlohmann::json keeps no
// positions, so a loader that found a problem scans the text once more to place it. Used by
// the Program reader (program_json.cc) and the measurements loader (calibrate/fit).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace stepcast {

// Where each value of a (valid) JSON text starts, by key path ("ranks[0].tasks[3].gemm.m"):
// nlohmann::json keeps no positions, so on error the text is scanned once more. O(size).
class JsonLocator {
 public:
  explicit JsonLocator(const std::string& text) : s_(text) { value("", 0); }

  // Position of `path`, or of its closest enclosing value (a missing key points at the
  // object that lacks it).
  std::pair<int, int> find(std::string path) const {
    for (;;) {
      auto it = pos_.find(path);
      if (it != pos_.end()) return it->second;
      if (path.empty()) return {0, 0};
      const size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? std::string() : path.substr(0, cut);
    }
  }

 private:
  void advance() {
    if (s_[i_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++i_;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      advance();
  }
  std::string str() {
    std::string out;
    advance();  // opening quote
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        advance();
        if (i_ >= s_.size()) break;
      }
      out += s_[i_];
      advance();
    }
    if (i_ < s_.size()) advance();  // closing quote
    return out;
  }
  // Values nested deeper than this are skipped without recording their positions (an issue
  // inside one is placed at the enclosing value at this depth): a document nested 200,000
  // deep overflowed the stack here and its paths took O(depth^2) memory.
  static constexpr int kMaxDepth = 256;

  // Skips one value iteratively (any depth), strings included.
  void skip() {
    if (s_[i_] != '{' && s_[i_] != '[') {
      if (s_[i_] == '"') {
        str();
      } else {
        while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' && s_[i_] != ' ' &&
               s_[i_] != '\n' && s_[i_] != '\t' && s_[i_] != '\r')
          advance();
      }
      return;
    }
    int depth = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        str();
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      advance();
      if (depth == 0) return;
    }
  }

  void value(const std::string& path, int depth) {
    ws();
    if (i_ >= s_.size()) return;
    if (depth > kMaxDepth) {
      skip();
      return;
    }
    pos_.emplace(path, std::make_pair(line_, col_));
    const char c = s_[i_];
    if (c == '{') {
      advance();
      for (;;) {
        ws();
        if (i_ >= s_.size() || s_[i_] == '}') break;
        if (s_[i_] == ',') {
          advance();
          continue;
        }
        const std::string key = str();
        ws();
        if (i_ < s_.size() && s_[i_] == ':') advance();
        value(path.empty() ? key : path + "." + key, depth + 1);
      }
      if (i_ < s_.size()) advance();
    } else if (c == '[') {
      advance();
      size_t k = 0;
      for (;;) {
        ws();
        if (i_ >= s_.size() || s_[i_] == ']') break;
        if (s_[i_] == ',') {
          advance();
          continue;
        }
        value(path + "[" + std::to_string(k++) + "]", depth + 1);
      }
      if (i_ < s_.size()) advance();
    } else {
      skip();  // a string, number, true, false or null
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
  std::unordered_map<std::string, std::pair<int, int>> pos_;
};

// The issue for a JSON syntax error: nlohmann reports the byte after the error
// (parse_error::byte); `what` is its message ("[json.exception.parse_error.101] parse error
// at line 1, column 2: syntax error ..."), kept from its first ": ".
InputIssue json_syntax_issue(const std::string& text, const std::string& file, std::size_t byte,
                             const std::string& what);

// `text` parsed, or InputError naming `file`, the line and column and what is wrong: a syntax
// error, or a value the parser cannot hold (a number beyond a double, "1e400": nlohmann's
// out_of_range, located at the first occurrence of the token its message quotes).
nlohmann::json parse_json(const std::string& text, const std::string& file);

// Fills the line and column of each issue that has none and whose key is a JSON pointer
// ("/gemm/3/time_us", numeric segments are list indices) or "" (the whole document, line 1)
// from `text`, the document the issues are about.
void locate_json_pointer_issues(std::vector<InputIssue>& issues, const std::string& text);

}  // namespace stepcast
