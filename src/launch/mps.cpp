// MPS control daemons (see mps.h). The control daemon forks into the background on `-d`; it is
// ready when the `control` pipe appears in its pipe directory, and it is gone when that pipe
// disappears after `quit`.
#include "launch/mps.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "launch/system.h"

namespace edp::launch {

using ::edp::detail::concat;

namespace {

bool exists(const std::string& p) {
  struct stat st{};
  return lstat(p.c_str(), &st) == 0;
}

void mkdirs(const std::string& path) {
  std::string cur;
  std::istringstream is(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "";
  while (std::getline(is, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error("cannot create " + cur + ": " + std::strerror(errno));
  }
}

std::string tail_of(const std::string& file, size_t max_bytes = 600) {
  std::string s;
  try {
    s = files::read_file_if_exists(file, files::kTableLimit).value_or("");
  } catch (const Error&) {
    return "";
  }
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

bool wait_for(const std::string& path, bool present, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (exists(path) != present) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

bool remove_tree(const std::string& path, const std::string& parent) {
  std::string why;
  if (files::remove_tree(path, parent, &why)) return true;
  std::fprintf(stderr, "edprun: warning: %s\n", why.c_str());
  return false;
}

MpsController::MpsController(std::string control, bool verbose) : control_(std::move(control)), verbose_(verbose) {}

MpsController::~MpsController() { stop_all(); }

void MpsController::start(const MpsDaemonPlan& d, double ready_timeout_s) {
  mkdirs(d.pipe_dir);
  mkdirs(d.log_dir);
  // Registered before starting: a daemon that half-started is still stopped and cleaned up.
  started_.push_back(d);
  const std::vector<std::pair<std::string, std::string>> env = {
      {"CUDA_VISIBLE_DEVICES", d.gpu_uuid}, {"CUDA_MPS_PIPE_DIRECTORY", d.pipe_dir}, {"CUDA_MPS_LOG_DIRECTORY", d.log_dir}};
  if (verbose_)
    std::fprintf(stderr, "edprun: starting MPS control daemon for GPU %d (%s), pipes in %s\n", d.gpu,
                 d.gpu_uuid.c_str(), d.pipe_dir.c_str());
  const RunResult r = run_capture({control_, "-d"}, env);
  if (r.status != 0) {
    const std::string log = tail_of(d.log_dir + "/control.log");
    throw Error(concat("nvidia-cuda-mps-control -d for GPU ", d.gpu, " exited with status ", r.status,
                       r.err.empty() ? "" : ": " + r.err, log.empty() ? "" : "; control.log: " + log));
  }
  if (!wait_for(d.pipe_dir + "/control", true, ready_timeout_s)) {
    const std::string log = tail_of(d.log_dir + "/control.log");
    throw Error(concat("the MPS control daemon for GPU ", d.gpu, " did not open its pipe ", d.pipe_dir,
                       "/control within ", ready_timeout_s, " s", log.empty() ? "" : "; control.log: " + log));
  }
}

bool MpsController::stop_all() {
  bool ok = true;
  for (auto it = started_.rbegin(); it != started_.rend(); ++it) {
    const MpsDaemonPlan& d = *it;
    if (exists(d.pipe_dir + "/control")) {
      if (verbose_) std::fprintf(stderr, "edprun: stopping MPS control daemon for GPU %d\n", d.gpu);
      try {
        const RunResult r = run_capture({control_},
                                        {{"CUDA_MPS_PIPE_DIRECTORY", d.pipe_dir}, {"CUDA_MPS_LOG_DIRECTORY", d.log_dir}},
                                        "quit\n");
        if (r.status != 0)
          std::fprintf(stderr, "edprun: warning: 'quit' to the MPS daemon of GPU %d failed (status %d): %s\n", d.gpu,
                       r.status, r.err.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "edprun: warning: could not stop the MPS daemon of GPU %d: %s\n", d.gpu, e.what());
      }
      if (!wait_for(d.pipe_dir + "/control", false, 10.0)) {
        std::fprintf(stderr,
                     "edprun: warning: the MPS daemon of GPU %d still has its pipe open after 'quit'; "
                     "stop it with: echo quit | CUDA_MPS_PIPE_DIRECTORY=%s nvidia-cuda-mps-control\n",
                     d.gpu, d.pipe_dir.c_str());
        ok = false;
        continue;  // its directories stay so that the command above still reaches it
      }
    }
    // .../mps/<gpu>/{pipe,log}: remove the per-GPU directory.
    const std::string gpu_dir = d.pipe_dir.substr(0, d.pipe_dir.rfind('/'));
    if (!remove_tree(gpu_dir, gpu_dir.substr(0, gpu_dir.rfind('/')))) {
      std::fprintf(stderr, "edprun: warning: could not remove %s\n", gpu_dir.c_str());
      ok = false;
    }
  }
  started_.clear();
  return ok;
}

}  // namespace edp::launch
