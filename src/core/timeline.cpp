// Chrome-trace timeline writer.
#include "edp/core/timeline.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "edp/core/error.h"

namespace edp {

namespace {
int thread_number() {
  static std::atomic<int> next{0};
  thread_local int id = next++;
  return id;
}
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
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
  if (const char* p = std::getenv("EDP_TIMELINE"); p && *p) open(rank_path(p, rank, world), rank);
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
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "edp: cannot write timeline %s\n", path_.c_str());
    return;
  }
  std::fprintf(f, "{\"traceEvents\": [\n");
  std::fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
               pid_, pid_);
  for (const Event& ev : events_) {
    std::fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %lld, \"dur\": %lld, "
                 "\"pid\": %d, \"tid\": %d%s%s%s}",
                 escape(ev.name).c_str(), escape(ev.cat).c_str(), static_cast<long long>(ev.ts),
                 static_cast<long long>(ev.dur), pid_, ev.tid, ev.args.empty() ? "" : ", \"args\": ",
                 ev.args.c_str(), "");
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  std::fprintf(stderr, "edp: timeline written to %s (%zu events)\n", path_.c_str(), events_.size());
  events_.clear();
}

}  // namespace edp
