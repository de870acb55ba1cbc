// edprun's job history (src/launch/history.h): the current size from the membership events, a
// rescale by restart completed by its event, the time a restart took until the processes ran
// again, the events file read incrementally (a torn last line read again once complete), and the
// summary's exact lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "edp/elastic/events.h"
#include "launch/history.h"

using edp::elastic::MembershipEvent;
using edp::launch::HistoryEntry;
using edp::launch::JobHistory;

namespace {

MembershipEvent start(int workers, int64_t batch, double t) {
  MembershipEvent e;
  e.event = "start";
  e.workers = workers;
  e.global_batch = batch;
  e.t = t;
  return e;
}

MembershipEvent rescale(const std::string& mode, int from, int to, int64_t from_b, int64_t b, int64_t step, double pause,
                        double t) {
  MembershipEvent e;
  e.event = "rescale";
  e.mode = mode;
  e.from_workers = from;
  e.workers = to;
  e.from_global_batch = from_b;
  e.global_batch = b;
  e.step = step;
  e.pause_s = pause;
  e.requested_t = t - pause;
  e.t = t;
  return e;
}

}  // namespace

TEST(JobHistory, NothingHappenedNoSummary) {
  JobHistory h(2);
  h.observe({start(2, 64, 100)});
  EXPECT_EQ(h.workers(), 2);
  EXPECT_EQ(h.global_batch(), 64);
  EXPECT_EQ(h.summary(0), "");
}

TEST(JobHistory, InPlaceEventsSetTheCurrentSize) {
  JobHistory h(2);
  h.observe({start(2, 64, 100), rescale("in_place", 2, 4, 64, 128, 37, 0.41, 110)});
  EXPECT_EQ(h.workers(), 4);
  EXPECT_EQ(h.global_batch(), 128);
  h.observe({rescale("in_place", 4, 1, 128, 32, 90, 0.02, 120)});
  EXPECT_EQ(h.workers(), 1);
  ASSERT_EQ(h.entries().size(), 2u);
  EXPECT_EQ(h.rescales(), 2);
  EXPECT_EQ(h.restarts(), 0);
}

// A crash restart goes at the current size; the pause runs from the failure to the next start.
TEST(JobHistory, RestartAfterACrashAndTheSummary) {
  JobHistory h(2);
  h.observe({start(2, 64, 100), rescale("in_place", 2, 4, 64, 128, 37, 0.5, 110)});
  h.restart_failure(3, false, h.workers(), 200);
  h.observe({start(4, 128, 206.25)});
  h.restart_rescale(h.workers(), 2, 64, 80, 300);
  EXPECT_EQ(h.workers(), 2);
  h.observe({start(2, 64, 302), rescale("restart", 4, 2, 128, 64, 80, 7.125, 307)});
  ASSERT_EQ(h.entries().size(), 3u) << "the restart-mode event completes edprun's entry";
  EXPECT_TRUE(h.entries()[2].has_pause);
  EXPECT_DOUBLE_EQ(h.entries()[1].pause_s, 6.25);
  h.restart_failure(76, true, h.workers(), 400);  // no start event after it: no time known
  EXPECT_EQ(h.summary(0),
            "edprun: the job ended with exit code 0 after 2 rescale(s) (1 in place, 1 by restart; paused 7.62 s in "
            "all) and 2 restart(s) (1 after a stall; down 6.25 s in all); last size 2 worker(s), global batch 64:\n"
            "edprun:   rescale 1 in place:   2 -> 4 worker(s), global batch 64 -> 128, step 37, pause 0.50 s\n"
            "edprun:   restart 1 (a crash, exit 3): at 4 worker(s), global batch 128, running again after 6.25 s\n"
            "edprun:   rescale 2 by restart: 4 -> 2 worker(s), global batch 128 -> 64, step 80, pause 7.12 s\n"
            "edprun:   restart 2 (a stall, exit 76): at 2 worker(s), global batch 64\n");
}

// A job that writes no events (an older library, or the test probe): what edprun knows itself.
TEST(JobHistory, WithoutEvents) {
  JobHistory h(2);
  h.restart_rescale(2, 1, 8, 5, 10);
  h.restart_failure(76, true, 1, 20);
  EXPECT_EQ(h.summary(0),
            "edprun: the job ended with exit code 0 after 1 rescale(s) (0 in place, 1 by restart) and 1 restart(s) "
            "(1 after a stall); last size 1 worker(s), global batch 8:\n"
            "edprun:   rescale 1 by restart: 2 -> 1 worker(s), global batch 8, step 5, pause unknown (the restarted "
            "job wrote no rescale event)\n"
            "edprun:   restart 1 (a stall, exit 76): at 1 worker(s), global batch 8\n");
}

TEST(JobHistory, PollReadsOnlyWhatIsNewAndRereadsATornLine) {
  char dir[] = "/tmp/edp-history-test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/events.jsonl";
  JobHistory h(2, path);
  EXPECT_FALSE(h.poll()) << "no file yet";
  std::ofstream(path, std::ios::app) << "{\"event\":\"start\",\"workers\":2,\"global_batch\":64,\"step\":0,\"t\":1}\n"
                                     << "{\"event\":\"rescale\",\"mode\":\"in_place\",\"from_wo";
  EXPECT_TRUE(h.poll());
  EXPECT_EQ(h.workers(), 2);
  EXPECT_FALSE(h.poll()) << "the file did not change";
  std::ofstream(path, std::ios::app) << "rkers\":2,\"workers\":3,\"from_global_batch\":64,\"global_batch\":96,"
                                        "\"step\":9,\"requested_t\":2,\"t\":2.5,\"pause_s\":0.5,\"phases\":{}}\n";
  EXPECT_TRUE(h.poll());
  EXPECT_EQ(h.workers(), 3);
  EXPECT_EQ(h.global_batch(), 96);
  ASSERT_EQ(h.entries().size(), 1u);
  EXPECT_EQ(h.entries()[0].kind, HistoryEntry::Rescale);
  EXPECT_DOUBLE_EQ(h.entries()[0].pause_s, 0.5);
  std::remove(path.c_str());
  rmdir(dir);
}

// A record whose integer field holds a float beyond any integer (a fuzzer's find: converting it
// was undefined behaviour) or a string is skipped whole; the good records around it are read.
TEST(Events, RecordsWithFieldsOutOfTheirRangeAreSkipped) {
  const std::string text =
      "{\"event\": \"start\", \"workers\": 2, \"global_batch\": 64, \"step\": 0, \"t\": 1.5}\n"
      "{\"event\": \"rate\", \"workers\": 4, \"global_batch\": 2.5e46, \"step\": 58, \"t\": 2.0}\n"
      "{\"event\": \"rate\", \"workers\": 3000000000, \"global_batch\": 64, \"step\": 58, \"t\": 2.0}\n"
      "{\"event\": \"rate\", \"workers\": \"4\", \"global_batch\": 64, \"step\": 58, \"t\": 2.0}\n"
      "{\"event\": \"stop\", \"workers\": 4, \"global_batch\": 128, \"step\": 60, \"t\": 3.0}\n";
  const auto events = edp::elastic::parse_events(text);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event, "start");
  EXPECT_EQ(events[1].event, "stop");
  EXPECT_EQ(events[1].global_batch, 128);
}
