// The stall inspector's watchdog for MPI jobs (edp/comm/stall.h says what it does).
//
// One thread per process, started by mpi_init (and again by comm::watch_communicator after an
// elastic job's membership changed) and stopped before MPI_Finalize. Every 200 ms it
// answers the other ranks' queries and looks at the oldest collective of this process. When
// that one has waited longer than comm_timeout(), it sends its own position to every other
// rank (tag kQuery, on a private duplicate of the job's communicator, so the job's own traffic is never
// matched), gathers their answers for a grace period, prints the report and calls
// MPI_Abort(MPI_COMM_WORLD, kStallExitCode). A rank that is computing answers from its own
// watchdog thread; a stopped or frozen rank cannot, and is reported as not answering.
//
// Talking from a second thread while the first one is inside MPI needs MPI_THREAD_MULTIPLE.
// With a lower level the watchdog still ends the job on a timeout, but reports only itself.
//
// Across hosts the report names each silent rank's host (the names are gathered once, when the
// watchdog starts), and, where EDP_STALL_DIR names a directory this rank can see (edprun's job
// directory on edprun's host), the rank leaves a stall record there before MPI_Abort: edprun
// reads it to end an mpirun that cannot reach a lost host, and to restart without that host.
// Every rank in the stalled collective reaches its timeout at about the same time, and the first
// MPI_Abort ends them all; so a rank that cannot leave a record (EDP_STALL_DIR is set but not
// here: another host) waits one more grace period, still answering, before it aborts, so that a
// rank on edprun's host leaves its record first. (Without that wait, on a busy machine a rank of
// another host aborted first, the rank on edprun's host never wrote, and edprun waited on an
// mpirun that could not reach the lost host.)
#include <mpi.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "edp/comm/stall.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "stall.h"

namespace edp::comm::detail {
namespace {

constexpr int kQuery = 1, kReply = 2;

// What a rank says about itself: fixed size, sent as bytes.
struct Position {
  int32_t rank = -1;
  int32_t in_collective = 0;
  char text[248] = {};
};

Position my_position(int rank) {
  Position p;
  p.rank = rank;
  p.in_collective = oldest_in_flight().has_value() ? 1 : 0;
  const std::string s = position_now();
  std::strncpy(p.text, s.c_str(), sizeof p.text - 1);
  return p;
}

class Watchdog {
 public:
  Watchdog(bool can_talk, MPI_Comm watched) : can_talk_(can_talk) {
    MPI_Comm_rank(watched, &rank_);
    MPI_Comm_size(watched, &size_);
    if (can_talk_) {
      MPI_Comm_dup(watched, &comm_);  // collective over the watched communicator
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    }
    // Every rank's host, for the report: a silent rank's host is what a person (and edprun)
    // acts on when a host is lost. Collective, like the dup above.
    char mine[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(mine, &len);
    std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, watched);
    for (int r = 0; r < size_; ++r) {
      const char* n = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
      hosts_.emplace_back(n, strnlen(n, MPI_MAX_PROCESSOR_NAME));
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (auto& s : sends_) {
      int done = 0;
      MPI_Test(&s.req, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&s.req);
        MPI_Request_free(&s.req);
      }
    }
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stop_) break;
      lock.unlock();
      if (can_talk_) answer_queries(nullptr);
      poll_device_ops();
      const double timeout = comm_timeout();
      if (timeout > 0) {
        if (const auto op = oldest_in_flight()) {
          const double waited = std::chrono::duration<double>(Clock::now() - op->since).count();
          if (waited > timeout) inspect_and_abort(*op, waited, timeout);  // does not return
        }
      }
      lock.lock();
    }
  }

  // Answers every pending query with this rank's position; records the asker's position in
  // `seen` when given (a rank that asks is stuck itself).
  void answer_queries(std::map<int, Position>* seen) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQuery, comm_, &flag, &st) != MPI_SUCCESS || !flag) return;
      Position asker;
      MPI_Recv(&asker, sizeof asker, MPI_BYTE, st.MPI_SOURCE, kQuery, comm_, MPI_STATUS_IGNORE);
      if (seen) (*seen)[st.MPI_SOURCE] = asker;
      reap_sends();
      sends_.emplace_back();  // a list: the buffer stays put until its send completes
      sends_.back().pos = my_position(rank_);
      MPI_Isend(&sends_.back().pos, sizeof(Position), MPI_BYTE, st.MPI_SOURCE, kReply, comm_, &sends_.back().req);
    }
  }

  void reap_sends() {
    sends_.remove_if([](Send& s) {
      int done = 0;
      MPI_Test(&s.req, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  [[noreturn]] void inspect_and_abort(const InFlight& op, double waited, double timeout) {
    char head[512];
    std::snprintf(head, sizeof head,
                  "stall: %s has waited %.1f s, longer than the communication timeout (%.4g s, "
                  "EDP_COMM_TIMEOUT or the program's flag)",
                  op.describe().c_str(), waited, timeout);
    std::string report = head;
    if (can_talk_ && size_ > 1) {
      // Ask everyone, then listen for a grace period: answers, and queries of other stuck ranks.
      const Position me = my_position(rank_);
      std::vector<MPI_Request> asks(static_cast<size_t>(size_), MPI_REQUEST_NULL);
      for (int r = 0; r < size_; ++r)
        if (r != rank_) MPI_Isend(&me, sizeof me, MPI_BYTE, r, kQuery, comm_, &asks[static_cast<size_t>(r)]);
      std::map<int, Position> seen;
      seen[rank_] = me;
      const double grace = std::clamp(timeout / 4, 2.0, 10.0);
      const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
      while (static_cast<int>(seen.size()) < size_ && Clock::now() < until) {
        answer_queries(&seen);
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kReply, comm_, &flag, &st) == MPI_SUCCESS && flag) {
          Position p;
          MPI_Recv(&p, sizeof p, MPI_BYTE, st.MPI_SOURCE, kReply, comm_, MPI_STATUS_IGNORE);
          seen[st.MPI_SOURCE] = p;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      // Group the ranks by what they said.
      std::map<std::string, std::vector<int>> by_text;
      std::vector<int> silent;
      for (int r = 0; r < size_; ++r) {
        const auto it = seen.find(r);
        if (it == seen.end()) {
          silent.push_back(r);
        } else {
          std::string t(it->second.text, strnlen(it->second.text, sizeof it->second.text));
          // Durations differ between ranks; group by what they wait in, not for how long.
          const auto f = t.rfind(" for ");
          if (it->second.in_collective && f != std::string::npos) t = t.substr(0, f);
          by_text[t].push_back(r);
        }
      }
      auto ranks = [](const std::vector<int>& v) {
        std::string s = v.size() == 1 ? "rank " : "ranks ";
        for (size_t i = 0; i < v.size(); ++i) {
          if (i) s += ',';
          s += std::to_string(v[i]);
        }
        return s;
      };
      for (const auto& [text, rs] : by_text) report += "\n  " + ranks(rs) + ": " + text;
      if (!silent.empty()) {
        char g[64];
        std::snprintf(g, sizeof g, "%.1f s", grace);
        // One line per host: a lost host shows as all of its ranks silent.
        std::map<std::string, std::vector<int>> by_host;
        for (int r : silent) by_host[hosts_[static_cast<size_t>(r)]].push_back(r);
        for (const auto& [host, rs] : by_host)
          report += "\n  " + ranks(rs) + " on host " + host + ": no answer within " + std::string(g) +
                    " (stopped, frozen outside MPI, or the host is unreachable)";
        if (!write_record(op, silent) && !knobs::get_string("EDP_STALL_DIR").empty()) {
          const auto later = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
          while (Clock::now() < later) {
            answer_queries(&seen);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      }
    } else if (size_ > 1) {
      report += "\n  (the other ranks cannot be asked: MPI did not grant MPI_THREAD_MULTIPLE)";
    }
    report += "\n  ending the job with exit code " + std::to_string(kStallExitCode);
    log::error(report);
    std::fflush(stderr);
    abort_device_ops();  // NCCL: ncclCommAbort, so that no kernel keeps waiting for a peer
    MPI_Abort(MPI_COMM_WORLD, kStallExitCode);
    std::_Exit(kStallExitCode);  // MPI_Abort does not return; if it did, still end this rank
  }

  // The stall record for edprun: {"rank", "host", "silent_ranks", "silent_hosts", "collective"},
  // written to $EDP_STALL_DIR/<rank>.json (temporary file, then rename) when that directory exists.
  // Returns whether it was written.
  bool write_record(const InFlight& op, const std::vector<int>& silent) const {
    const std::string dir = knobs::get_string("EDP_STALL_DIR");
    struct stat st{};
    if (dir.empty() || stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    auto quoted = [](const std::string& v) {
      std::string o = "\"";
      for (char c : v) {
        if (c == '"' || c == '\\') o += '\\';
        o += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
      }
      return o + "\"";
    };
    std::string ranks, hosts;
    std::vector<std::string> seen_hosts;
    for (int r : silent) {
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      const std::string& h = hosts_[static_cast<size_t>(r)];
      if (std::find(seen_hosts.begin(), seen_hosts.end(), h) == seen_hosts.end()) {
        seen_hosts.push_back(h);
        hosts += (hosts.empty() ? "" : ",") + quoted(h);
      }
    }
    std::ostringstream f;
    f << "{\"rank\": " << rank_ << ", \"host\": " << quoted(hosts_[static_cast<size_t>(rank_)])
      << ", \"silent_ranks\": [" << ranks << "], \"silent_hosts\": [" << hosts
      << "], \"collective\": " << quoted(op.describe()) << "}\n";
    return files::try_write_atomic(dir + "/" + std::to_string(rank_) + ".json", f.str());
  }

  bool can_talk_;
  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;  // by rank of the watched communicator
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  struct Send {
    Position pos;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::list<Send> sends_;
  std::thread thread_;
};

std::unique_ptr<Watchdog> g_watchdog;
ThreadLevel g_level = ThreadLevel::Single;

}  // namespace

void mpi_start_stall_inspector(ThreadLevel granted, void* comm) {
  g_watchdog.reset();  // a membership change: watch the new communicator
  g_level = granted;
  g_watchdog = std::make_unique<Watchdog>(granted >= ThreadLevel::Multiple, *static_cast<MPI_Comm*>(comm));
}

void mpi_stop_stall_inspector() { g_watchdog.reset(); }

}  // namespace edp::comm::detail
