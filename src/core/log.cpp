// Logging (include/edp/core/log.h) on spdlog: one stderr logger, the pattern carries the rank.
#include "edp/core/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>

#include "edp/core/knobs.h"

namespace edp::log {

namespace {

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::Trace: return spdlog::level::trace;
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warn: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
    case Level::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

Level parse_level(const std::string& s) {
  if (s == "trace") return Level::Trace;
  if (s == "debug") return Level::Debug;
  if (s == "warn") return Level::Warn;
  if (s == "error") return Level::Error;
  if (s == "off") return Level::Off;
  return Level::Info;
}

std::string make_prefix(int rank, int size) {
  if (size <= 1 || rank < 0) return "edp";
  return "edp[r" + std::to_string(rank) + "/" + std::to_string(size) + "]";
}

std::string prefix_from_env() {
  try {
    const knobs::OmpiWorld o = knobs::ompi_world();
    const int size = static_cast<int>(knobs::get_int("EDP_WORLD_SIZE", o.size > 0 ? o.size : 1));
    const int rank = static_cast<int>(knobs::get_int("EDP_RANK", o.rank >= 0 ? o.rank : 0));
    return make_prefix(rank, size);
  } catch (const Error&) {
    return "edp";  // malformed launcher variables are reported where they are used
  }
}

struct State {
  std::mutex mu;
  std::shared_ptr<spdlog::logger> logger;
  std::string prefix;
};

State& state() {
  static State* s = [] {
    auto* st = new State;  // never destroyed: logging works during static destruction
    st->logger = std::make_shared<spdlog::logger>("edp", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st->prefix = prefix_from_env();
    st->logger->set_pattern(st->prefix + " %l: %v");
    std::string bad;
    Level level = Level::Info;
    try {
      level = parse_level(knobs::get_string("EDP_LOG_LEVEL"));
    } catch (const Error& e) {
      bad = e.what();  // reported below rather than thrown from every log call
    }
    st->logger->set_level(to_spd(level));
    st->logger->flush_on(spdlog::level::trace);
    if (!bad.empty()) st->logger->warn("{}; using info", bad);
    return st;
  }();
  return *s;
}

}  // namespace

bool enabled(Level level) { return level != Level::Off && state().logger->should_log(to_spd(level)); }

void write(Level level, const std::string& message) {
  State& s = state();
  std::string m = message;
  while (!m.empty() && m.back() == '\n') m.pop_back();
  s.logger->log(to_spd(level), "{}", m);
}

void set_rank(int rank, int size) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.prefix = make_prefix(rank, size);
  s.logger->set_pattern(s.prefix + " %l: %v");
}

void set_level(Level level) { state().logger->set_level(to_spd(level)); }

std::string prefix() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.prefix;
}

}  // namespace edp::log
