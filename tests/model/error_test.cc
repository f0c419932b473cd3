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

}  // namespace
}  // namespace stepcast
