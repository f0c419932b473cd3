// Helpers shared by the calibrate/fit tests: the repository's profiles, a fresh temporary
// path per test (tests may run in parallel under ctest), a file written there, and the one
// issue a bad measurements text raises.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "calibrate/fit/measurements.h"
#include "model/error.h"

namespace stepcast::fit_test {

inline std::string profiles_dir() { return std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles"; }

inline std::string out_path(const std::string& stem) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "stepcast_calibrate_test";
  std::filesystem::create_directories(dir);
  return (dir / (std::string(info->test_suite_name()) + "." + info->name() + "." + stem)).string();
}

inline std::string write_file(const std::string& stem, const std::string& text) {
  const std::string p = out_path(stem);
  std::ofstream(p) << text;
  return p;
}

// Parses `text` (as "m.json") and returns the single issue it must raise.
inline InputIssue only_issue(const std::string& text) {
  try {
    parse_measurements(text, "m.json");
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().size(), 1u) << e.what();
    return e.issues().front();
  }
  ADD_FAILURE() << "no InputError for: " << text;
  return {};
}

// `s` with the first `from` replaced by `to` (a failure when there is none).
inline std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

}  // namespace stepcast::fit_test
