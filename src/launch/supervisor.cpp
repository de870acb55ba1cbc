// edprun's restart/rescale/lost-host decisions (supervisor.h).
#include "launch/supervisor.h"

#include <algorithm>

#include "core/text.h"
#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"

namespace edp::launch {

namespace {

using text::join;

Step finish(int code, std::vector<std::string> say = {}) {
  Step s;
  s.kind = Step::Finish;
  s.code = code;
  s.say = std::move(say);
  return s;
}

}  // namespace

Step Supervisor::after(const RunEnd& e) {
  if (e.code == elastic::kRescaleExitCode) {
    // The job stopped at a step boundary after committing a checkpoint, and rank 0 recorded the
    // size it committed. That record, not the control file (which a controller may have changed
    // or broken since), is the size to continue at.
    if (e.rescale_record) {
      Step s;
      s.kind = Step::Rescale;
      s.np = e.rescale_workers;
      return s;
    }
    Step s = crashed(e, "the job stopped for a rescale without a usable rescale file (exit 75)");
    s.say.insert(s.say.begin(),
                 detail::concat("error: the job exited with 75 (stopped for a rescale) but cannot be restarted at the size "
                                "it committed: ", e.rescale_error, ". Rank 0 records that size in EDP_RESCALE_FILE after "
                                "committing its checkpoint, before exiting with 75 (docs/elastic.md); without it this is "
                                "a bug of the job, treated as a crash"));
    return s;
  }
  if (e.code == elastic::kStopExitCode)
    // Not a failure: the job committed a checkpoint and stopped because its control file said
    // {"stop": true} (a preemption). Restarting it here would only stop it again.
    return finish(e.code, {detail::concat("the job stopped as its control file asked (exit ", e.code,
                                          "); started again, with a control file that no longer asks it to stop, a "
                                          "job with a checkpoint directory resumes from the checkpoint it committed at "
                                          "that step (its own message above names it; without one it starts over)")});
  if (e.code == comm::kStallExitCode) return crashed(e, "the job stalled (a collective timed out, exit 76)");
  if (e.code != 0) return crashed(e, detail::concat("the job failed (exit code ", e.code, ")"));
  return finish(0);
}

Step Supervisor::restart(int np, const std::string& failure, bool stall) {
  Step s;
  s.kind = Step::Restart;
  s.np = np;
  s.failure = failure;
  s.stall = stall;
  s.restart = ++restarts_;
  s.wait_s = backoff_;
  backoff_ *= 2;
  return s;
}

Step Supervisor::crashed(const RunEnd& e, const std::string& failure) {
  const bool stall = e.code == comm::kStallExitCode;
  // Hosts lost: ranks that did not answer in a stalled collective name their hosts. The restart
  // leaves those hosts out (edprun chose the hosts: a hostfile) and runs at the largest size the
  // other hosts take, down to --min-np.
  if (stall && !e.lost_hosts.empty() && restarts_ < cfg_.max_restarts) {
    if (!cfg_.hostfile)
      return finish(e.code, {"host(s) " + join(e.lost_hosts) +
                             " lost; restarting without them needs a hostfile (inside Slurm, the allocation decides "
                             "the hosts)"});
    for (const auto& h : e.lost_hosts)
      if (std::find(lost_.begin(), lost_.end(), h) == lost_.end()) lost_.push_back(h);
    const int want = e.workers;
    const int floor_np = cfg_.min_np > 0 ? cfg_.min_np : want;
    int fit = 0;
    try {
      fit = fit_(lost_, want);
    } catch (const std::exception& x) {
      return finish(e.code, {"error: cannot restart without host(s) " + join(e.lost_hosts) + ": " + x.what()});
    }
    if (fit < floor_np || fit == 0)
      return finish(e.code, {detail::concat("error: host(s) ", join(e.lost_hosts), " lost (rank(s) ", join(e.silent_ranks),
                                            " did not answer); the other host(s) take ", fit, " of the job's ", want,
                                            " rank(s), fewer than --min-np ", floor_np, " allows; not restarting")});
    Step s = restart(fit, failure, true);
    s.without = e.lost_hosts;
    return s;
  }
  if (restarts_ >= cfg_.max_restarts) {
    std::vector<std::string> say;
    if (cfg_.max_restarts > 0 || stall)
      say.push_back(detail::concat(failure, "; no restart left (--max-restarts ", cfg_.max_restarts, ")"));
    return finish(e.code, say);
  }
  // At the job's current size: an in-place rescale may have changed it since this start. The job
  // resumes from its last checkpoint, which re-shards to whatever size it is loaded at.
  return restart(e.workers, failure, stall);
}

Step Supervisor::cannot(const Step& s, const RunEnd& e, const std::string& why) {
  if (s.kind == Step::Rescale) {
    Step c = crashed(e, "the job stopped for a rescale to a size the hosts cannot run (exit 75)");
    c.say.insert(c.say.begin(), "error: the job committed a rescale but cannot be started at its new size: " + why +
                                    "; treated as a crash");
    return c;
  }
  std::vector<std::string> say = s.say;  // what was to be said stays said
  if (s.kind == Step::Restart && !s.without.empty()) {
    say.push_back("error: cannot restart without host(s) " + join(s.without) + ": " + why);
    return finish(e.code, say);
  }
  if (s.kind == Step::Restart) {  // the size it ran at, then
    Step c = s;
    c.np = 0;
    say.push_back(detail::concat("warning: cannot restart at the job's current size of ", s.np, " worker(s) (", why,
                                 "); restarting at ", e.np));
    c.say = say;
    return c;
  }
  say.push_back("error: " + why);
  return finish(e.code, say);
}

}  // namespace edp::launch
