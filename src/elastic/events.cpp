#include "edp/elastic/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

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
  if (e.event == "rescale") {
    j["pause_s"] = e.pause_s;
    nlohmann::ordered_json ph = nlohmann::ordered_json::object();
    for (const auto& [k, v] : e.phases) ph[k] = v;
    j["phases"] = ph;
  }
  const std::string line = j.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    log::warn("cannot append to the events file ", path, ": ", std::strerror(errno));
    return;
  }
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    log::warn("cannot append to the events file ", path, ": ", std::strerror(errno));
  ::close(fd);
}

std::vector<MembershipEvent> read_events(const std::string& path) {
  std::vector<MembershipEvent> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    MembershipEvent e;
    try {
      e.event = j["event"].get<std::string>();
      e.mode = j.value("mode", "");
      e.from_workers = j.value("from_workers", 0);
      e.workers = j.value("workers", 0);
      e.from_global_batch = j.value("from_global_batch", int64_t{0});
      e.global_batch = j.value("global_batch", int64_t{0});
      e.step = j.value("step", int64_t{0});
      e.requested_t = j.value("requested_t", 0.0);
      e.t = j.value("t", 0.0);
      e.pause_s = j.value("pause_s", 0.0);
      if (j.contains("phases") && j["phases"].is_object())
        for (const auto& [k, v] : j["phases"].items())
          if (v.is_number()) e.phases.emplace_back(k, v.get<double>());
    } catch (const nlohmann::json::exception&) {
      continue;  // a field of the wrong type: not an event this reader understands
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace edp::elastic
