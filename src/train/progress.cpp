// Terminal progress bar / periodic log lines.
#include "edp/train/progress.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>

namespace edp::train {

Progress::Progress(std::string label, int64_t total_steps, bool enabled, double every_s,
                   std::FILE* out)
    : label_(std::move(label)),
      total_(total_steps),
      enabled_(enabled),
      tty_(enabled && isatty(fileno(out))),
      every_s_(every_s),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void Progress::update(int64_t step, int64_t samples, double loss) {
  step_ = step;
  samples_ = samples;
  loss_ = loss;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (tty_ ? since >= 0.1 : since >= every_s_) {
    last_ = now;
    draw(step, samples, loss, false);
  }
}

void Progress::finish(const std::string& extra) {
  if (!enabled_) return;
  draw(step_, samples_, loss_, true);
  if (!extra.empty()) std::fprintf(out_, "%s\n", extra.c_str());
  std::fflush(out_);
}

void Progress::draw(int64_t step, int64_t samples, double loss, bool final) {
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = el > 0 ? samples / el : 0.0;
  const double frac = total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 0.0;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(std::lround(frac * kWidth));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r%s [%s] %lld/%lld  %.0f samples/s  loss %.4f  %.1fs%s", label_.c_str(),
                 bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_), rate,
                 loss, el, final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s step %lld/%lld (%.0f%%)  %.0f samples/s  loss %.4f  %.1fs\n",
                 label_.c_str(), static_cast<long long>(step), static_cast<long long>(total_),
                 100.0 * frac, rate, loss, el);
  }
  std::fflush(out_);
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace edp::train
