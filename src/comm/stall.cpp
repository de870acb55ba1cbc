// The table of collectives in flight and the stall inspector's labels (stall.h, comm/stall.h).
#include "stall.h"

#include <atomic>
#include <cstdio>
#include <algorithm>
#include <map>
#include <vector>
#include <mutex>

#include "edp/comm/stall.h"
#include "edp/core/knobs.h"

namespace edp::comm {

namespace {
thread_local std::string t_label;
std::atomic<int64_t> g_step{-1};
std::atomic<bool> g_timeout_set{false};
std::atomic<double> g_timeout{0};
}  // namespace

StallLabel::StallLabel(std::string label) : previous_(std::move(t_label)) { t_label = std::move(label); }
StallLabel::~StallLabel() { t_label = std::move(previous_); }
const std::string& stall_label() { return t_label; }

void set_stall_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
int64_t stall_step() { return g_step.load(std::memory_order_relaxed); }

double comm_timeout() {
  if (g_timeout_set.load()) return g_timeout.load();
  static const double from_env = knobs::get_double("EDP_COMM_TIMEOUT");
  return from_env;
}
void set_comm_timeout(double seconds) {
  g_timeout.store(seconds);
  g_timeout_set.store(true);
}

}  // namespace edp::comm

namespace edp::comm::detail {

namespace {
struct DeviceOp {
  const void* owner;
  std::function<bool()> poll;
  std::function<void()> abort;
};

struct Table {
  std::mutex mu;
  uint64_t next = 1;
  std::map<uint64_t, InFlight> ops;  // ids grow with time: begin() is the oldest
  std::map<uint64_t, DeviceOp> device;  // the subset of ops that complete on a device
  Clock::time_point last_done{};
};
Table& table() {
  static Table* t = new Table;  // never destroyed: the watchdog may read it during exit
  return *t;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}
}  // namespace

std::string InFlight::describe() const {
  std::string s = op;
  if (count > 0) s += std::string(" of ") + std::to_string(count) + " " + dtype_name(dtype);
  std::string ctx = label;
  if (step >= 0) ctx += (ctx.empty() ? "" : ", ") + std::string("step ") + std::to_string(step);
  if (!ctx.empty()) s += " (" + ctx + ")";
  return s + " on " + backend;
}

OpTicket::OpTicket(const char* op, const char* backend, int64_t count, DType dtype) {
  InFlight f{op, backend, count, dtype, stall_label(), stall_step(), Clock::now()};
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  id_ = t.next++;
  t.ops.emplace(id_, std::move(f));
}

OpTicket& OpTicket::operator=(OpTicket&& o) noexcept {
  if (this != &o) {
    done();
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void OpTicket::done() {
  if (id_ == 0) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.ops.erase(id_);
  t.last_done = Clock::now();
  id_ = 0;
}

void watch_device_op(const void* owner, const char* op, const char* backend, int64_t count, DType dtype,
                     std::function<bool()> poll, std::function<void()> abort) {
  InFlight f{op, backend, count, dtype, stall_label(), stall_step(), Clock::now()};
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const uint64_t id = t.next++;
  t.ops.emplace(id, std::move(f));
  t.device.emplace(id, DeviceOp{owner, std::move(poll), std::move(abort)});
}

void forget_device_ops(const void* owner) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.device.begin(); it != t.device.end();) {
    if (it->second.owner == owner) {
      t.ops.erase(it->first);
      it = t.device.erase(it);
    } else {
      ++it;
    }
  }
}

void poll_device_ops() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto it = t.device.begin(); it != t.device.end();) {
    if (it->second.poll()) {
      t.ops.erase(it->first);
      t.last_done = Clock::now();
      it = t.device.erase(it);
    } else {
      ++it;
    }
  }
}

void abort_device_ops() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<const void*> done;
  for (auto& [id, d] : t.device) {
    if (std::find(done.begin(), done.end(), d.owner) != done.end()) continue;
    done.push_back(d.owner);
    if (d.abort) d.abort();
  }
}

std::optional<InFlight> oldest_in_flight() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.ops.empty()) return std::nullopt;
  return t.ops.begin()->second;
}

Clock::time_point last_completion() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.last_done;
}

std::string position_now() {
  const auto now = Clock::now();
  if (const auto op = oldest_in_flight())
    return "in " + op->describe() + " for " + seconds(std::chrono::duration<double>(now - op->since).count());
  std::string s = "not in a collective";
  if (const int64_t step = stall_step(); step >= 0) s += " (step " + std::to_string(step) + ")";
  const auto last = last_completion();
  if (last != Clock::time_point{})
    s += "; its last one finished " + seconds(std::chrono::duration<double>(now - last).count()) + " ago";
  return s;
}

}  // namespace edp::comm::detail
