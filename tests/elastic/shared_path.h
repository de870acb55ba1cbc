// A path every rank of a test agrees on: a name under the temporary directory made unique by rank
// 0's pid (broadcast). Collective.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "edp/comm/communicator.h"

inline std::string shared_path(edp::comm::Communicator& world, const std::string& name) {
  int64_t pid = ::getpid();
  world.broadcast(&pid, 1, edp::DType::I64, 0);
  return (std::filesystem::temp_directory_path() / ("edp_elastic_" + std::to_string(pid) + "_" + name)).string();
}
