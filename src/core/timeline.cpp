// Chrome-trace timeline writer.
#include "edp/core/timeline.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/files.h"
#include "edp/core/log.h"

namespace edp {

namespace {
int thread_number() {
  static std::atomic<int> next{0};
  thread_local int id = next++;
  return id;
}
// An object on one line as `{"key": value, ...}`; keys and values are written (escaped) by
// nlohmann-json.
std::string line(const nlohmann::ordered_json& v) {
  if (!v.is_object()) return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string s = "{";
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != v.begin()) s += ", ";
    s += nlohmann::ordered_json(it.key()).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    s += ": " + line(it.value());
  }
  return s + "}";
}
}  // namespace

Timeline& Timeline::get() {
  static Timeline t;
  return t;
}

Timeline::~Timeline() { close(); }

std::string Timeline::rank_path(const std::string& path, int rank, int world) {
  if (world <= 1) return path;
  const std::string tag = ".rank" + std::to_string(rank);
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return path.substr(0, path.size() - 5) + tag + ".json";
  return path + tag;
}

void Timeline::open_from_env(int rank, int world) {
  if (const std::string p = knobs::get_string("EDP_TIMELINE"); !p.empty()) open(rank_path(p, rank, world), rank);
}

void Timeline::open(const std::string& path, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  pid_ = rank;
  t0_ = std::chrono::steady_clock::now();
  events_.clear();
  enabled_ = true;
}

int64_t Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_)
      .count();
}

void Timeline::complete(const std::string& name, const std::string& cat, int64_t b, int64_t e,
                        const std::string& args) {
  if (!enabled_) return;
  const int tid = thread_number();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, cat, args, b, e - b, tid});
}

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  enabled_ = false;
  std::ostringstream f;
  // One event per line (diff- and grep-friendly), in the layout `"key": value`.
  using json = nlohmann::ordered_json;
  f << "{\"traceEvents\": [\n"
    << line(json{{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", pid_},
                 {"args", json::object({{"name", "rank " + std::to_string(pid_)}})}});
  for (const Event& ev : events_) {
    json e = {{"name", ev.name}, {"cat", ev.cat}, {"ph", "X"}, {"ts", ev.ts}, {"dur", ev.dur}, {"pid", pid_},
              {"tid", ev.tid}};
    if (!ev.args.empty()) e["args"] = json::parse(ev.args, nullptr, /*allow_exceptions=*/false);
    f << ",\n" << line(e);
  }
  f << "\n]}\n";
  std::string why;
  if (!files::try_write_atomic(path_, f.str(), &why)) {
    log::error("cannot write timeline ", path_, ": ", why);
    return;
  }
  log::info("timeline written to ", path_, " (", events_.size(), " events)");
  events_.clear();
}

}  // namespace edp
