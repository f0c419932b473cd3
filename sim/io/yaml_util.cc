#include "sim/io/yaml_util.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace stepcast {

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

static InputIssue issue_at(const std::string& file, const YAML::Mark& m, const std::string& key,
                           const std::string& message) {
  InputIssue i;
  i.file = file;
  if (!m.is_null()) {
    i.line = m.line + 1;
    i.column = m.column + 1;
  }
  i.key = key;
  i.message = message;
  return i;
}

YAML::Node load_yaml_text(const std::string& text, const std::string& file) {
  YAML::Node root;
  try {
    // Every document, so that a second one (after `---`) is refused, not silently ignored
    // (YAML::Load reads the first only).
    std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (!docs.empty()) root.reset(docs.front());
    for (std::size_t d = 1; d < docs.size(); ++d)
      if (docs[d].IsDefined() && !docs[d].IsNull())
        throw InputError(issue_at(file, docs[d].Mark(), "",
                                  "a second YAML document (after `---`): the file must hold one"));
  } catch (const YAML::Exception& e) {
    throw InputError(issue_at(file, e.mark, "", "YAML syntax error: " + e.msg));
  }
  if (!root || root.IsNull()) {
    throw InputError(InputIssue{file, 0, 0, "", "the file is empty (expected a YAML mapping)"});
  }
  if (!root.IsMap()) {
    throw InputError(issue_at(file, root.Mark(), "", "expected a YAML mapping at the top level"));
  }
  return root;
}

std::string read_text_file(const std::string& path, const char* format) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))  // it opens, reads empty: "the file is empty"
    throw InputError(
        InputIssue{path, 0, 0, "", fmt::format("is a directory, not a {} file", format)});
  std::ifstream in(path);
  if (!in) throw InputError(InputIssue{path, 0, 0, "", "cannot open the file"});
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

YAML::Node load_yaml_file(const std::string& path) {
  return load_yaml_text(read_text_file(path), path);
}

std::vector<std::string> split_dotted(const std::string& dotted) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : dotted) {
    if (c == '.') {
      if (cur.empty()) return {};
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (cur.empty()) return {};
  out.push_back(cur);
  return out;
}

static void collect_nodes(const YAML::Node& n, std::vector<YAML::Node>& out) {
  out.push_back(n);
  if (n.IsSequence()) {
    for (const auto& c : n) collect_nodes(c, out);
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      out.push_back(kv.first);
      collect_nodes(kv.second, out);
    }
  }
}

void YamlReader::add_splice(const YAML::Node& value, const std::string& path,
                            const std::string& file, const YAML::Node& key_node,
                            const std::string& key_prefix) {
  Splice s;
  collect_nodes(value, s.nodes);
  s.path = path;
  s.file = file;
  s.key_prefix = key_prefix;
  s.key_mark = key_node ? key_node.Mark() : YAML::Mark::null_mark();
  splices_.push_back(std::move(s));
}

// True when dotted paths `a` and `b` are equal or one lies under the other.
static bool on_same_branch(const std::string& a, const std::string& b) {
  const std::string& s = a.size() <= b.size() ? a : b;
  const std::string& l = a.size() <= b.size() ? b : a;
  if (l.compare(0, s.size(), s) != 0) return false;
  return l.size() == s.size() || l[s.size()] == '.' || l[s.size()] == '[';
}

void YamlReader::error(const YAML::Node& at, const std::string& path, const std::string& message) {
  const bool has_node = at.IsDefined();
  const YAML::Mark mark = has_node ? at.Mark() : YAML::Mark::null_mark();
  for (const auto& s : splices_) {
    bool inside = false;
    if (has_node)
      for (const auto& n : s.nodes) inside = inside || n.is(at);
    if (inside) {
      issues_.add(issue_at(s.file, mark, s.key_prefix + path, message));
      return;
    }
  }
  if (mark.is_null()) {
    for (const auto& s : splices_) {
      if (on_same_branch(path, s.path)) {
        issues_.add(issue_at(s.file, s.key_mark, s.key_prefix + path, message));
        return;
      }
    }
  }
  issues_.add(issue_at(file_, mark.is_null() ? nearest_mark(path) : mark, path, message));
}

YAML::Mark YamlReader::nearest_mark(const std::string& path) const {
  if (!root_ || !root_.IsDefined()) return YAML::Mark::null_mark();
  YAML::Mark best = root_.Mark();
  YAML::Node n = root_;
  std::string token;
  // "a.b[2].c" -> a, b, 2, c
  auto step = [&](const std::string& t) {
    if (t.empty() || !n.IsDefined()) return;
    const YAML::Node& cur = n;  // const access: a missing key yields nothing, not a zombie
    YAML::Node next;
    if (cur.IsMap() && cur[t]) {
      next.reset(cur[t]);
    } else if (cur.IsSequence() && t.find_first_not_of("0123456789") == std::string::npos &&
               t.size() < 9 && std::stoul(t) < cur.size()) {
      next.reset(cur[std::stoul(t)]);
    } else {
      n.reset(YAML::Node(YAML::NodeType::Undefined));
      return;
    }
    n.reset(next);
    if (!n.Mark().is_null()) best = n.Mark();
  };
  for (const char c : path) {
    if (c == '.' || c == '[' || c == ']') {
      step(token);
      token.clear();
    } else {
      token += c;
    }
  }
  step(token);
  return best;
}

bool YamlReader::expect_map(const YAML::Node& node, const std::string& path,
                            const std::vector<std::string>& known) {
  if (!node || !node.IsMap()) {
    error(node, path, "expected a mapping");
    return false;
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node k = it->first;  // a copy: it-> yields a temporary
    if (!k.IsScalar()) {
      error(k, path, "keys must be plain names");
      continue;
    }
    std::string key = k.Scalar();
    std::string kp = join_path(path, key);
    if (!seen.insert(key).second) {
      error(k, kp, "duplicate key");
      continue;
    }
    bool ok = false;
    for (const auto& c : known) ok = ok || c == key;
    if (!ok) {
      std::string hint = closest_match(key, known);
      error(k, kp,
            hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint));
    }
  }
  return true;
}

bool YamlReader::require(const YAML::Node& map, const std::string& path, const std::string& key) {
  if (map && map.IsMap() && map[key]) return true;
  error(map, join_path(path, key), "missing required key");
  return false;
}

std::string show_node(const YAML::Node& n) {
  if (n.IsScalar()) return "\"" + n.Scalar() + "\"";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

static std::string show(const YAML::Node& n) { return show_node(n); }

std::optional<std::int64_t> YamlReader::get_int(const YAML::Node& map, const std::string& path,
                                                const std::string& key, std::int64_t min,
                                                std::int64_t max) {
  YAML::Node n = map[key];
  if (!n) return std::nullopt;
  std::string kp = join_path(path, key);
  std::int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v)) {
    error(n, kp, fmt::format("expected an integer, got {}", show(n)));
    return std::nullopt;
  }
  if (v < min || v > max) {
    error(n, kp, fmt::format("expected an integer in [{}, {}], got {}", min, max, v));
    return std::nullopt;
  }
  return v;
}

std::optional<double> YamlReader::get_double(const YAML::Node& map, const std::string& path,
                                             const std::string& key, double min, double max) {
  YAML::Node n = map[key];
  if (!n) return std::nullopt;
  std::string kp = join_path(path, key);
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    error(n, kp, fmt::format("expected a number, got {}", show(n)));
    return std::nullopt;
  }
  if (v < min || v > max) {
    error(n, kp, fmt::format("expected a number in [{}, {}], got {}", min, max, v));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> YamlReader::get_bool(const YAML::Node& map, const std::string& path,
                                         const std::string& key) {
  YAML::Node n = map[key];
  if (!n) return std::nullopt;
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    error(n, join_path(path, key), fmt::format("expected true or false, got {}", show(n)));
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> YamlReader::get_string(const YAML::Node& map, const std::string& path,
                                                  const std::string& key) {
  YAML::Node n = map[key];
  if (!n) return std::nullopt;
  if (!n.IsScalar()) {
    error(n, join_path(path, key), fmt::format("expected a string, got {}", show(n)));
    return std::nullopt;
  }
  // Control characters (a NUL, an escape sequence) would reach the terminal and the reports
  // as they are; newlines and tabs are text.
  for (const char c : n.Scalar()) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      error(n, join_path(path, key),
            fmt::format("expected text without control characters, got byte 0x{:02x}", u));
      return std::nullopt;
    }
  }
  return n.Scalar();
}

std::optional<std::string> YamlReader::get_enum(const YAML::Node& map, const std::string& path,
                                                const std::string& key,
                                                const std::vector<std::string>& allowed) {
  auto s = get_string(map, path, key);
  if (!s) return std::nullopt;
  for (const auto& a : allowed)
    if (a == *s) return s;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  std::string hint = closest_match(*s, allowed);
  error(map[key], join_path(path, key),
        fmt::format("unknown value \"{}\" (known: {}){}", *s, list,
                    hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
  return std::nullopt;
}

std::optional<double> YamlReader::get_quantity(const YAML::Node& map, const std::string& path,
                                               const std::string& key, Dimension dim) {
  YAML::Node n = map[key];
  if (!n) return std::nullopt;
  if (!n.IsScalar()) {
    error(n, join_path(path, key),
          fmt::format("expected {}, got {}", dimension_name(dim), show(n)));
    return std::nullopt;
  }
  try {
    return parse_quantity(n.Scalar(), dim);
  } catch (const std::invalid_argument& e) {
    error(n, join_path(path, key), e.what());
    return std::nullopt;
  }
}

}  // namespace stepcast
