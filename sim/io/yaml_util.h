// Strict YAML reading shared by every loader (scenarios, profiles, measurement files).
// Every problem becomes an InputIssue with file:line:column (yaml-cpp's Mark, made 1-based)
// and the dotted key path; readers collect them all in an IssueList and the loader throws
// once at the end, so a user sees every problem in a file at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/error.h"
#include "model/units.h"

namespace stepcast {

// Parses a file. A missing file, a YAML syntax error, an empty document or a top level that
// is not a mapping throw InputError naming the file (and line/column for syntax errors).
YAML::Node load_yaml_file(const std::string& path);
// The file's text. A directory ("is a directory, not a <format> file") or a file that cannot
// open throws InputError naming the path.
std::string read_text_file(const std::string& path, const char* format = "YAML");
// Same for text already in memory (tests, sweeps); `file` names it in messages.
YAML::Node load_yaml_text(const std::string& text, const std::string& file);

class YamlReader {
 public:
  YamlReader(std::string file, IssueList& issues) : file_(std::move(file)), issues_(issues) {}

  const std::string& file() const { return file_; }
  IssueList& issues() { return issues_; }

  // Reports an issue located at `at` (its Mark) for key path `path`.
  void error(const YAML::Node& at, const std::string& path, const std::string& message);

  // Checks `node` is a mapping whose keys are all in `known` and appear once. Unknown keys
  // are reported with the closest known key suggested. Returns false when not a mapping.
  bool expect_map(const YAML::Node& node, const std::string& path,
                  const std::vector<std::string>& known);

  // Typed getters: return nullopt when the key is absent (no issue) or invalid (issue
  // reported). `path` is the mapping's path; the key is appended.
  std::optional<std::int64_t> get_int(const YAML::Node& map, const std::string& path,
                                      const std::string& key, std::int64_t min, std::int64_t max);
  std::optional<double> get_double(const YAML::Node& map, const std::string& path,
                                   const std::string& key, double min, double max);
  std::optional<bool> get_bool(const YAML::Node& map, const std::string& path,
                               const std::string& key);
  std::optional<std::string> get_string(const YAML::Node& map, const std::string& path,
                                        const std::string& key);
  // One of `allowed` (the message lists them).
  std::optional<std::string> get_enum(const YAML::Node& map, const std::string& path,
                                      const std::string& key,
                                      const std::vector<std::string>& allowed);
  // A quantity with a unit of dimension `dim` (model/units.h); value in SI base units.
  std::optional<double> get_quantity(const YAML::Node& map, const std::string& path,
                                     const std::string& key, Dimension dim);
  // Reports a missing required key; returns true when present.
  bool require(const YAML::Node& map, const std::string& path, const std::string& key);

  // Marks `value` as spliced in from another document (a scenario's cluster.overrides entry
  // `key_node: value` set at dotted `path` of this document). Issues about `value` or any
  // node inside it are reported in `file` at that node's position; issues about nodes that
  // have no position (created by the splice) whose path is `path`, above it or under it are
  // reported at `key_node`. Either way the key path gets `key_prefix` in front
  // (e.g. "cluster.overrides.").
  void add_splice(const YAML::Node& value, const std::string& path, const std::string& file,
                  const YAML::Node& key_node, const std::string& key_prefix);

  // The document being read. An issue about a node with no position (a mapping an override
  // created, a missing section) is then placed at the nearest node above it on its key path
  // that has one (at worst the document's first key), so every issue has a line.
  void set_root(const YAML::Node& root) { root_ = root; }

 private:
  YAML::Mark nearest_mark(const std::string& path) const;

  struct Splice {
    std::vector<YAML::Node> nodes;  // the value and every node inside it
    std::string path, file, key_prefix;
    YAML::Mark key_mark;
  };
  std::string file_;
  IssueList& issues_;
  std::vector<Splice> splices_;
  YAML::Node root_;
};

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(const std::string& path, const std::string& key);

// "a.b.c" -> {"a", "b", "c"}; an empty segment ("a..b", ".a", "a.") yields an empty list.
std::vector<std::string> split_dotted(const std::string& dotted);

// A value shown in messages: "\"text\"", "a list", "a mapping".
std::string show_node(const YAML::Node& n);

}  // namespace stepcast
