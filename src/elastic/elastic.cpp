// The elastic control file and its polling (elastic.h).
#include "edp/elastic/elastic.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edp/comm/communicator.h"
#include "edp/core/error.h"
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
    if (k != "workers" && k != "global_batch")
      throw DataError("control file " + path + ": unknown field '" + k + "' (known: workers, global_batch)");
    if (!it->is_number_integer())
      throw DataError("control file " + path + ": '" + k + "' must be an integer, got " + it->dump());
  }
  if (!j.contains("workers")) throw DataError("control file " + path + ": 'workers' is missing");
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

ElasticControl::ElasticControl(std::string path, int workers, int64_t global_batch)
    : path_(std::move(path)), current_{workers, global_batch} {}

std::optional<RescaleRequest> ElasticControl::poll(comm::Communicator& world) {
  int64_t msg[3] = {0, 0, 0};  // wants a rescale, workers, global batch
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
        } catch (const DataError& e) {
          log::warn("ignoring the control file: ", e.what());
          last_.reset();
        }
      }
    }
    if (last_) {
      RescaleRequest want = *last_;
      // Without a global batch the per-worker batch stays: B' = B / W * W'.
      if (want.global_batch == 0) want.global_batch = current_.global_batch / current_.workers * want.workers;
      if (!(want == current_)) {
        msg[0] = 1;
        msg[1] = want.workers;
        msg[2] = want.global_batch;
      }
    }
  }
  world.broadcast(msg, 3, DType::I64, 0);
  if (msg[0] == 0) return std::nullopt;
  return RescaleRequest{static_cast<int>(msg[1]), msg[2]};
}

}  // namespace edp::elastic
