// The elastic control file under a real mpirun (1-3 ranks): parsing and its errors, and
// ElasticControl::poll giving every rank the same decision at the same step — nothing while the
// file is absent, asks for the current size or does not parse (with a warning), the request once
// it asks for another size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"

using namespace edp;
namespace fs = std::filesystem;

namespace {

// A per-job path every rank agrees on (rank 0's pid, broadcast).
std::string shared_path(comm::Communicator& world, const std::string& name) {
  int64_t pid = ::getpid();
  world.broadcast(&pid, 1, DType::I64, 0);
  return (fs::temp_directory_path() / ("edp_elastic_" + std::to_string(pid) + "_" + name)).string();
}

// Atomic replace, as a controller should write it; the sleep makes the modification time move
// even on file systems with coarse timestamps.
void write_file(const std::string& path, const std::string& text) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::ofstream(path + ".tmp") << text;
  }
  fs::rename(path + ".tmp", path);
}

}  // namespace

TEST(Elastic, ControlFileParsesAndNamesBadFields) {
  comm::Communicator& world = comm::world();
  const std::string p = shared_path(world, "parse.json") + std::to_string(world.rank());
  write_file(p, R"({"workers": 4, "global_batch": 512})");
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{4, 512}));
  write_file(p, R"({"workers": 3})");
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{3, 0}));
  auto expect = [&](const std::string& text, const std::string& what) {
    write_file(p, text);
    try {
      elastic::read_control_file(p);
      ADD_FAILURE() << "no error for " << text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect(R"({"workers": 2,)", "malformed JSON");
  expect(R"([2])", "JSON object");
  expect(R"({"global_batch": 64})", "'workers' is missing");
  expect(R"({"workers": 0})", "'workers' must be >= 1");
  expect(R"({"workers": 2.5})", "'workers' must be an integer");
  expect(R"({"workers": 2, "batch": 64})", "unknown field 'batch'");
  expect(R"({"workers": 3, "global_batch": 100})", "not divisible by 'workers' 3");
  expect(R"({"workers": 2, "global_batch": -64})", "'global_batch' must be >= 1");
  fs::remove(p);
  EXPECT_THROW(elastic::read_control_file(p), DataError);
}

TEST(Elastic, PollGivesEveryRankTheSameDecision) {
  comm::Communicator& world = comm::world();
  const int W = world.size();
  const std::string p = shared_path(world, "control.json");
  if (world.rank() == 0) fs::remove(p);
  world.barrier();
  elastic::ElasticControl c(p, W, 64 * W);
  // Rank 0 changes the file between polls; every rank must see the same answer at each poll.
  auto poll_all = [&](const char* what) {
    const auto r = c.poll(world);
    int64_t mine[3] = {r ? 1 : 0, r ? r->workers : 0, r ? r->global_batch : 0}, lo[3], hi[3];
    world.allreduce(mine, lo, 3, DType::I64, comm::ReduceOp::Min);
    world.allreduce(mine, hi, 3, DType::I64, comm::ReduceOp::Max);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(lo[k], hi[k]) << what << ": ranks disagree";
    return r;
  };
  EXPECT_FALSE(poll_all("no file").has_value());
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W) + "}");  // the current size
  EXPECT_FALSE(poll_all("same size").has_value());
  if (world.rank() == 0) write_file(p, "{\"workers\": ");  // a controller's mistake
  testing::internal::CaptureStderr();
  EXPECT_FALSE(poll_all("malformed").has_value());
  const std::string err = testing::internal::GetCapturedStderr();
  if (world.rank() == 0) {
    EXPECT_NE(err.find("ignoring the control file"), std::string::npos) << err;
  }
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W + 1) + "}");
  auto r = poll_all("grow");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->workers, W + 1);
  EXPECT_EQ(r->global_batch, 64 * (W + 1));  // the per-worker batch stays
  // The file is read only when it changes, but a standing request keeps answering.
  r = poll_all("unchanged file");
  ASSERT_TRUE(r.has_value());
  if (world.rank() == 0) write_file(p, R"({"workers": 1, "global_batch": 32})");
  r = poll_all("shrink with a batch");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (elastic::RescaleRequest{1, 32}));
  world.barrier();
  if (world.rank() == 0) fs::remove(p);
}
