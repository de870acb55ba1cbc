// The divergence guard's rule (JobOptions::divergence_factor), apart from the job: a pure state
// machine over the mean loss of windows of kGuardWindow steps. It communicates with nothing; the
// job sums each rank's local() over the ranks before every judgement, so all ranks decide alike,
// and carries out what a judgement says (hold the last good checkpoint, stop with the sentence).
//
// The rule: the first full window sets the running level; a window whose mean is above
// factor x level is in doubt; kGuardPatience windows in doubt in a row mean the loss diverged. A
// window down from a blow-up (a window above factor² x level) but not back within
// kGuardRecovered x level stays in doubt (after a milder rise a slow recovery is normal). A good
// window ends the doubt and moves the level: level = 0.9 level + 0.1 mean. Steps after the last
// full window (a job shorter than a window, the steps before a stop or a change of size) are
// judged once, against the level — or, with none yet, against the job's first step.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace edp::elastic {

class DivergenceGuard {
 public:
  // What a full window's judgement asks of the job.
  enum class Window {
    kEmpty,        // no sample in the window (nothing judged)
    kFirst,        // the first window: it set the level
    kGood,         // not in doubt: the job releases a held checkpoint
    kDoubtBegins,  // the first window in doubt: the job holds the checkpoint of good_step()
    kDoubt,        // still in doubt, patience left
    kDiverged,     // the loss diverged: the job stops with diverged_what()
  };

  // factor 0: never in doubt (the level is still followed, for the log).
  explicit DivergenceGuard(double factor);

  // A job resumed at `step`: the good state is there, the next window starts after it.
  void resume_at(int64_t step) {
    good_step_ = step;
    from_ = step + 1;
  }

  // After each step: this rank's loss summed over its `samples` samples.
  void add(double loss_sum, double samples);

  // This rank's part of the next judgement: {the window's loss sum, its samples, the first step's
  // loss sum, its samples}. The job sums them over the ranks.
  std::array<double, 4> local() const;

  // The end of the full window that ends at `step`, with the window's sums over the ranks. Starts
  // the next window at step + 1.
  Window end_window(int64_t step, double sum, double samples);

  // The steps since the last full window (or, with none, the last window when it was in doubt)
  // at `step`, before `when` ("the end of the training", ...), with local() summed over the ranks:
  // the sentence saying the loss diverged, or "" when it did not (or there is nothing to judge).
  std::string judge_partial(int64_t step, const std::array<double, 4>& sums, const std::string& when) const;

  // The sentence for a kDiverged window that ended at `step`.
  std::string diverged_what(int64_t step) const;

  double level() const { return level_; }           // < 0: none yet
  int64_t good_step() const { return good_step_; }  // the end of the last good window
  double last_mean() const { return last_; }         // the last full window's mean

 private:
  bool above(double mean, double level) const { return factor_ > 0 && mean > factor_ * level; }
  bool not_back(double mean, double level) const;

  double factor_;
  double sum_ = 0, n_ = 0, level_ = -1, last_ = 0, peak_ = 0;
  double first_[2] = {0, 0};
  bool first_set_ = false, came_down_ = false;
  int suspect_ = 0;
  int64_t good_step_ = 0, first_bad_ = 0, from_ = 1;
};

}  // namespace edp::elastic
