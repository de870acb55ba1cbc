// Diagnostics on stderr with levels and the rank: every line reads
//   edp[r1/4] warn: <message>        (edp[r0] in a single-process run: "edp:")
// The least severe level written comes from EDP_LOG_LEVEL (trace, debug, info, warn, error,
// off; default info; docs/knobs.md). The rank comes from EDP_RANK/EDP_WORLD_SIZE (edprun) or
// Open MPI's OMPI_COMM_WORLD_*; set_rank overrides both. The implementation (spdlog) is private
// to src/core/log.cpp. Results a program prints for its user (stdout) do not go through here.
#pragma once
#include <string>

#include "edp/core/error.h"

namespace edp::log {

enum class Level { Trace, Debug, Info, Warn, Error, Off };

// Whether a message of this level is written.
bool enabled(Level level);
// Writes one line (the message may not end with a newline; one is added).
void write(Level level, const std::string& message);
// Overrides the rank in the prefix (e.g. after a rescale); size <= 1 prints no rank.
void set_rank(int rank, int size);
// Overrides EDP_LOG_LEVEL.
void set_level(Level level);
// "edp[r1/4]" or "edp": the prefix of this process's lines.
std::string prefix();

template <typename... A>
void trace(A&&... a) {
  if (enabled(Level::Trace)) write(Level::Trace, detail::concat(std::forward<A>(a)...));
}
template <typename... A>
void debug(A&&... a) {
  if (enabled(Level::Debug)) write(Level::Debug, detail::concat(std::forward<A>(a)...));
}
template <typename... A>
void info(A&&... a) {
  if (enabled(Level::Info)) write(Level::Info, detail::concat(std::forward<A>(a)...));
}
template <typename... A>
void warn(A&&... a) {
  if (enabled(Level::Warn)) write(Level::Warn, detail::concat(std::forward<A>(a)...));
}
template <typename... A>
void error(A&&... a) {
  if (enabled(Level::Error)) write(Level::Error, detail::concat(std::forward<A>(a)...));
}

}  // namespace edp::log
