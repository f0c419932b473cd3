// Error types shared by every layer (docs/contributing.md, Errors).
//  - InputError: bad user input (YAML, profiles, measurement files, flags). Carries every
//    problem found, each with file:line:column and the key path. The CLI prints one line per
//    issue and exits 2.
//  - InvariantError: a broken invariant inside the library (STEPCAST_CHECK). Exit 1.
// The library never prints and never exits.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast {

struct InputIssue {
  std::string file;     // path as given by the user; may be empty for flags
  int line = 0;         // 1-based; 0 when unknown
  int column = 0;       // 1-based; 0 when unknown
  std::string key;      // dotted key path, e.g. "parallel.tp"; may be empty
  std::string message;  // what was expected and what was found

  // "file:line:col: key: message" (parts that are unknown are left out).
  std::string str() const;
};

class InputError : public std::runtime_error {
 public:
  explicit InputError(std::vector<InputIssue> issues);
  explicit InputError(InputIssue issue);
  const std::vector<InputIssue>& issues() const { return issues_; }

 private:
  std::vector<InputIssue> issues_;
};

// Collects issues while a loader walks a document, so that every problem in a file is
// reported at once; throw_if_any() raises one InputError holding all of them.
class IssueList {
 public:
  void add(InputIssue issue) { issues_.push_back(std::move(issue)); }
  bool empty() const { return issues_.empty(); }
  const std::vector<InputIssue>& issues() const { return issues_; }
  void throw_if_any() const;

 private:
  std::vector<InputIssue> issues_;
};

class InvariantError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Always-on check (also in Release): throws InvariantError with the condition, the place
// and a message. Never use assert().
#define STEPCAST_CHECK(cond, msg)                                                    \
  do {                                                                               \
    if (!(cond)) ::stepcast::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)

namespace detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               const std::string& msg);
}

// The suggestion for a misspelt key or name: the candidate closest to `word` by Levenshtein
// distance when within max(2, len/3); else the candidate sharing the most leading words
// (split at '_', '.', '-') when they cover two thirds of `word`; else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace stepcast
