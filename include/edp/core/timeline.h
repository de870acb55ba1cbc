// A per-process Chrome-trace timeline (chrome://tracing, Perfetto): complete events ("X") with
// begin/duration per thread. Enabled by EDP_TIMELINE=path (or Timeline::open); when several
// ranks write, each gets path with ".rank<R>" inserted before a ".json" suffix (or appended).
// Disabled, every call is one branch.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace edp {

class Timeline {
 public:
  static Timeline& get();
  // Reads EDP_TIMELINE once; rank/world decide the per-rank file name.
  void open_from_env(int rank, int world);
  void open(const std::string& path, int rank);
  bool enabled() const { return enabled_; }
  // Microseconds since the timeline was opened.
  int64_t now_us() const;
  // A complete event on the calling thread (tid is a small per-thread number).
  void complete(const std::string& name, const std::string& cat, int64_t begin_us, int64_t end_us,
                const std::string& args_json = "");
  void close();  // writes the file; also called at exit
  static std::string rank_path(const std::string& path, int rank, int world);

 private:
  Timeline() = default;
  ~Timeline();
  struct Event {
    std::string name, cat, args;
    int64_t ts, dur;
    int tid;
  };
  bool enabled_ = false;
  int pid_ = 0;
  std::string path_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::vector<Event> events_;
};

// Records [construction, destruction) as one event when the timeline is enabled.
class TimelineScope {
 public:
  TimelineScope(const char* name, const char* cat)
      : name_(name), cat_(cat), begin_(Timeline::get().enabled() ? Timeline::get().now_us() : 0) {}
  ~TimelineScope() {
    if (Timeline::get().enabled())
      Timeline::get().complete(name_, cat_, begin_, Timeline::get().now_us());
  }

 private:
  const char* name_;
  const char* cat_;
  int64_t begin_;
};

}  // namespace edp
