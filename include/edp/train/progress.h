// Progress of long work: a one-line bar with samples/s and loss on a terminal, plain periodic
// lines (every `every_s` seconds and at the end) when the output is a file or pipe, nothing
// when disabled (e.g. on ranks other than 0).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace edp::train {

class Progress {
 public:
  Progress(std::string label, int64_t total_steps, bool enabled = true, double every_s = 5.0,
           std::FILE* out = stderr);
  // Called after each step with the samples done so far in this phase and the latest loss.
  void update(int64_t step, int64_t samples, double loss);
  void finish(const std::string& extra = "");

 private:
  void draw(int64_t step, int64_t samples, double loss, bool final);
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  double every_s_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t step_ = 0, samples_ = 0;
  double loss_ = 0;
};

// Peak resident set size of this process in bytes (getrusage).
int64_t peak_rss_bytes();

}  // namespace edp::train
