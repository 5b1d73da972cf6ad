#include "common/base/subprocess.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Waits for what will happen (output, exit): a bound no passing run comes
// near, however busy the machine. Only TimeoutAndSignal's 100 ms is about
// the timeout.
constexpr auto kGenerous = 60s;

TEST(SubprocessTest, WaitsForOutputAndExitStatus) {
  Subprocess p("/bin/sh", {"-c", "echo starting >&2; sleep 0.1; echo ready now >&2; exit 3"});
  ASSERT_TRUE(p.started());
  EXPECT_TRUE(p.WaitFor("ready", kGenerous).ok());
  EXPECT_EQ(p.Wait(kGenerous), 3);
  EXPECT_THAT(p.stderr_text(), HasSubstr("starting"));
}

TEST(SubprocessTest, ExitBeforeReadyIsUnavailableWithItsMessage) {
  Subprocess p("/bin/sh", {"-c", "echo 'bad flag --x' >&2; exit 2"});
  absl::Status s = p.WaitFor("ready", kGenerous);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad flag --x"));
}

TEST(SubprocessTest, TimeoutAndSignal) {
  Subprocess p("/bin/sleep", {"30"});
  EXPECT_EQ(p.WaitFor("never", 100ms).code(), absl::StatusCode::kDeadlineExceeded);
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(kGenerous), 128 + SIGTERM);
}

TEST(SubprocessTest, MissingBinaryFailsCleanly) {
  Subprocess p("/nonexistent/binary", {});
  EXPECT_EQ(p.Wait(kGenerous), 127);
  EXPECT_THAT(p.stderr_text(), HasSubstr("cannot run /nonexistent/binary"));
}

}  // namespace
}  // namespace moesplit
