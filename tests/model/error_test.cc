// InputIssue::str: "file:line:col: key: message", printable on a terminal.
#include "model/error.h"

#include <gtest/gtest.h>

namespace stepcast {
namespace {

TEST(InputIssue, FormatsFileLineColumnKeyMessage) {
  EXPECT_EQ((InputIssue{"s.yaml", 3, 7, "parallel.tp", "expected an integer"}).str(),
            "s.yaml:3:7: parallel.tp: expected an integer");
  EXPECT_EQ((InputIssue{"s.yaml", 0, 0, "", "empty"}).str(), "s.yaml: empty");
  EXPECT_EQ((InputIssue{"", 0, 0, "--threads", "bad"}).str(), "--threads: bad");
}

// A key with a carriage return (from a mangled file) would make the terminal overwrite the
// start of the line, file name included; control bytes and invalid UTF-8 are shown as \xNN,
// valid UTF-8 is kept.
TEST(InputIssue, ControlBytesAndInvalidUtf8AreEscaped) {
  EXPECT_EQ((InputIssue{"s.yaml", 2, 1, "ove\rrides", "unknown key"}).str(),
            "s.yaml:2:1: ove\\x0drides: unknown key");
  EXPECT_EQ((InputIssue{"s.yaml", 0, 0, "a\tb", "got \"x\ny\""}).str(),
            "s.yaml: a\\x09b: got \"x\\x0ay\"");
  EXPECT_EQ((InputIssue{"caf\xc3\xa9.yaml", 0, 0, "k\xff", "\xe2\x82\xac \xe2\x82"}).str(),
            "caf\xc3\xa9.yaml: k\\xff: \xe2\x82\xac \\xe2\\x82");
}

// closest_match: a near spelling first (distance within max(2, len/3)); else the key that
// shares the leading words, when they are two thirds of the word; else nothing.
TEST(ClosestMatch, NearSpellingThenSharedLeadingWords) {
  const std::vector<std::string> keys = {"zero3_prefetch_elements", "zero3_persistence_elements",
                                         "zero3_reshard_after_forward",
                                         "zero3_reshard_after_backward", "host_launch_us"};
  EXPECT_EQ(closest_match("zero3_prefetch_element", keys), "zero3_prefetch_elements");
  EXPECT_EQ(closest_match("host_launch_ms", keys), "host_launch_us");
  // "zero3_prefetch_" is 15 of 17 characters: another unit for the same rule.
  EXPECT_EQ(closest_match("zero3_prefetch_mb", keys), "zero3_prefetch_elements");
  EXPECT_EQ(closest_match("zero3_reshard_after_fwd", keys), "zero3_reshard_after_forward");
  // Two keys share "rule_size_" (10 of 12 characters): the nearer spelling wins, in either
  // order (distance 8 against 17).
  EXPECT_EQ(closest_match("rule_size_mb", {"rule_size_elements_per_rank", "rule_size_elements"}),
            "rule_size_elements");
  EXPECT_EQ(closest_match("rule_size_mb", {"rule_size_elements", "rule_size_elements_per_rank"}),
            "rule_size_elements");
  // A shared first word ("zero3_", 6 of 13) is not enough, nor a prefix inside a word.
  EXPECT_EQ(closest_match("zero3_buckets", keys), "");
  EXPECT_EQ(closest_match("hostname_launcher", keys), "");
  EXPECT_EQ(closest_match("tp", keys), "");
  EXPECT_EQ(closest_match("anything", {}), "");
}

}  // namespace
}  // namespace stepcast
