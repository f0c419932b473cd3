// Writing a changed YAML document as an edit of the text it was read from, so that the
// comments of the original (the sources of every value a profile holds) survive.
//
// patch_yaml_text compares the original document with the changed one key by key (block
// mappings are descended into; anything else is a leaf) and rewrites only the keys whose
// value changed, or appends the keys the original lacks to their (block) mapping. A changed
// key's lines — the key and everything indented below it — are replaced by the new value
// at the same indentation; a scalar key's trailing comment is kept, after a note naming
// the value it replaces. Comments on their own lines stay where they were.
//
// The result is checked: it must parse to exactly the changed document. When it does not,
// or when a change cannot be made in place (a key removed, a changed value inside a flow
// collection, a document that is not a block mapping), the function returns nothing and
// the caller writes the document whole.
#pragma once

#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

namespace stepcast {

// `original_text` must be the text `original` was parsed from. `note` is written in the
// trailing comment of every rewritten key (e.g. "fitted").
std::optional<std::string> patch_yaml_text(const std::string& original_text,
                                           const YAML::Node& original, const YAML::Node& changed,
                                           const std::string& note);

}  // namespace stepcast
