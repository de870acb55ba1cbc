// The file toolkit: a write is whole or absent (the old file stays when it fails), reads name the
// file, locks exclude each other; what edp writes cannot be redirected (planted links, directories
// others may write to), what it reads cannot block or exhaust memory (FIFOs, devices, size limits),
// what it removes is its own (resolved path and owner); and the JSON field reader's refusals
// (nesting depth included).
#include "edp/core/files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/json_fields.h"
#include "edp/core/error.h"
#include "support/no_hang.h"

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

namespace {
std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
// A user other than this process's, for files and directories it "owns" (chown needs root).
constexpr uid_t kOtherUid = 65534;
}  // namespace

// A symbolic link planted where edp writes — at any name a writer of edp's past would have used
// for its temporary file (`<path>.tmp.<pid>.<n>`), or at the target itself — never receives the
// data: temporary names are unpredictable and created with O_EXCL|O_NOFOLLOW, and the rename
// replaces a link at the target instead of writing through it.
TEST(Files, PlantedLinksNeverReceiveTheData) {
  const fs::path d = tmp_dir();
  const fs::path victim = d / "victim";
  { std::ofstream(victim) << "precious\n"; }
  const std::string p = (d / "state.json").string();
  for (int n = 0; n < 64; ++n) fs::create_symlink(victim, p + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n));
  fs::create_symlink(victim, p);
  for (int i = 0; i < 4; ++i) files::write_atomic(p, "written " + std::to_string(i) + "\n");
  EXPECT_EQ(read_text(victim), "precious\n");
  EXPECT_FALSE(fs::is_symlink(p)) << "the link at the target itself was replaced, not followed";
  EXPECT_EQ(files::read_file(p), "written 3\n");
  // A lock made with create_exclusive: a link at its path is a holder (EEXIST), never followed.
  const std::string lock = (d / "lock").string();
  fs::create_symlink(victim, lock);
  EXPECT_EQ(files::create_exclusive(lock, "mine\n"), -1);
  EXPECT_EQ(read_text(victim), "precious\n");
  fs::remove_all(d);
}

// A directory that other users may write to without the sticky bit, or that another user owns,
// is refused with the reason; a sticky one (like /tmp) is fine.
TEST(Files, DirectoriesOthersCanWriteToAreRefused) {
  const fs::path d = tmp_dir();
  const fs::path open_dir = d / "open";
  fs::create_directories(open_dir);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  std::string m = error_of([&] { files::write_atomic((open_dir / "ckpt").string(), "x"); });
  EXPECT_NE(m.find("refusing to write " + (open_dir / "ckpt").string()), std::string::npos) << m;
  EXPECT_NE(m.find("(mode 0777) may be written by other users and has no sticky bit"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(open_dir / "ckpt"));
  m = error_of([&] { files::check_dir(open_dir.string(), "checkpoint directory"); });
  EXPECT_NE(m.find("checkpoint directory " + open_dir.string() + ": refused:"), std::string::npos) << m;
  // Inside it, even a directory of one's own can be swapped by anybody.
  fs::create_directories(open_dir / "mine");
  ASSERT_EQ(::chmod((open_dir / "mine").c_str(), 0700), 0);
  m = files::dir_problem((open_dir / "mine").string());
  EXPECT_NE(m.find("lies inside " + open_dir.string() + ", which every user may write to"), std::string::npos) << m;
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);  // sticky: others cannot rename or remove our entries
  EXPECT_EQ(files::dir_problem(open_dir.string()), "");
  EXPECT_NO_THROW(files::write_atomic((open_dir / "ckpt").string(), "x"));
  if (::geteuid() == 0) {  // another group's and another user's directories (made by root here)
    const fs::path group_dir = d / "group";
    fs::create_directories(group_dir);
    ASSERT_EQ(::chmod(group_dir.c_str(), 0770), 0);
    ASSERT_EQ(::chown(group_dir.c_str(), static_cast<uid_t>(-1), 65534), 0);
    EXPECT_NE(files::dir_problem(group_dir.string()).find("may be written by other users"), std::string::npos);
    const fs::path theirs = d / "theirs";
    fs::create_directories(theirs);
    ASSERT_EQ(::chown(theirs.c_str(), kOtherUid, kOtherUid), 0);
    m = files::dir_problem(theirs.string());
    EXPECT_NE(m.find("belongs to another user (uid 65534)"), std::string::npos) << m;
    // A link in the path that another user owns could be pointed anywhere.
    fs::create_directories(d / "real");
    fs::create_symlink(d / "real", d / "link");
    ASSERT_EQ(::lchown((d / "link").c_str(), kOtherUid, kOtherUid), 0);
    m = files::dir_problem((d / "link").string());
    EXPECT_NE(m.find((d / "link").string() + " is a symbolic link owned by another user"), std::string::npos) << m;
  }
  fs::remove_all(d);
}

// Reads of files edp did not write: a FIFO or a device is refused at once, naming the file (it
// would block or never end); a file over its kind's limit is refused naming the limit; a link
// where edp keeps a record of its own is refused when asked (Links::Refuse).
TEST(Files, ReadsRefuseWhatWouldBlockOrNeverEnd) {
  const fs::path d = tmp_dir();
  const std::string fifo = (d / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const edp_test::ChildResult r = edp_test::run_in_child([&] { return error_of([&] { files::read_file(fifo); }); });
  ASSERT_TRUE(r.finished) << "reading a FIFO blocked";
  EXPECT_NE(r.output.find(fifo + ": a FIFO, not a regular file"), std::string::npos) << r.output;
  const fs::path zero = d / "zero";
  fs::create_symlink("/dev/zero", zero);
  std::string m = error_of([&] { files::read_file(zero.string(), files::kRecordLimit); });
  EXPECT_NE(m.find(zero.string() + ": a character device, not a regular file"), std::string::npos) << m;
  m = error_of([&] { files::read_file(zero.string(), files::kRecordLimit, files::Links::Refuse); });
  EXPECT_NE(m.find(zero.string() + ": a symbolic link"), std::string::npos) << m;
  { std::ofstream(d / "big") << std::string(2000, 'x'); }
  m = error_of([&] { files::read_file((d / "big").string(), 1000); });
  EXPECT_NE(m.find("more than the 1000 bytes edp reads from a file of this kind"), std::string::npos) << m;
  EXPECT_EQ(files::read_file((d / "big").string(), 2000).size(), 2000u);
  fs::remove_all(d);
}

// remove_tree removes only an entry of the directory it is given, compared by resolved path, of
// this user, and follows no link inside it: a path that climbs out with "..", or whose directory
// resolves elsewhere, is refused, and a link inside the tree is removed, not its target.
TEST(Files, RemoveTreeRemovesOnlyWhatItWasGiven) {
  const fs::path d = tmp_dir();
  fs::create_directories(d / "parent" / "job" / "sub");
  fs::create_directories(d / "outside" / "keep");
  { std::ofstream(d / "outside" / "keep" / "file") << "keep\n"; }
  fs::create_symlink(d / "outside", d / "parent" / "job" / "sub" / "link");
  const std::string parent = (d / "parent").string();
  std::string why;
  // "parent/job/../../outside" names "outside", an entry of d, not of parent.
  EXPECT_FALSE(files::remove_tree(parent + "/job/../../outside", parent, &why));
  EXPECT_NE(why.find("is not in " + parent), std::string::npos) << why;
  EXPECT_FALSE(files::remove_tree(parent + "/..", parent, &why));
  EXPECT_TRUE(fs::exists(d / "outside" / "keep" / "file"));
  EXPECT_TRUE(files::remove_tree(parent + "/job", parent, &why)) << why;
  EXPECT_FALSE(fs::exists(d / "parent" / "job"));
  EXPECT_TRUE(fs::exists(d / "outside" / "keep" / "file")) << "a link inside the tree was followed";
  if (::geteuid() == 0) {
    fs::create_directories(d / "parent" / "theirs");
    ASSERT_EQ(::chown((d / "parent" / "theirs").c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_FALSE(files::remove_tree(parent + "/theirs", parent, &why));
    EXPECT_NE(why.find("belongs to another user"), std::string::npos) << why;
    EXPECT_TRUE(fs::exists(d / "parent" / "theirs"));
  }
  fs::remove_all(d);
}

// JSON nested deeper than json_fields::kMaxDepth is refused while it is parsed (a plan request of
// 200,000 nested arrays once crashed `plan`: the error message's copy of the value recursed once
// per level until the stack ran out).
TEST(JsonFields, DeepNestingIsRefused) {
  const std::string deep = "{\"jobs\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  const std::string m = refusal(deep);
  EXPECT_NE(m.find("req: nested more than 64 arrays or objects deep"), std::string::npos) << m.substr(0, 300);
  const std::string ok = std::string(30, '[') + std::string(30, ']');
  EXPECT_NO_THROW(json_fields::parse(ok, "req"));
}

// parse_each hands the elements of one array one at a time, after the rest of the document,
// whatever the order of the fields in the text.
TEST(JsonFields, ParseEachSeesTheHeaderFirst) {
  std::vector<std::string> seen;
  json_fields::parse_each(
      R"({"jobs": [{"id": "a"}, 2, [3]], "gpus": 4})", "req", "jobs",
      [&](const json_fields::Json& h) { seen.push_back("header " + h.dump()); },
      [&](size_t i, const json_fields::Json& e) { seen.push_back(std::to_string(i) + " " + e.dump()); });
  const std::vector<std::string> want = {R"(header {"gpus":4,"jobs":[]})", R"(0 {"id":"a"})", "1 2", "2 [3]"};
  EXPECT_EQ(seen, want);
}

TEST(Files, Crc32IsZlibs) {
  EXPECT_EQ(files::crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(files::crc32("6789", 4, files::crc32("12345", 5)), 0xCBF43926u) << "continued";
}
