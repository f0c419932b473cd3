// Setting a value at a dotted key path ("node.nic", "parallel.tp") of a YAML document, the
// one place it is done: a scenario's cluster.overrides are set into its profile's document in
// place (sim/cluster/profile.cc), and each sweep point is a copy of the scenario with one key
// set (sim/scenario/sweep.cc, with_dotted_key). A path that runs into a value is refused
// with one message for both.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace stepcast {

// "'a.b' is a value, not a section: it has no key 'c'": the dotted path goes on past a value
// (`walked`, the path up to that value; `key`, the next segment).
std::string dotted_not_a_section(const std::string& walked, const std::string& key);

// Sets `value` at the dotted path `segs` of `root` in place, creating mappings on the way; a
// mapping value merges into a mapping already there, key by key (profile overrides: the
// nodes of `root` keep their positions). Returns an error message, or "" on success.
std::string set_dotted_in_place(YAML::Node root, const std::vector<std::string>& segs,
                                const YAML::Node& value);

// A copy of `root` with `value` set at the dotted path `segs` (replacing what is there),
// creating mappings as needed; `root` is not changed (sweeps: the document is shared).
// Throws InputError (key `dotted_key`) when the path runs into a value.
YAML::Node copy_with_dotted(const YAML::Node& root, const std::vector<std::string>& segs,
                            const YAML::Node& value, const std::string& dotted_key);

}  // namespace stepcast
