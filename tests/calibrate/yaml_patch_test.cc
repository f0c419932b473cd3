// Tests of calibrate/fit/yaml_patch: a changed YAML document written as an edit of the
// text it was read from, keeping the comments.
#include "calibrate/fit/yaml_patch.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stepcast {
namespace {

std::string emit(const YAML::Node& n) {
  YAML::Emitter em;
  em.SetIndent(2);
  em << n;
  return em.c_str();
}

TEST(YamlPatch, RewritesOnlyTheChangedKeysAndKeepsEveryComment) {
  const std::string text =
      "# header comment\n"
      "a: 1  # one\n"
      "b:\n"
      "  # about c\n"
      "  c: 2\n"
      "  d: [1, 2]\n"
      "  e:\n"
      "    - x\n"
      "    - y\n"
      "f: keep  # keep me\n";
  const YAML::Node original = YAML::Load(text);
  YAML::Node changed = YAML::Load(text);
  changed["a"] = 5;
  YAML::Node d(YAML::NodeType::Sequence);
  d.SetStyle(YAML::EmitterStyle::Flow);
  d.push_back(3);
  changed["b"]["d"] = d;
  YAML::Node e(YAML::NodeType::Sequence);
  e.push_back("z");
  changed["b"]["e"] = e;
  changed["b"]["g"] = "new";
  changed["h"] = 7;
  const auto out = patch_yaml_text(text, original, changed, "fitted");
  ASSERT_TRUE(out.has_value());
  // By hand: a scalar keeps its comment after the note and the value it replaces; a flow or
  // block value is rewritten whole at its key's indentation; new keys go at the end of
  // their mapping (g after b's last line, h after the document's); c, f and every comment
  // line are untouched.
  EXPECT_EQ(*out,
            "# header comment\n"
            "a: 5  # fitted; was 1 (one)\n"
            "b:\n"
            "  # about c\n"
            "  c: 2\n"
            "  d: [3]  # fitted\n"
            "  e:  # fitted\n"
            "    - z\n"
            "  g: new  # fitted\n"
            "f: keep  # keep me\n"
            "h: 7  # fitted\n");
}

TEST(YamlPatch, RefusesWhatItCannotDoInPlace) {
  const std::string text = "a: 1\nb: {c: 2, d: 3}\n";
  const YAML::Node original = YAML::Load(text);
  // A removed key.
  YAML::Node removed = YAML::Load("a: 1\n");
  EXPECT_FALSE(patch_yaml_text(text, original, removed, "fitted").has_value());
  // Not a mapping at the top.
  EXPECT_FALSE(patch_yaml_text("- 1\n", YAML::Load("- 1\n"), YAML::Load("- 2\n"), "x"));
  // A change inside a flow mapping rewrites the whole mapping on its line: fine.
  YAML::Node inner = YAML::Load(text);
  inner["b"]["c"] = 9;
  const auto out = patch_yaml_text(text, original, inner, "fitted");
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, "a: 1\nb: {c: 9, d: 3}  # fitted\n");
}

// Every block-mapping scalar leaf of a document, as key paths.
void scalar_paths(const YAML::Node& n, std::vector<std::string>& prefix,
                  std::vector<std::vector<std::string>>& out) {
  if (!n.IsMap() || n.Style() == YAML::EmitterStyle::Flow) return;
  for (auto it = n.begin(); it != n.end(); ++it) {
    prefix.push_back(it->first.Scalar());
    if (it->second.IsScalar()) out.push_back(prefix);
    scalar_paths(it->second, prefix, out);
    prefix.pop_back();
  }
}

// The node at the first `depth` keys of `path` (reset() rebinds; `n = n[k]` would assign).
YAML::Node at(const YAML::Node& root, const std::vector<std::string>& path, size_t depth) {
  YAML::Node n = root;
  for (size_t i = 0; i < depth; ++i) n.reset(n[path[i]]);
  return n;
}

TEST(YamlPatch, ShippedProfilesKeepTheirCommentsUnderRandomEdits) {
  // Property over every shipped profile and random sets of changed scalars plus a new key in
  // a random mapping: the patch is made in place, parses to the changed document, and the
  // original's comment lines all appear in it, in order.
  std::mt19937 rng(7);
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const YAML::Node original = YAML::Load(text);
    std::vector<std::string> prefix;
    std::vector<std::vector<std::string>> leaves;
    scalar_paths(original, prefix, leaves);
    ASSERT_GT(leaves.size(), 5u) << entry.path();
    for (int trial = 0; trial < 20; ++trial) {
      YAML::Node changed = YAML::Load(text);
      for (const auto& path : leaves)
        if (rng() % 4 == 0) at(changed, path, path.size() - 1)[path.back()] = "123.5 us";
      const auto& host = leaves[rng() % leaves.size()];
      at(changed, host, host.size() - 1)["added_key"] = 42;
      const auto out = patch_yaml_text(text, original, changed, "fitted");
      ASSERT_TRUE(out.has_value()) << entry.path() << " trial " << trial;
      EXPECT_EQ(emit(YAML::Load(*out)), emit(changed));
      std::istringstream orig_lines(text), new_lines(*out);
      std::string want, got;
      while (std::getline(orig_lines, want)) {
        if (want.find_first_not_of(' ') == std::string::npos ||
            want[want.find_first_not_of(' ')] != '#')
          continue;
        bool found = false;
        while (!found && std::getline(new_lines, got)) found = got == want;
        ASSERT_TRUE(found) << entry.path() << ": comment lost: " << want;
      }
    }
  }
  EXPECT_GE(files, 3);
}

}  // namespace
}  // namespace stepcast
