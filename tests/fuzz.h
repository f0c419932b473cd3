// Shared by the bad-input fuzz tests (tests/sim/scenario/fuzz_test.cc,
// tests/sim/report/json_fuzz_test.cc, tests/calibrate/measurements_fuzz_test.cc): the seed
// and the number of trials (overridable from the environment for a long campaign), random
// mutations of YAML and JSON documents, and the check that a refusal is a located
// InputError.
//
// Campaign: STEPCAST_FUZZ_SEED=<n> (default: each test's own seed) and
// STEPCAST_FUZZ_TRIALS=<mutated documents per base file> (default: each test's CTest
// count, a few seconds in all), e.g.
//   STEPCAST_FUZZ_SEED=7 STEPCAST_FUZZ_TRIALS=2000 build/tests/sim/scenario/scenario_fuzz_test
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "model/error.h"

namespace stepcast::fuzz {

// The value of environment variable `name` as a non-negative integer, `fallback` when unset
// or not a number.
inline unsigned long env_number(const char* name, unsigned long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  return end != nullptr && *end == '\0' ? n : fallback;
}
inline std::mt19937 rng_for(unsigned long default_seed) {
  return std::mt19937(
      static_cast<std::mt19937::result_type>(env_number("STEPCAST_FUZZ_SEED", default_seed)));
}
inline int trials(int default_trials) {
  return static_cast<int>(
      env_number("STEPCAST_FUZZ_TRIALS", static_cast<unsigned long>(default_trials)));
}
// True when a campaign overrides the trial count (tests then skip their "both outcomes
// occur" floors, which are tuned to the default counts).
inline bool campaign() { return std::getenv("STEPCAST_FUZZ_TRIALS") != nullptr; }

// Hostile scalar texts (YAML; the JSON mutator uses the numbers among them too): bad
// numbers, wrong types, units where none belong, numbers at the limits of int32, uint32,
// int64 and uint64 (2147483648 = 2^31, 4294967296 = 2^32, 1e19 > 2^63), and nested values.
inline const std::vector<std::string>& hostile_texts() {
  static const std::vector<std::string> v = {"-1",
                                             "0",
                                             "0.0",
                                             "1e300",
                                             "-1e300",
                                             "nan",
                                             ".nan",
                                             ".inf",
                                             "-.inf",
                                             "abc",
                                             "''",
                                             "[]",
                                             "{}",
                                             "3.5",
                                             "2",
                                             "7",
                                             "64",
                                             "true",
                                             "~",
                                             "1.5 GB",
                                             "-0",
                                             "1e-300",
                                             "99999999999999999999",
                                             "0x10",
                                             "[1, 2]",
                                             "{a: 1}",
                                             "0 us",
                                             "-5 GB/s",
                                             "1/2",
                                             "2147483647",
                                             "2147483648",
                                             "-2147483648",
                                             "-2147483649",
                                             "4294967295",
                                             "4294967296",
                                             "9223372036854775807",
                                             "9223372036854775808",
                                             "-9223372036854775809",
                                             "1e19",
                                             "1e9",
                                             "1000000",
                                             "65536",
                                             "1e6 Gb/s",
                                             "1 ps",
                                             "1e30 B"};
  return v;
}
// A very long string and a deeply nested value (a list inside a mapping inside a list ...).
inline std::string long_text() { return std::string(20000, 'x'); }
inline std::string nested_text(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += i % 2 ? "{a: " : "[";
  s += "1";
  for (int i = depth; i-- > 0;) s += i % 2 ? "}" : "]";
  return s;
}

// The key with its case changed or a typo (tp -> TP, Tp, t, tpp, pt).
inline std::string typo(const std::string& key, std::mt19937& rng) {
  if (key.empty()) return "x";
  std::string k = key;
  switch (rng() % 5) {
    case 0:
      for (char& c : k) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      break;
    case 1: k[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(k[0]))); break;
    case 2: k.erase(rng() % k.size(), 1); break;
    case 3: k.insert(rng() % (k.size() + 1), 1, k[rng() % k.size()]); break;
    default:
      if (k.size() > 1) {
        const std::size_t i = rng() % (k.size() - 1);
        std::swap(k[i], k[i + 1]);
      } else {
        k += k;
      }
  }
  return k == key ? key + "_" : k;
}

// A scratch directory of this process (a campaign may run beside CTest).
inline std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d;
}

// ---- YAML ----

// Every node of the document with the path to it ("parallel.tp", "sweep.parallel.tp[1]").
struct YamlSite {
  std::string path;
  YAML::Node parent;  // the mapping or sequence holding the node
  YAML::Node key;     // its key (mappings) or index (sequences)
  YAML::Node node;
};

inline void collect(const YAML::Node& n, const std::string& path, std::vector<YamlSite>& out) {
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string p = path.empty() ? it->first.Scalar() : path + "." + it->first.Scalar();
      out.push_back(YamlSite{p, n, it->first, it->second});
      collect(it->second, p, out);
    }
  } else if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      out.push_back(YamlSite{p, n, YAML::Node(i), n[i]});
      collect(n[i], p, out);
    }
  }
}

// One random change to `doc` in place; appends what it did to `what`.
inline void mutate_once(YAML::Node& doc, std::mt19937& rng, std::string& what) {
  std::vector<YamlSite> sites;
  collect(doc, "", sites);
  if (sites.empty()) return;
  YamlSite s = sites[rng() % sites.size()];
  const bool in_map = s.parent.IsMap();
  auto set = [&](const YAML::Node& v) {
    if (in_map)
      s.parent[s.key.Scalar()] = v;
    else
      s.parent[s.key.as<std::size_t>()] = v;
  };
  if (!what.empty()) what += "; ";
  const int op = static_cast<int>(rng() % 20);
  if (op < 9) {  // a hostile value
    const auto& h = hostile_texts();
    const std::string v = h[rng() % h.size()];
    what += s.path + " = " + v;
    set(YAML::Load(v));
  } else if (op == 9) {  // a very long string
    what += s.path + " = <20,000 x>";
    set(YAML::Node(long_text()));
  } else if (op == 10) {  // a deeply nested value
    what += s.path + " = <nested 40 deep>";
    set(YAML::Load(nested_text(40)));
  } else if (op < 13 && in_map) {  // delete the key
    what += "delete " + s.path;
    s.parent.remove(s.key.Scalar());
  } else if (op < 15 && in_map) {  // an unknown key beside it
    what += "add " + s.path + "~bogus_key";
    YAML::Node p = s.parent;
    p["bogus_key"] = 1;
  } else if (op < 17 && in_map) {  // the key with a typo or the wrong case
    const std::string k = typo(s.key.Scalar(), rng);
    what += "rename " + s.path + " -> " + k;
    YAML::Node p = s.parent;
    const YAML::Node v = s.node;
    p.remove(s.key.Scalar());
    p[k] = v;
  } else if (!in_map) {  // a sequence element duplicated (appended again)
    what += "duplicate " + s.path;
    YAML::Node p = s.parent;
    p.push_back(YAML::Clone(s.node));
  } else {  // a mapping or list replaced by a scalar, or a scalar by an empty mapping
    what += s.path + (s.node.IsScalar() ? " = {}" : " = 1");
    set(s.node.IsScalar() ? YAML::Node(YAML::NodeType::Map) : YAML::Node(1));
  }
}

// A deep copy of `doc` with 1 change (half the time) or 2-3 changes.
inline YAML::Node mutate(const YAML::Node& doc, std::mt19937& rng, std::string& what) {
  YAML::Node copy = YAML::Clone(doc);
  const int n = rng() % 2 ? 1 : 2 + static_cast<int>(rng() % 2);
  for (int i = 0; i < n; ++i) mutate_once(copy, rng, what);
  return copy;
}

inline std::string emit(const YAML::Node& n) {
  YAML::Emitter em;
  em << n;
  return std::string(em.c_str()) + "\n";
}

// ---- JSON ----

// Pointers ("/gemm/3/time_us") of every value of the document.
inline void collect(const nlohmann::json& j, const std::string& ptr,
                    std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string k = it.key();
      std::string esc;
      for (char c : k)
        esc += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
      out.push_back(ptr + "/" + esc);
      collect(*it, ptr + "/" + esc, out);
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      out.push_back(ptr + "/" + std::to_string(i));
      collect(j[i], ptr + "/" + std::to_string(i), out);
    }
  }
}

inline nlohmann::json hostile_json(std::mt19937& rng) {
  switch (rng() % 16) {
    case 0: return nullptr;
    case 1: return "abc";
    case 2: return nlohmann::json::array();
    case 3: return nlohmann::json::object();
    case 4: return true;
    case 5: return -1;
    case 6: return 0;
    case 7: return 0.5;
    case 8: return 1e300;
    case 9: return -1e300;
    case 10: return 2147483648LL;
    case 11: return -2147483649LL;
    case 12: return 4294967296LL;
    case 13: return 1e19;
    case 14: return long_text();
    default: {
      nlohmann::json j = 1;
      for (int i = 0; i < 40; ++i) j = nlohmann::json::array({j});
      return j;
    }
  }
}

inline void mutate_once(nlohmann::json& doc, std::mt19937& rng, std::string& what) {
  std::vector<std::string> ptrs;
  collect(doc, "", ptrs);
  if (ptrs.empty()) return;
  const nlohmann::json::json_pointer p(ptrs[rng() % ptrs.size()]);
  nlohmann::json& parent = doc[p.parent_pointer()];
  const std::string last = p.back();
  if (!what.empty()) what += "; ";
  const int op = static_cast<int>(rng() % 10);
  if (op < 5) {
    nlohmann::json v = hostile_json(rng);
    what += p.to_string() + " = " + v.dump().substr(0, 40);
    doc[p] = std::move(v);
  } else if (op < 7) {
    what += "delete " + p.to_string();
    if (parent.is_object())
      parent.erase(last);
    else
      parent.erase(static_cast<std::size_t>(std::stoul(last)));
  } else if (op == 7 && parent.is_object()) {
    what += "add " + p.to_string() + "~bogus_key";
    parent["bogus_key"] = 1;
  } else if (op == 8 && parent.is_object()) {
    const std::string k = typo(last, rng);
    what += "rename " + p.to_string() + " -> " + k;
    nlohmann::json v = parent[last];
    parent.erase(last);
    parent[k] = std::move(v);
  } else if (parent.is_array()) {
    what += "duplicate " + p.to_string();
    parent.push_back(doc[p]);
  } else {
    what += p.to_string() + " = \"1\"";
    doc[p] = "1";
  }
}

inline nlohmann::json mutate(const nlohmann::json& doc, std::mt19937& rng, std::string& what) {
  nlohmann::json copy = doc;
  const int n = rng() % 2 ? 1 : 2 + static_cast<int>(rng() % 2);
  for (int i = 0; i < n; ++i) mutate_once(copy, rng, what);
  return copy;
}

// ---- outcome ----

// In a campaign, names the document about to run on stderr (a crash or an out-of-memory kill
// then leaves its name as the log's last line).
inline void announce(const std::string& ctx) {
  if (campaign()) std::fprintf(stderr, "try %s\n", ctx.c_str());
}

struct Tally {
  int ran = 0, refused = 0;
};

// A refusal names a file, a key and (when `needs_line`: formats with lines) a line. An issue
// about the whole document (its message contains `document_level`, when given) has no key.
inline void expect_located(const InputError& e, const std::string& ctx, bool needs_line = true,
                           const std::string& document_level = "") {
  ASSERT_FALSE(e.issues().empty()) << ctx << ": " << e.what();
  for (const InputIssue& i : e.issues()) {
    EXPECT_FALSE(i.message.empty()) << ctx;
    EXPECT_FALSE(i.file.empty()) << ctx << ": " << i.str();
    if (needs_line) {
      EXPECT_GT(i.line, 0) << ctx << ": " << i.str();
    }
    if (document_level.empty() || i.message.find(document_level) == std::string::npos) {
      EXPECT_FALSE(i.key.empty()) << ctx << ": " << i.str();
    }
  }
}

// Runs `body`; counts a clean run or a located InputError, fails on anything else.
template <class F>
void expect_runs_or_refuses(F&& body, const std::string& ctx, Tally& t, bool needs_line = true,
                            const std::string& document_level = "") {
  try {
    body();
    ++t.ran;
  } catch (const InputError& e) {
    ++t.refused;
    expect_located(e, ctx, needs_line, document_level);
  } catch (const std::exception& e) {
    ADD_FAILURE() << ctx << ": not an InputError: " << e.what();
  }
}

}  // namespace stepcast::fuzz
