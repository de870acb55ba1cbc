// The file toolkit: a write is whole or absent (the old file stays when it fails), reads name the
// file, locks exclude each other; and the JSON field reader's refusals.
#include "edp/core/files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "core/json_fields.h"
#include "edp/core/error.h"

namespace fs = std::filesystem;
using namespace edp;

namespace {
fs::path tmp_dir() {
  const fs::path d = fs::temp_directory_path() / ("edp_files_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
std::string refusal(const std::string& text) {
  try {
    const json_fields::Json j = json_fields::parse(text, "req");
    json_fields::Fields f(j, "req");
    f.allow({"n", "x", "s", "o"});
    f.integer("n", 0, 100, 0);
    f.number("x", 0, 1e9, 1);
    f.text("s", "");
    if (auto o = f.object_if("o")) o->integer("k", 1, 2);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Files, WriteAtomicReplacesWholeAndLeavesNoTemporary) {
  const fs::path d = tmp_dir();
  const std::string p = (d / "a.json").string();
  files::write_atomic(p, "one\n");
  EXPECT_EQ(files::read_file(p), "one\n");
  files::write_atomic(p, "two\n", files::Sync::Durable);
  EXPECT_EQ(files::read_file(p), "two\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a temporary file was left";
  EXPECT_FALSE(files::read_file_if_exists((d / "none").string()).has_value());
  try {
    files::read_file((d / "none").string());
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("none"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// A write that fails half-way (here: the file size limit, as a full disk fails a write) leaves
// the old file whole, no temporary file, and says why.
TEST(Files, AFailedWriteKeepsTheOldFileAndSaysWhy) {
  const fs::path d = tmp_dir();
  const std::string p = (d / "a.json").string();
  files::write_atomic(p, "old\n");
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 16;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string why;
  const bool ok = files::try_write_atomic(p, std::string(100, 'x'), &why);
  bool threw = false;
  try {
    files::write_atomic(p, std::string(100, 'x'));
  } catch (const Error& e) {
    threw = std::string(e.what()).find("a.json") != std::string::npos;
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, SIG_DFL);
  EXPECT_FALSE(ok);
  EXPECT_NE(why.find("File too large"), std::string::npos) << why;
  EXPECT_TRUE(threw);
  EXPECT_EQ(files::read_file(p), "old\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a temporary file was left";
  // A target that cannot be replaced (a directory): the rename fails, nothing is left either.
  fs::create_directories(d / "dir" / "x");
  EXPECT_FALSE(files::try_write_atomic((d / "dir").string(), "data", &why));
  EXPECT_NE(why.find("cannot rename"), std::string::npos) << why;
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 2);
  fs::remove_all(d);
}

TEST(Files, LocksExcludeEachOther) {
  const fs::path d = tmp_dir();
  const std::string p = (d / "lock").string();
  EXPECT_FALSE(files::FileLock::held_elsewhere(p));
  {
    files::FileLock a = files::FileLock::acquire(p);
    EXPECT_FALSE(files::FileLock::try_acquire(p).has_value());  // flock locks per open file
    EXPECT_TRUE(files::FileLock::held_elsewhere(p));
  }
  EXPECT_TRUE(files::FileLock::try_acquire(p).has_value());
  fs::remove_all(d);
}

TEST(JsonFields, RefusalsNameTheFieldAndTheReason) {
  EXPECT_EQ(refusal(R"({"n": 3, "x": 2.5, "s": "a", "o": {"k": 1}})"), "");
  EXPECT_NE(refusal(R"({"n": 3, "colour": 1})").find("req: field 'colour': unknown field (allowed: n, x, s, o)"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"n": 1.5})").find("field 'n': must be an integer in [0, 100], got 1.5"), std::string::npos);
  EXPECT_NE(refusal(R"({"n": 1e30})").find("field 'n': must be an integer"), std::string::npos);
  EXPECT_NE(refusal(R"({"n": 99999999999999999999})").find("field 'n': must be an integer"), std::string::npos);
  EXPECT_NE(refusal(R"({"x": 1e400})").find("not valid JSON: number overflow"), std::string::npos) << refusal(R"({"x": 1e400})");
  EXPECT_NE(refusal(R"({"x": 5e-324})").find("field 'x': must be a normal number"), std::string::npos);
  EXPECT_NE(refusal(R"({"x": -1})").find("field 'x': must be a finite number in [0, 1000000000], got -1"),
            std::string::npos) << refusal(R"({"x": -1})");
  EXPECT_NE(refusal(R"({"n": 1, "n": 2})").find("field 'n' is given twice"), std::string::npos);
  EXPECT_NE(refusal(R"({"o": {"k": 1, "k": 1}})").find("field 'k' is given twice"), std::string::npos);
  EXPECT_NE(refusal(R"({"o": {"k": 3}})").find("req: field 'o': field 'k': must be an integer in [1, 2]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"s": 1})").find("field 's': must be a string"), std::string::npos);
  EXPECT_NE(refusal("{\"n\": 1,\n \"x\": }").find("line 2"), std::string::npos);
  EXPECT_NE(refusal("[1]").find("must be a JSON object"), std::string::npos);
  // The same key in two different objects is fine.
  EXPECT_EQ(refusal(R"({"n": 1, "o": {"k": 1}, "s": "n"})"), "");
}
