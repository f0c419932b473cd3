// Helpers shared by the calibrate/fit tests: the repository's profiles, a fresh temporary
// path per test (tests may run in parallel under ctest) and a file written there.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

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

}  // namespace stepcast::fit_test
