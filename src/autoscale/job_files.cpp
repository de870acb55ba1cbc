// A job's directory as the live controller reads and writes it (job_files.h).
#include "autoscale/job_files.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/elastic/elastic.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace edp::autoscale {

bool JobDirRunner::changed(const fs::path& p, FileStamp& s) {
  std::error_code ec;
  FileStamp now{true, fs::last_write_time(p, ec), 0};
  if (!ec) now.size = fs::file_size(p, ec);
  if (ec) now = FileStamp{true, {}, 0};  // missing: unchanged until it appears
  if (s.seen && now.mtime == s.mtime && now.size == s.size) return false;
  s = now;
  return true;
}

void JobDirRunner::write_control(const ManagedJob& j, int workers, int64_t batch, bool stop) {
  json c = {{"workers", workers}, {"global_batch", batch}};
  if (stop) c["stop"] = true;
  files::make_dir(dir(j), "job directory");  // before its first start
  files::write_atomic(dir(j) + "/control.json", c.dump() + "\n");
}

void JobDirRunner::write_hostfile(const ManagedJob& j, const std::vector<HostShare>& hosts) {
  std::string text = "# edp-autoscale serve: job " + j.id + "'s slots (edprun reads this again at every restart)\n";
  for (const auto& [h, n] : hosts) text += h + " slots=" + std::to_string(n) + "\n";
  files::write_atomic(dir(j) + "/hostfile", text);
}

std::optional<elastic::JobStatus> JobDirRunner::status(const ManagedJob& j, bool even_unchanged) {
  const fs::path p = fs::path(dir(j)) / "status.json";
  if (!changed(p, cache_[j.id].status) && !even_unchanged) return std::nullopt;
  return elastic::read_status(p.string());
}

const std::vector<elastic::MembershipEvent>& JobDirRunner::events(const ManagedJob& j) {
  Cache& c = cache_[j.id];
  const fs::path p = fs::path(dir(j)) / "events.jsonl";
  if (changed(p, c.events_stamp)) c.events = elastic::read_events(p.string());
  return c.events;
}

std::optional<ExitRecord> JobDirRunner::exit_file(const ManagedJob& j) const {
  std::optional<std::string> text;
  try {
    text = files::read_file_if_exists(dir(j) + "/exit.json", files::kRecordLimit);
  } catch (const DataError&) {
    text = "";  // there, but not a record the keeper wrote: an unknown exit
  }
  if (!text) return std::nullopt;
  const auto e = json_fields::try_parse(*text);
  ExitRecord r;
  r.code = e && e->is_object() && (*e)["code"].is_number_integer() ? (*e)["code"].get<int>() : -1;
  return r;
}

std::vector<std::string> JobDirRunner::edprun_command(const ManagedJob& j, const std::vector<std::string>& launch) const {
  const fs::path d = dir(j);
  std::vector<std::string> argv = {edprun_, "--np", std::to_string(j.workers), "--control-file",
                                   (d / "control.json").string(), "--status-file", (d / "status.json").string(),
                                   "--events-file", (d / "events.jsonl").string(), "--max-restarts",
                                   std::to_string(j.spec.max_restarts), "--restart-backoff", "1"};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.insert(argv.end(), edprun_args_.begin(), edprun_args_.end());
  argv.push_back("--");
  for (std::string a : j.spec.command) {
    for (size_t p; (p = a.find("{job_dir}")) != std::string::npos;) a.replace(p, 9, d.string());
    argv.push_back(a);
  }
  return argv;
}

std::string JobDirRunner::last_error(const ManagedJob& j) { return last_error_in(fs::path(dir(j)) / "log"); }
FinalMetrics JobDirRunner::final_metrics(const ManagedJob& j) { return metrics_in(fs::path(dir(j)) / "log"); }

namespace {

// Calls `fn` with each line of a job's log, read as a regular file only (a FIFO put in its place
// would block the controller).
template <typename Fn>
void for_each_line(const fs::path& log, Fn&& fn) {
  int fd = -1;
  try {
    fd = files::open_regular(log.string(), "job log");
  } catch (const DataError&) {
    return;
  }
  std::FILE* f = ::fdopen(fd, "r");
  if (!f) {
    ::close(fd);
    return;
  }
  char* buf = nullptr;
  size_t cap = 0;
  for (ssize_t n; (n = ::getline(&buf, &cap, f)) >= 0;) {
    std::string line(buf, static_cast<size_t>(n));
    if (!line.empty() && line.back() == '\n') line.pop_back();
    fn(line);
  }
  std::free(buf);
  std::fclose(f);
}

}  // namespace

std::string last_error_in(const fs::path& log) {
  std::string last, err, launcher_err;
  bool banner = false;
  for_each_line(log, [&](const std::string& line) {
    if (line.rfind("-----", 0) == 0) {
      banner = !banner;
      return;
    }
    if (banner || line.empty()) return;
    std::string low = line;
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
    bool complaint = false;
    for (const char* w : {"error", "unknown", "cannot", "invalid", "what()", "fail", "abort", "refus"})
      complaint = complaint || low.find(w) != std::string::npos;
    const bool launcher = line.rfind("edprun", 0) == 0;
    if (!launcher) last = line;
    if (complaint) (launcher ? launcher_err : err) = line;
  });
  const std::string s = !err.empty() ? err : !launcher_err.empty() ? launcher_err : last;
  return s.size() > 400 ? s.substr(0, 400) + "..." : s;
}

FinalMetrics metrics_in(const fs::path& log) {
  FinalMetrics m;
  for_each_line(log, [&](const std::string& line) {
    if (line.empty() || line[0] != '{') return;
    const auto parsed = json_fields::try_parse(line);
    if (!parsed || !parsed->is_object()) return;
    const json& j = *parsed;
    if (!j.contains("test_acc") && !j.contains("final_loss") && !j.contains("samples_per_s")) return;
    auto num = [&](const char* k) { return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : -1.0; };
    m = FinalMetrics{true, num("test_acc"), num("final_loss"), num("samples_per_s")};
  });
  return m;
}

}  // namespace edp::autoscale
