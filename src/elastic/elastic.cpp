// The elastic control file and its polling (elastic.h).
#include "edp/elastic/elastic.h"
#include "edp/elastic/allowed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_fields.h"
#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/elastic/events.h"

namespace edp::elastic {

namespace {

// The control file's bytes: a regular file only (a FIFO or a device given as the control file
// would block rank 0, and so the whole job, until the communication timeout), at most a record's
// size (files::kRecordLimit).
std::string read_control_text(const std::string& path) {
  try {
    return files::read_file(path, files::kRecordLimit);
  } catch (const DataError& e) {
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
    throw DataError("control file " + path + ": " + why +
                    (why.find("not a regular file") != std::string::npos
                         ? "; a controller writes the request to a regular file (a temporary file renamed over it)"
                         : ""));
  }
}

}  // namespace

RescaleRequest parse_control(const std::string& text, const std::string& path) {
  const nlohmann::json j = json_fields::parse(text, "control file " + path);
  if (!j.is_object()) throw DataError("control file " + path + ": expected a JSON object {\"workers\": N, ...}");
  RescaleRequest r;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "workers" && k != "global_batch" && k != "stop")
      throw DataError("control file " + path + ": unknown field '" + k + "' (known: workers, global_batch, stop)");
    if (k == "stop" ? !it->is_boolean() : !it->is_number_integer())
      throw DataError("control file " + path + ": '" + k + "' must be " + (k == "stop" ? "true or false" : "an integer") +
                      ", got " + json_fields::shown(*it));
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

RescaleRequest read_control_file(const std::string& path) { return parse_control(read_control_text(path), path); }

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
  auto rule = [](const std::string& r) { return r.empty() ? r : ": " + r; };
  if (limits.max_global_batch > 0 && want.global_batch > limits.max_global_batch)
    return "a global batch of " + std::to_string(want.global_batch) + " is larger than the job accepts (" +
           std::to_string(limits.max_global_batch) + rule(limits.max_global_batch_rule) + ")";
  if (want.global_batch < limits.min_global_batch)
    return "a global batch of " + std::to_string(want.global_batch) + " is smaller than the job accepts (" +
           std::to_string(limits.min_global_batch) + rule(limits.min_global_batch_rule) + ")";
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
      // A change shows in the file's inode (a writer that renames a new file over it), size or
      // modification time; but two writes of the same size within one tick of the file system's
      // coarse clock (4 ms and more) look alike. So a file modified in the last two seconds is
      // also read again and compared by content.
      const bool changed = st.st_mtim.tv_sec != seen_mtime_.tv_sec || st.st_mtim.tv_nsec != seen_mtime_.tv_nsec ||
                           static_cast<int64_t>(st.st_size) != seen_size_ || st.st_ino != seen_ino_;
      const bool recent = wall_time() - static_cast<double>(st.st_mtim.tv_sec) < 2.0;
      if (changed || recent) {
        seen_mtime_ = st.st_mtim;
        seen_size_ = static_cast<int64_t>(st.st_size);
        seen_ino_ = st.st_ino;
        std::string text, error;
        try {
          text = read_control_text(path_);
        } catch (const DataError& e) {
          error = e.what();
        }
        if (changed || text != seen_text_ || error != seen_error_) {  // a new version of the file
          seen_text_ = text;
          seen_error_ = error;
          take(error.empty() ? text : std::string(), error);
        }
      }
    }
    if (last_ && wait_ > 0) {
      --wait_;
    } else if (last_) {
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

void ElasticControl::take(const std::string& text, const std::string& error) {
  failures_ = 0;
  wait_ = 0;
  last_.reset();
  if (!error.empty()) {
    log::warn("ignoring the control file: ", error);
    return;
  }
  try {
    RescaleRequest r = parse_control(text, path_);
    // Without a global batch the per-worker batch stays: B' = B / W * W'.
    if (!r.stop && r.global_batch == 0) r.global_batch = current_.global_batch / current_.workers * r.workers;
    if (const std::string why = r.stop ? "" : refusal_reason(r, limits_); !why.empty() && !(r == current_)) {
      log::warn("refusing the rescale request in ", path_, " (", r.workers, " worker(s), global batch ",
                r.global_batch, "): ", why, "; the job continues at ", current_.workers, " worker(s), global batch ",
                current_.global_batch);
      return;
    }
    last_ = r;
  } catch (const DataError& e) {
    log::warn("ignoring the control file: ", e.what());
  }
}

void ElasticControl::failed(const std::string& why) {
  if (!last_) return;
  if (++failures_ < kMaxAttempts) {
    wait_ = int64_t{1} << failures_;  // 2, then 4 looks at the file
    log::warn("could not carry out the request in ", path_, ": ", why, "; trying again in ", wait_,
              " looks at the file");
    return;
  }
  log::warn("giving up on the request in ", path_, " after ", failures_, " failed attempts (the last: ", why,
            "); the job continues at ", current_.workers, " worker(s), global batch ", current_.global_batch,
            "; write the file again to retry");
  last_.reset();
}

std::string record_rescale(const RescaleRequest& next, int64_t step, const std::string& checkpoint_path) {
  const std::string path = knobs::get_string("EDP_RESCALE_FILE");
  if (path.empty()) return "";
  const nlohmann::json j = {{"workers", next.workers},
                            {"global_batch", next.global_batch},
                            {"step", step},
                            {"checkpoint", checkpoint_path}};
  try {
    files::write_atomic(path, j.dump() + "\n");
  } catch (const Error& e) {
    throw Error(std::string("the rescale record: ") + e.what());
  }
  return path;
}

}  // namespace edp::elastic
