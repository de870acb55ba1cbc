#include "edp/elastic/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"

namespace edp::elastic {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void append_event(const MembershipEvent& e) {
  const std::string path = knobs::get_string("EDP_EVENTS_FILE");
  if (path.empty()) return;
  nlohmann::ordered_json j;
  j["event"] = e.event;
  if (e.event == "rescale") {
    j["mode"] = e.mode;
    j["from_workers"] = e.from_workers;
  }
  j["workers"] = e.workers;
  if (e.event == "rescale") j["from_global_batch"] = e.from_global_batch;
  j["global_batch"] = e.global_batch;
  j["step"] = e.step;
  if (e.event == "rescale") j["requested_t"] = e.requested_t;
  j["t"] = e.t;
  if (e.samples >= 0) j["samples"] = e.samples;
  if (e.event == "rescale") {
    j["pause_s"] = e.pause_s;
    if (e.visible_s >= 0) j["visible_s"] = e.visible_s;
    nlohmann::ordered_json ph = nlohmann::ordered_json::object();
    for (const auto& [k, v] : e.phases) ph[k] = v;
    j["phases"] = ph;
  }
  if (!e.threads.empty()) j["threads"] = e.threads;
  if (e.event == "rate") {
    j["steps"] = e.steps;
    j["samples_per_s"] = e.samples_per_s;
  }
  const std::string line = j.dump() + "\n";
  try {
    files::append(path, line);  // one write(2) with O_APPEND; never through a symbolic link
  } catch (const Error& e) {
    log::warn("cannot append to the events file: ", e.what());
  }
}

// A field of a record edp reads back: `def` when absent, its value when it is an integer within
// T's range; anything else (a string, a float such as 1e46, whose conversion by nlohmann would be
// undefined behaviour) makes the record unreadable, like a field of the wrong type.
template <typename T>
static T int_at(const nlohmann::json& j, const char* key, T def) {
  const auto it = j.find(key);
  if (it == j.end()) return def;
  if (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max()))
    return static_cast<T>(it->get<uint64_t>());
  if (it->is_number_integer() && !it->is_number_unsigned()) {
    const int64_t v = it->get<int64_t>();
    if (v >= static_cast<int64_t>(std::numeric_limits<T>::min()) && v <= static_cast<int64_t>(std::numeric_limits<T>::max()))
      return static_cast<T>(v);
  }
  throw std::invalid_argument(std::string("'") + key + "' is not an integer of its range");
}

std::vector<MembershipEvent> parse_events(const std::string& text) {
  std::vector<MembershipEvent> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const auto parsed = json_fields::try_parse(line);
    if (!parsed) continue;
    const nlohmann::json& j = *parsed;
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    MembershipEvent e;
    try {
      e.event = j["event"].get<std::string>();
      e.mode = j.value("mode", "");
      e.from_workers = int_at(j, "from_workers", 0);
      e.workers = int_at(j, "workers", 0);
      e.from_global_batch = int_at(j, "from_global_batch", int64_t{0});
      e.global_batch = int_at(j, "global_batch", int64_t{0});
      e.step = int_at(j, "step", int64_t{0});
      e.requested_t = j.value("requested_t", 0.0);
      e.t = j.value("t", 0.0);
      e.pause_s = j.value("pause_s", 0.0);
      e.visible_s = j.value("visible_s", -1.0);
      if (j.contains("phases") && j["phases"].is_object())
        for (const auto& [k, v] : j["phases"].items())
          if (v.is_number()) e.phases.emplace_back(k, v.get<double>());
      if (j.contains("threads") && j["threads"].is_array())
        for (const auto& v : j["threads"])
          if (v.is_number_integer()) e.threads.push_back(v.get<int>());
      e.steps = int_at(j, "steps", int64_t{0});
      e.samples_per_s = j.value("samples_per_s", 0.0);
      e.samples = int_at(j, "samples", int64_t{-1});
    } catch (const std::exception&) {  // nlohmann's type errors, int_at's
      continue;  // a field of the wrong type: not an event this reader understands
    }
    out.push_back(std::move(e));
  }
  return out;
}

// The text of a file a reader may miss (a job's events or status file): nullopt, with a warning
// naming `what`, when it cannot be read.
static std::optional<std::string> read_if_readable(const std::string& path, size_t limit, const char* what) {
  try {
    return files::read_file_if_exists(path, limit);
  } catch (const DataError& e) {
    log::warn("cannot read the ", what, ": ", e.what());
    return std::nullopt;
  }
}

std::vector<MembershipEvent> read_events(const std::string& path) {
  const std::optional<std::string> text = read_if_readable(path, files::kTableLimit, "events file");
  return text ? parse_events(*text) : std::vector<MembershipEvent>{};
}

// ---- status ----------------------------------------------------------------------------------

std::optional<JobStatus> read_status(const std::string& path) {
  const std::optional<std::string> text = read_if_readable(path, files::kRecordLimit, "status file");
  if (!text) return std::nullopt;
  const auto parsed = json_fields::try_parse(*text);
  if (!parsed || !parsed->is_object()) return std::nullopt;
  const nlohmann::json& j = *parsed;
  JobStatus s;
  try {
    s.name = j.value("name", "");
    s.state = j.value("state", "");
    s.t = j.value("t", 0.0);
    s.workers = int_at(j, "workers", 0);
    s.global_batch = int_at(j, "global_batch", int64_t{0});
    s.epoch = int_at(j, "epoch", int64_t{0});
    s.epochs = int_at(j, "epochs", int64_t{0});
    s.step = int_at(j, "step", int64_t{0});
    s.samples_done = int_at(j, "samples_done", int64_t{0});
    s.samples_total = int_at(j, "samples_total", int64_t{0});
    if (j.contains("configs") && j["configs"].is_array())
      for (const auto& c : j["configs"]) {
        ConfigMeasure m;
        m.workers = int_at(c, "workers", 0);
        m.global_batch = int_at(c, "global_batch", int64_t{0});
        m.steps = int_at(c, "steps", int64_t{0});
        m.step_s = c.value("step_s", 0.0);
        m.comm_s = c.value("comm_s", 0.0);
        m.recent_step_s = c.value("recent_step_s", 0.0);
        if (!(m.recent_step_s > 0) || !std::isfinite(m.recent_step_s)) m.recent_step_s = 0;
        if (m.workers >= 1 && m.global_batch >= 1 && m.steps >= 1 && m.step_s > 0 && std::isfinite(m.step_s))
          s.configs.push_back(m);
      }
  } catch (const std::exception&) {  // nlohmann's type errors, int_at's
    return std::nullopt;
  }
  return s;
}

void write_status(const std::string& path, const JobStatus& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["state"] = s.state;
  j["t"] = s.t;
  j["workers"] = s.workers;
  j["global_batch"] = s.global_batch;
  j["epoch"] = s.epoch;
  j["epochs"] = s.epochs;
  j["step"] = s.step;
  j["samples_done"] = s.samples_done;
  j["samples_total"] = s.samples_total;
  nlohmann::ordered_json cs = nlohmann::ordered_json::array();
  for (const ConfigMeasure& m : s.configs)
    cs.push_back({{"workers", m.workers}, {"global_batch", m.global_batch}, {"steps", m.steps}, {"step_s", m.step_s},
                  {"recent_step_s", m.recent_step_s}, {"comm_s", m.comm_s}});
  j["configs"] = cs;
  const std::string text = j.dump() + "\n";
  std::string why;
  if (!files::try_write_atomic(path, text, &why)) log::warn("cannot write the status file ", path, ": ", why);
}

StatusReporter::StatusReporter() : path_(knobs::get_string("EDP_STATUS_FILE")) {}

void StatusReporter::step(const std::string& name, int workers, int64_t global_batch, int64_t epoch, int64_t epochs,
                          int64_t step, int64_t samples_done, int64_t samples_total, double comm_total_s) {
  if (!active()) return;
  const double now = wall_time();
  if (workers != status_.workers || global_batch != status_.global_batch) {
    last_t_ = 0;
    skip_ = 2;
  }
  status_.name = name;
  status_.state = "running";
  status_.workers = workers;
  status_.global_batch = global_batch;
  status_.epoch = epoch;
  status_.epochs = epochs;
  status_.step = step;
  status_.samples_done = samples_done;
  status_.samples_total = samples_total;
  const double comm = comm_total_s - last_comm_;
  last_comm_ = comm_total_s;
  if (skip_ > 0 || last_t_ == 0) {
    if (skip_ > 0) --skip_;
  } else {
    auto it = std::find_if(windows_.begin(), windows_.end(), [&](const Window& w) {
      return w.m.workers == workers && w.m.global_batch == global_batch;
    });
    if (it == windows_.end()) {
      windows_.push_back({});
      it = windows_.end() - 1;
      it->m.workers = workers;
      it->m.global_batch = global_batch;
    }
    const double dt = now - last_t_;
    if (it->times.size() < 256) {
      it->times.push_back(dt);
    } else {
      it->times[it->next] = dt;
      it->next = (it->next + 1) % 256;
    }
    ++it->m.steps;
    it->comm_sum += std::max(0.0, comm);
  }
  last_t_ = now;
  if (now - last_write_ >= 1.0) write(now);
}

void StatusReporter::finish(const std::string& state) {
  if (!active()) return;
  status_.state = state;
  write(wall_time());
}

void StatusReporter::write(double now) {
  last_write_ = now;
  status_.t = now;
  status_.configs.clear();
  for (const Window& w : windows_) {
    if (w.times.empty()) continue;
    ConfigMeasure m = w.m;
    auto median = [](std::vector<double> t) {
      std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
      return t[t.size() / 2];
    };
    m.step_s = median(w.times);
    // The ring's newest kRecentSteps: the slots before `next` (the oldest is at `next` once full).
    std::vector<double> recent;
    const size_t n = w.times.size(), k = std::min<size_t>(n, kRecentSteps);
    const size_t newest = n < 256 ? n : w.next + 256;  // one past the newest, unwrapped
    for (size_t i = newest - k; i < newest; ++i) recent.push_back(w.times[i % n]);
    m.recent_step_s = median(std::move(recent));
    m.comm_s = w.comm_sum / static_cast<double>(w.m.steps);
    status_.configs.push_back(m);
  }
  write_status(path_, status_);
}

}  // namespace edp::elastic
