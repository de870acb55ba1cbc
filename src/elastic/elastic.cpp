// The elastic control file and its polling (elastic.h).
#include "edp/elastic/elastic.h"
#include "edp/elastic/allowed.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"

namespace edp::elastic {

RescaleRequest read_control_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw DataError("control file " + path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError("control file " + path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw DataError("control file " + path + ": expected a JSON object {\"workers\": N, ...}");
  RescaleRequest r;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "workers" && k != "global_batch" && k != "stop")
      throw DataError("control file " + path + ": unknown field '" + k + "' (known: workers, global_batch, stop)");
    if (k == "stop" ? !it->is_boolean() : !it->is_number_integer())
      throw DataError("control file " + path + ": '" + k + "' must be " + (k == "stop" ? "true or false" : "an integer") +
                      ", got " + it->dump());
  }
  r.stop = j.value("stop", false);
  if (!j.contains("workers")) {
    if (r.stop) return r;
    throw DataError("control file " + path + ": 'workers' is missing");
  }
  const int64_t w = j["workers"].get<int64_t>();
  if (w < 1 || w > 1 << 20) throw DataError("control file " + path + ": 'workers' must be >= 1, got " + std::to_string(w));
  r.workers = static_cast<int>(w);
  if (j.contains("global_batch")) {
    r.global_batch = j["global_batch"].get<int64_t>();
    if (r.global_batch < 1)
      throw DataError("control file " + path + ": 'global_batch' must be >= 1, got " + std::to_string(r.global_batch));
    if (r.global_batch % r.workers != 0)
      throw DataError("control file " + path + ": 'global_batch' " + std::to_string(r.global_batch) +
                      " is not divisible by 'workers' " + std::to_string(r.workers));
  }
  return r;
}

ControlLimits ControlLimits::from_env() {
  ControlLimits l;
  const std::string text = knobs::get_string("EDP_ALLOWED_WORKERS");
  if (!text.empty()) {
    try {
      l.allowed_workers = parse_allowed_workers(text);
    } catch (const Error& e) {
      throw Error(std::string("EDP_ALLOWED_WORKERS: ") + e.what());
    }
  }
  return l;
}

std::string refusal_reason(const RescaleRequest& want, const ControlLimits& limits) {
  const auto& a = limits.allowed_workers;
  if (!workers_allowed(a, want.workers))
    return "the launcher cannot run " + std::to_string(want.workers) + " worker(s) (it can run " +
           format_allowed_workers(a) + ")";
  if (want.global_batch < want.workers || want.global_batch % want.workers != 0)
    return "a global batch of " + std::to_string(want.global_batch) + " does not split evenly over " +
           std::to_string(want.workers) + " worker(s)";
  if (limits.max_global_batch > 0 && want.global_batch > limits.max_global_batch)
    return "a global batch of " + std::to_string(want.global_batch) + " is larger than the job accepts (" +
           std::to_string(limits.max_global_batch) + ")";
  if (limits.max_worker_batch > 0 && want.global_batch / want.workers > limits.max_worker_batch)
    return "a per-worker batch of " + std::to_string(want.global_batch / want.workers) +
           " is larger than the job accepts (" + std::to_string(limits.max_worker_batch) + ")";
  return "";
}

ElasticControl::ElasticControl(std::string path, int workers, int64_t global_batch, ControlLimits limits)
    : path_(std::move(path)), current_{workers, global_batch}, limits_(std::move(limits)) {}

std::optional<RescaleRequest> ElasticControl::poll(comm::Communicator& world) {
  int64_t msg[3] = {0, 0, 0};  // 1: wants a rescale, 2: to stop; workers, global batch
  if (world.rank() == 0) {
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0) {
      const bool changed = st.st_mtim.tv_sec != seen_mtime_.tv_sec || st.st_mtim.tv_nsec != seen_mtime_.tv_nsec ||
                           static_cast<int64_t>(st.st_size) != seen_size_;
      if (changed) {
        seen_mtime_ = st.st_mtim;
        seen_size_ = static_cast<int64_t>(st.st_size);
        try {
          last_ = read_control_file(path_);
          // Without a global batch the per-worker batch stays: B' = B / W * W'.
          if (!last_->stop && last_->global_batch == 0)
            last_->global_batch = current_.global_batch / current_.workers * last_->workers;
          if (const std::string why = last_->stop ? "" : refusal_reason(*last_, limits_);
              !why.empty() && !(*last_ == current_)) {
            log::warn("refusing the rescale request in ", path_, " (", last_->workers, " worker(s), global batch ",
                      last_->global_batch, "): ", why, "; the job continues at ", current_.workers,
                      " worker(s), global batch ", current_.global_batch);
            last_.reset();
          }
        } catch (const DataError& e) {
          log::warn("ignoring the control file: ", e.what());
          last_.reset();
        }
      }
    }
    if (last_) {
      const RescaleRequest want = *last_;
      if (!(want == current_)) {
        msg[0] = want.stop ? 2 : 1;
        msg[1] = want.workers;
        msg[2] = want.global_batch;
      }
    }
  }
  world.broadcast(msg, 3, DType::I64, 0);
  if (msg[0] == 0) return std::nullopt;
  if (msg[0] == 2) return RescaleRequest{0, 0, true};
  return RescaleRequest{static_cast<int>(msg[1]), msg[2]};
}

std::string record_rescale(const RescaleRequest& next, int64_t step, const std::string& checkpoint_path) {
  const std::string path = knobs::get_string("EDP_RESCALE_FILE");
  if (path.empty()) return "";
  const nlohmann::json j = {{"workers", next.workers},
                            {"global_batch", next.global_batch},
                            {"step", step},
                            {"checkpoint", checkpoint_path}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump() << "\n";
    f.flush();
    if (!f) throw Error("cannot write the rescale record " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  return path;
}

}  // namespace edp::elastic
