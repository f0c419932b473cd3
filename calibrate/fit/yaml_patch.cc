#include "calibrate/fit/yaml_patch.h"

#include <map>
#include <sstream>
#include <utility>
#include <vector>

namespace stepcast {
namespace {

std::string emit(const YAML::Node& n) {
  YAML::Emitter em;
  em.SetIndent(2);
  em << n;
  return em.good() ? std::string(em.c_str()) : std::string();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Column of the first character that is not a space, or -1 for a blank line.
int indent_of(const std::string& line) {
  const size_t c = line.find_first_not_of(' ');
  return c == std::string::npos ? -1 : static_cast<int>(c);
}

bool is_comment_or_blank(const std::string& line) {
  const int c = indent_of(line);
  return c < 0 || line[static_cast<size_t>(c)] == '#';
}

class Patcher {
 public:
  Patcher(std::vector<std::string> lines, std::string note)
      : lines_(std::move(lines)), note_(std::move(note)) {}

  // Compares two block mappings; records the edits. False: cannot be done in place.
  bool walk(const YAML::Node& orig, const YAML::Node& changed, int end_line) {
    if (!orig.IsMap() || !changed.IsMap() || orig.Style() == YAML::EmitterStyle::Flow) return false;
    std::map<std::string, std::pair<YAML::Node, YAML::Mark>> keys;
    int child_col = -1;
    for (auto it = orig.begin(); it != orig.end(); ++it) {
      if (!it->first.IsScalar()) return false;
      keys.emplace(it->first.Scalar(), std::make_pair(it->second, it->first.Mark()));
      if (child_col < 0) child_col = it->first.Mark().column;
    }
    for (const auto& [name, entry] : keys)
      if (!changed[name]) return false;  // a key removed: not an edit this patcher makes
    for (auto it = changed.begin(); it != changed.end(); ++it) {
      if (!it->first.IsScalar()) return false;
      const std::string name = it->first.Scalar();
      const YAML::Node value = it->second;  // a handle: it->second is a temporary's member
      const auto found = keys.find(name);
      if (found == keys.end()) {  // a new key, at the end of this mapping
        if (child_col < 0) return false;
        inserts_[end_line].push_back(render(name, value, child_col, "", ""));
        continue;
      }
      const YAML::Node& old = found->second.first;
      const YAML::Mark& mark = found->second.second;
      if (mark.line < 0 || mark.column < 0 || mark.line >= static_cast<int>(lines_.size()))
        return false;
      const int last = extent_end(mark.line, mark.column);
      if (old.IsMap() && value.IsMap() && old.size() > 0 &&
          old.Style() != YAML::EmitterStyle::Flow) {
        if (!walk(old, value, last)) return false;
        continue;
      }
      if (emit(old) == emit(value)) continue;
      const bool one_line_scalar = old.IsScalar() && last == mark.line;
      const std::string comment =
          one_line_scalar ? trailing_comment(lines_[static_cast<size_t>(mark.line)], mark.column)
                          : "";
      replaces_[mark.line] = {
          last, render(name, value, mark.column, one_line_scalar ? old.Scalar() : "", comment)};
    }
    return true;
  }

  std::string text() const {
    std::string out;
    auto put = [&](const std::string& s) {
      out += s;
      out += '\n';
    };
    auto flush_inserts = [&](int from, int to) {
      for (auto it = inserts_.lower_bound(from); it != inserts_.end() && it->first <= to; ++it)
        for (const std::string& block : it->second) out += block;
    };
    const int n = static_cast<int>(lines_.size());
    for (int i = 0; i < n;) {
      const auto r = replaces_.find(i);
      const int last = r == replaces_.end() ? i : r->second.first;
      if (r == replaces_.end())
        put(lines_[static_cast<size_t>(i)]);
      else
        out += r->second.second;
      flush_inserts(i, last);
      i = last + 1;
    }
    return out;
  }

  int last_content_line() const {
    for (int i = static_cast<int>(lines_.size()) - 1; i >= 0; --i)
      if (!is_comment_or_blank(lines_[static_cast<size_t>(i)])) return i;
    return -1;
  }

 private:
  // The last line of the key at (line, col): the lines below it indented deeper (or block
  // sequence entries at its own indentation); comment lines inside the range go with it.
  int extent_end(int line, int col) const {
    int end = line;
    for (int j = line + 1; j < static_cast<int>(lines_.size()); ++j) {
      const std::string& t = lines_[static_cast<size_t>(j)];
      if (is_comment_or_blank(t)) continue;
      const int c = indent_of(t);
      const bool seq_entry =
          c == col && t[static_cast<size_t>(c)] == '-' &&
          (t.size() == static_cast<size_t>(c) + 1 || t[static_cast<size_t>(c) + 1] == ' ');
      if (c > col || seq_entry) {
        end = j;
        continue;
      }
      break;
    }
    return end;
  }

  // The comment at the end of a `key: value` line ("" if none): the first '#' after a blank
  // outside quotes.
  static std::string trailing_comment(const std::string& line, int from) {
    bool single = false, dbl = false;
    for (size_t i = static_cast<size_t>(from); i < line.size(); ++i) {
      const char ch = line[i];
      if (ch == '\'' && !dbl) single = !single;
      if (ch == '"' && !single) dbl = !dbl;
      if (ch == '#' && !single && !dbl && i > 0 && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
        const size_t b = line.find_first_not_of(' ', i + 1);
        return b == std::string::npos ? "" : line.substr(b);
      }
    }
    return "";
  }

  // `key: value` at column `col`, the note (and what it replaces) in a comment on the first
  // line.
  std::string render(const std::string& key, const YAML::Node& value, int col,
                     const std::string& old_value, const std::string& old_comment) const {
    YAML::Emitter em;
    em.SetIndent(2);
    em << YAML::BeginMap << YAML::Key << key << YAML::Value << value << YAML::EndMap;
    std::string comment = note_;
    // (A new value that quotes the old one, as a source that extends the base's, says it.)
    if (!old_value.empty() &&
        !(value.IsScalar() && value.Scalar().find(old_value) != std::string::npos))
      comment += "; was " + old_value;
    if (!old_comment.empty()) comment += " (" + old_comment + ")";
    std::string out;
    bool first = true;
    for (const std::string& l : split_lines(em.c_str())) {
      out += std::string(static_cast<size_t>(col), ' ') + l;
      if (first && !comment.empty()) out += "  # " + comment;
      first = false;
      out += '\n';
    }
    return out;
  }

  std::vector<std::string> lines_;
  std::string note_;
  std::map<int, std::pair<int, std::string>> replaces_;  // first line -> (last line, text)
  std::map<int, std::vector<std::string>> inserts_;      // after line -> blocks, in order
};

}  // namespace

std::optional<std::string> patch_yaml_text(const std::string& original_text,
                                           const YAML::Node& original, const YAML::Node& changed,
                                           const std::string& note) {
  Patcher p(split_lines(original_text), note);
  if (!p.walk(original, changed, p.last_content_line())) return std::nullopt;
  std::string out = p.text();
  try {
    if (emit(YAML::Load(out)) != emit(changed)) return std::nullopt;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  return out;
}

}  // namespace stepcast
