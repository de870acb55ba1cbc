// Stopwatch: wall-clock seconds on the monotonic clock. In core so that every layer (the DDP
// reducer, the layers' timeline spans, the training loop) times itself the same way.
#pragma once
#include <chrono>

namespace edp {

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void reset() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace edp
