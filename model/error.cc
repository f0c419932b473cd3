#include "model/error.h"

#include <algorithm>

#include <fmt/format.h>

namespace stepcast {

namespace {

// What a terminal shows safely: control bytes and bytes that are not UTF-8 as \xNN (a key
// with a carriage return would otherwise overwrite the start of the line, file name and all).
std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = byte(i);
    size_t len = 0;  // length of a valid UTF-8 sequence starting at i, 0 if none
    if (c >= 0x20 && c < 0x7f)
      len = 1;
    else if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c >= 0xe0 && c <= 0xef)
      len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
      len = 4;
    if (len > 1) {
      if (i + len > s.size()) len = 0;
      for (size_t k = 1; k < len; ++k)
        if ((byte(i + k) & 0xc0) != 0x80) len = 0;
    }
    if (len == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace

std::string InputIssue::str() const {
  std::string out;
  if (!file.empty()) {
    out += printable(file);
    if (line > 0) {
      out += fmt::format(":{}", line);
      if (column > 0) out += fmt::format(":{}", column);
    }
    out += ": ";
  }
  if (!key.empty()) out += printable(key) + ": ";
  out += printable(message);
  return out;
}

static std::string join_issues(const std::vector<InputIssue>& issues) {
  std::string out;
  for (const auto& i : issues) {
    if (!out.empty()) out += "\n";
    out += i.str();
  }
  return out;
}

InputError::InputError(std::vector<InputIssue> issues)
    : std::runtime_error(join_issues(issues)), issues_(std::move(issues)) {}

InputError::InputError(InputIssue issue) : InputError(std::vector<InputIssue>{std::move(issue)}) {}

void IssueList::throw_if_any() const {
  if (!issues_.empty()) throw InputError(issues_);
}

namespace detail {
void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  throw InvariantError(
      fmt::format("internal error: check '{}' failed at {}:{}: {}", cond, file, line, msg));
}
}  // namespace detail

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Length of the longest common prefix of a and b that ends at a word boundary: after a '_',
// '.' or '-', or at the end of either word.
static size_t common_words(const std::string& a, const std::string& b) {
  size_t n = 0;
  size_t i = 0;
  for (; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    if (a[i] == '_' || a[i] == '.' || a[i] == '-') n = i + 1;
  return i == a.size() || i == b.size() ? i : n;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  size_t limit = std::max<size_t>(2, word.size() / 3);
  if (best_d <= limit) return best;
  // No near spelling: the candidate that shares the most leading words, when they are at
  // least two thirds of the word (another unit or last word, "zero3_prefetch_mb" for
  // "zero3_prefetch_elements"); among equal prefixes the nearer spelling.
  best.clear();
  size_t best_p = 0;
  best_d = static_cast<size_t>(-1);
  for (const auto& c : candidates) {
    const size_t p = common_words(word, c);
    if (3 * p < 2 * word.size() || p < best_p) continue;
    const size_t d = edit_distance(word, c);
    if (p > best_p || d < best_d) {
      best_p = p;
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace stepcast
