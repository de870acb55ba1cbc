// What edprun does each time mpirun has ended: finish with the job's exit code, restart it at the
// size it committed for a rescale (exit 75), or restart it after a crash or a stall (exit 76) — at
// its current size, or, when hosts stopped answering, on the hosts that are left at the largest
// size they take (down to --min-np) — with at most --max-restarts restarts and a back-off that
// doubles each time. A pure decision over what edprun knows, like JobHistory: the launcher carries
// a step out (plans, MPS daemons, mpirun) and tells the supervisor when it cannot.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace edp::launch {

// How one mpirun ended.
struct RunEnd {
  int code = 0;                 // mpirun's exit status (76 also when edprun killed it after a stall)
  bool rescale_record = false;  // exit 75: rank 0's rescale record was read ...
  int rescale_workers = 0;      // ... and names this size
  std::string rescale_error;    // ... else why it could not be read
  std::vector<std::string> lost_hosts;  // a stall: the job's hosts whose ranks did not answer
  std::vector<int> silent_ranks;
  int workers = 0;  // the job's size as its events tell (an in-place rescale changes it)
  int np = 0;       // the size mpirun ran at
};

struct Step {
  enum Kind { Finish, Rescale, Restart } kind = Finish;
  int code = 0;                 // Finish: edprun's exit status
  int np = 0;                   // Rescale, Restart: the size to start at (0: the size it ran at)
  std::vector<std::string> without;  // Restart: hosts to leave out from now on
  bool stall = false;           // Restart: after a stall
  double wait_s = 0;            // Restart: the back-off before it
  int restart = 0;              // Restart: which one (1-based)
  std::string failure;          // Restart: why the job ended, in the words of the restart line
  std::vector<std::string> say; // lines for stderr (without "edprun: "), printed before acting
};

class Supervisor {
 public:
  struct Config {
    int max_restarts = 0;
    double backoff_s = 5;
    int min_np = 0;        // lost hosts: the fewest ranks to restart at (0: the job's size)
    bool hostfile = false; // edprun chose the hosts (a hostfile), so it may leave some out
  };
  // fit(lost, want): the largest size <= want that the job's hosts without `lost` (all lost so
  // far) can run; 0 when none, or a throw with the reason.
  using Fit = std::function<int(const std::vector<std::string>& lost, int want)>;

  Supervisor(Config cfg, Fit fit) : cfg_(cfg), fit_(std::move(fit)), backoff_(cfg.backoff_s) {}

  Step after(const RunEnd& e);
  // The launcher could not carry `s` out (`why`): what to do instead.
  Step cannot(const Step& s, const RunEnd& e, const std::string& why);

  int restarts() const { return restarts_; }
  const std::vector<std::string>& lost_hosts() const { return lost_; }

 private:
  Step crashed(const RunEnd& e, const std::string& failure);
  Step restart(int np, const std::string& failure, bool stall);
  Config cfg_;
  Fit fit_;
  double backoff_;
  int restarts_ = 0;
  std::vector<std::string> lost_;
};

}  // namespace edp::launch
