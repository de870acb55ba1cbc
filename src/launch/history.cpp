// The job's history as edprun sees it (history.h).
#include "launch/history.h"

#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "edp/core/error.h"

namespace edp::launch {

using ::edp::detail::concat;

JobHistory::JobHistory(int start_workers, std::string events_path)
    : path_(std::move(events_path)), workers_(start_workers) {}

void JobHistory::skip_existing() {
  if (path_.empty()) return;
  struct stat st{};
  if (stat(path_.c_str(), &st) != 0) return;
  size_seen_ = static_cast<long long>(st.st_size);
  events_seen_ = elastic::read_events(path_).size();
}

bool JobHistory::poll() {
  if (path_.empty()) return false;
  struct stat st{};
  if (stat(path_.c_str(), &st) != 0 || static_cast<long long>(st.st_size) == size_seen_) return false;
  size_seen_ = static_cast<long long>(st.st_size);
  // The file is small (a line per start and per rescale) and only appended to: reading it whole is
  // simpler than keeping an offset, and read_events skips a torn last line, which is read again
  // complete at the next poll because the size changed again.
  const std::vector<elastic::MembershipEvent> all = elastic::read_events(path_);
  if (all.size() <= events_seen_) return false;
  observe(std::vector<elastic::MembershipEvent>(all.begin() + static_cast<std::ptrdiff_t>(events_seen_), all.end()));
  events_seen_ = all.size();
  return true;
}

void JobHistory::observe(const std::vector<elastic::MembershipEvent>& events) {
  for (const auto& e : events) {
    if (e.event != "start" && e.event != "rescale") continue;
    if (e.workers > 0) workers_ = e.workers;
    if (e.global_batch > 0) global_batch_ = e.global_batch;
    if (e.event == "start") {
      // The processes run again after a restart edprun made for a failure.
      if (!entries_.empty() && entries_.back().kind == HistoryEntry::Restart && !entries_.back().has_pause &&
          e.t >= entries_.back().t) {
        entries_.back().has_pause = true;
        entries_.back().pause_s = e.t - entries_.back().t;
      }
      continue;
    }
    // A rescale by restart that edprun made: the event completes that entry.
    if (e.mode == "restart") {
      bool matched = false;
      for (auto& h : entries_)
        if (h.kind == HistoryEntry::Rescale && h.mode == "restart" && !h.has_pause && h.workers == e.workers) {
          if (e.from_global_batch > 0) h.from_global_batch = e.from_global_batch;
          if (e.global_batch > 0) h.global_batch = e.global_batch;
          h.step = e.step;
          h.t = e.t;
          h.has_pause = true;
          h.pause_s = e.pause_s;
          matched = true;
          break;
        }
      if (matched) continue;
    }
    HistoryEntry h;
    h.kind = HistoryEntry::Rescale;
    h.mode = e.mode.empty() ? "in_place" : e.mode;
    h.from_workers = e.from_workers;
    h.workers = e.workers;
    h.from_global_batch = e.from_global_batch;
    h.global_batch = e.global_batch;
    h.step = e.step;
    h.t = e.t;
    h.has_pause = true;
    h.pause_s = e.pause_s;
    entries_.push_back(h);
  }
}

void JobHistory::restart_rescale(int from_workers, int workers, int64_t global_batch, int64_t step, double t) {
  HistoryEntry h;
  h.kind = HistoryEntry::Rescale;
  h.mode = "restart";
  h.from_workers = from_workers;
  h.workers = workers;
  h.from_global_batch = from_workers == workers_ ? global_batch_ : 0;
  h.global_batch = global_batch;
  h.step = step;
  h.t = t;
  entries_.push_back(h);
  workers_ = workers;
  global_batch_ = global_batch;
}

void JobHistory::restart_failure(int exit_code, bool stall, int workers, double t) {
  HistoryEntry h;
  h.kind = HistoryEntry::Restart;
  h.mode = stall ? "stall" : "crash";
  h.from_workers = h.workers = workers;
  h.from_global_batch = h.global_batch = global_batch_;
  h.exit_code = exit_code;
  h.t = t;
  entries_.push_back(h);
  workers_ = workers;
}

int JobHistory::rescales() const {
  int n = 0;
  for (const auto& h : entries_) n += h.kind == HistoryEntry::Rescale;
  return n;
}

int JobHistory::restarts() const {
  int n = 0;
  for (const auto& h : entries_) n += h.kind == HistoryEntry::Restart;
  return n;
}

namespace {
std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}
}  // namespace

std::string JobHistory::summary(int exit_code) const {
  if (entries_.empty()) return "";
  int in_place = 0, by_restart = 0, stalls = 0, rescale_n = 0, restart_n = 0, rescale_paused = 0, restart_paused = 0;
  double rescale_pause = 0, restart_pause = 0;
  std::ostringstream items;
  for (const auto& h : entries_) {
    if (h.kind == HistoryEntry::Rescale) {
      const bool ip = h.mode == "in_place";
      (ip ? in_place : by_restart)++;
      items << "edprun:   rescale " << ++rescale_n << (ip ? " in place:   " : " by restart: ") << h.from_workers
            << " -> " << h.workers << " worker(s), global batch ";
      if (h.from_global_batch > 0 && h.from_global_batch != h.global_batch) items << h.from_global_batch << " -> ";
      items << (h.global_batch > 0 ? std::to_string(h.global_batch) : "?");
      if (h.step >= 0) items << ", step " << h.step;
      if (h.has_pause) {
        items << ", pause " << seconds(h.pause_s);
        rescale_pause += h.pause_s;
        ++rescale_paused;
      } else {
        items << ", pause unknown (the restarted job wrote no rescale event)";
      }
    } else {
      const bool stall = h.mode == "stall";
      stalls += stall;
      items << "edprun:   restart " << ++restart_n << (stall ? " (a stall, exit " : " (a crash, exit ") << h.exit_code
            << "): at " << h.workers << " worker(s)";
      if (h.global_batch > 0) items << ", global batch " << h.global_batch;
      if (h.has_pause) {
        items << ", running again after " << seconds(h.pause_s);
        restart_pause += h.pause_s;
        ++restart_paused;
      }
    }
    items << "\n";
  }
  std::ostringstream os;
  os << "edprun: the job ended with exit code " << exit_code << " after " << rescale_n << " rescale(s)";
  if (rescale_n > 0) {
    os << " (" << in_place << " in place, " << by_restart << " by restart";
    if (rescale_paused > 0) os << "; paused " << seconds(rescale_pause) << " in all";
    os << ")";
  }
  os << " and " << restart_n << " restart(s) (" << stalls << " after a stall";
  if (restart_paused > 0) os << "; down " << seconds(restart_pause) << " in all";
  os << ")";
  if (workers_ > 0) {
    os << "; last size " << workers_ << " worker(s)";
    if (global_batch_ > 0) os << ", global batch " << global_batch_;
  }
  os << ":\n" << items.str();
  return os.str();
}

}  // namespace edp::launch
