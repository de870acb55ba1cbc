// Tests of reads that must not block (a FIFO, a device planted where edp reads a file): the call
// runs in a child process, and a child still running after a generous deadline is killed and
// reported as blocked, so that a regression fails the test at once instead of hanging the suite
// until CTest's timeout. The deadline is not a timing assertion: the calls take milliseconds; only
// a call that blocks forever exceeds it.
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace edp_test {

struct ChildResult {
  bool finished = false;  // false: still blocked at the deadline (killed)
  std::string output;     // what `fn` returned (e.g. an error message)
};

inline ChildResult run_in_child(const std::function<std::string()>& fn, double deadline_s = 30) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = fn();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildResult r;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  int status = 0;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n > 0) r.output.append(buf, static_cast<size_t>(n));
    }
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.finished = true;
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
  }
  for (char buf[4096];;) {  // the rest of the output
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  return r;
}

}  // namespace edp_test
