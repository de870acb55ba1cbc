// The autoscaler's one goodput model (goodput.h) against values worked out by hand: statistical
// gain and efficiency (both parameterisations), the step with accumulation, the batch split and
// search, the step-time fits on exact data, and the shrinkage toward a measurement.
//
// Tolerances: the closed forms are compared to 1e-12 relative (a few roundings of doubles of order
// 1); the fits recover an exact line from noiseless data to 1e-9 relative (normal equations on
// a handful of points with condition numbers below 1e4).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "edp/autoscale/goodput.h"

using namespace edp::autoscale;

namespace {

constexpr double kExact = 1e-12;
constexpr double kFit = 1e-9;

}  // namespace

TEST(Goodput, GainAndEfficiencyOfPolluxsModel) {
  // sqr 4, var 40 at B0 = 32: at B = 128 (s = 4) gain = 44 / (10 + 4) = 22/7, efficiency = 22/28.
  const GradStats g{4, 40};
  EXPECT_NEAR(statistical_gain(g, 128, 32), 22.0 / 7.0, kExact);
  EXPECT_NEAR(statistical_efficiency(g, 128, 32), 22.0 / 28.0, kExact);
  // At the job's own batch nothing changes.
  EXPECT_NEAR(statistical_gain(g, 32, 32), 1.0, kExact);
  EXPECT_NEAR(statistical_efficiency(g, 32, 32), 1.0, kExact);
  // A smaller batch loses per step but gains per sample.
  EXPECT_LT(statistical_gain(g, 16, 32), 1.0);
  EXPECT_GT(statistical_efficiency(g, 16, 32), 1.0);
  // No statistics (sqr = var = 0): gain 1, so efficiency B0 / B (no larger batch pays).
  EXPECT_NEAR(statistical_gain(GradStats{}, 128, 32), 1.0, kExact);
  EXPECT_NEAR(statistical_efficiency(GradStats{}, 128, 32), 0.25, kExact);
  // Pure noise (sqr = 0): the gain is the full batch ratio, efficiency 1 (perfect scaling).
  EXPECT_NEAR(statistical_gain(GradStats{0, 5}, 256, 32), 8.0, kExact);
  EXPECT_NEAR(statistical_efficiency(GradStats{0, 5}, 256, 32), 1.0, kExact);
}

TEST(Goodput, NoiseScaleFormIsTheSameLaw) {
  // (B_noise + B0) / (B_noise + B), the form the pool simulator, `plan` and serve are given.
  for (double noise : {1.0, 320.0, 5000.0, 1.8e7})
    for (double b : {16.0, 32.0, 100.0, 4096.0}) {
      const double want = (noise + 32) / (noise + b);
      EXPECT_NEAR(statistical_efficiency(grad_stats_of_noise_scale(noise, 32), b, 32), want, kExact * want)
          << "noise " << noise << " batch " << b;
    }
  // sqr 4, var 40 at 32 is a noise scale of 320.
  EXPECT_NEAR(statistical_efficiency(GradStats{4, 40}, 128, 32),
              statistical_efficiency(grad_stats_of_noise_scale(320, 32), 128, 32), kExact);
}

TEST(Goodput, AccumulationPaysTheSyncOnce) {
  EXPECT_DOUBLE_EQ(accumulated_step_s(0.5, 0.1, 0), 0.5);
  // Three micro-batches: 0.5 + 2 x (0.5 - 0.1) = 1.3.
  EXPECT_NEAR(accumulated_step_s(0.5, 0.1, 2), 1.3, kExact);
  // No sync: every micro-batch costs the whole step.
  EXPECT_NEAR(accumulated_step_s(0.25, 0.0, 3), 1.0, kExact);
}

TEST(Goodput, SplitAndSearch) {
  // 3000 on 4 GPUs, max_local 256: 750 per GPU in three micro-batches of 250.
  const BatchSplit a = split_global_batch(4, 3000, 256, 4096, false);
  EXPECT_EQ(a.atomic, 250);
  EXPECT_EQ(a.accum, 2);
  EXPECT_EQ(a.batch(4), 3000);
  // Cut so that the total stays <= max_batch: ceil(1024/3) = 342 = 6 x 57, 3 x 6 x 57 > 1024 -> 56.
  const BatchSplit c = split_global_batch(3, 1024, 64, 1024, false);
  EXPECT_EQ(c.accum, 5);
  EXPECT_EQ(c.atomic, 56);
  // One GPU: accumulate at least once when asked; the job's rule asks above its initial batch only.
  EXPECT_EQ(split_global_batch(1, 32, 256, 4096, true).accum, 1);
  EXPECT_EQ(split_batch(1, 32, 256, 32, 4096, true).accum, 0);
  EXPECT_EQ(split_batch(1, 64, 256, 32, 4096, true).accum, 1);

  // The search visits gpus x b x (k + 1) within [lower, max_batch] and keeps the first best.
  const std::vector<int> micro = {8, 16, 32};
  int visited = 0;
  const auto best = best_batch<int64_t>(
      micro, 2, 40, 200,
      [&](int b, int k, int64_t batch) -> std::optional<int64_t> {
        EXPECT_EQ(batch, 2 * b * (k + 1));
        EXPECT_GE(batch, 40);
        EXPECT_LE(batch, 200);
        ++visited;
        return batch;
      },
      [](int64_t batch) { return -std::abs(double(batch) - 100.0); });  // the batch nearest 100
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(*best, 96);  // 2 x 8 x 6 first, then 2 x 16 x 3: a tie keeps the first
  // b = 8: 48..192 (k = 2..11; 16 and 32 below 40), b = 16: 64..192 (k = 1..5), b = 32: 64, 128, 192.
  EXPECT_EQ(visited, 10 + 5 + 3);
  // Nothing eligible: nullopt.
  EXPECT_FALSE((best_batch<int64_t>(
                    micro, 2, 40, 200, [](int, int, int64_t) { return std::optional<int64_t>(); },
                    [](int64_t) { return 0.0; }))
                   .has_value());
}

TEST(Goodput, FitsRecoverExactLines) {
  // compute(b) = 0.05 + 0.002 b, sync 0.01 on every row (subtracted before the fit).
  std::vector<StepSample> rows;
  for (double b : {8.0, 32.0, 128.0}) rows.push_back(StepSample{b, 0.05 + 0.002 * b + 0.01, 0.01});
  const ComputeLine line = fit_compute_line(rows, 0.95, 0.25);
  EXPECT_TRUE(line.fitted);
  EXPECT_NEAR(line.a, 0.05, kFit * 0.05);
  EXPECT_NEAR(line.c, 0.002, kFit * 0.002);
  // One micro-batch: the share fixed_share fixed, the rest per sample through it.
  const ComputeLine one = fit_compute_line({StepSample{32, 0.2, 0.04}}, 0.95, 0.25);
  EXPECT_FALSE(one.fitted);
  EXPECT_NEAR(one.a, 0.16 * 0.25, kExact);
  EXPECT_NEAR(one.a + one.c * 32, 0.16, kExact);
  // The sync is taken as at most sync_cap x step.
  const ComputeLine capped = fit_compute_line({StepSample{32, 0.2, 0.5}}, 0.9, 0.0);
  EXPECT_NEAR(capped.c * 32, 0.02, kExact);

  // sync = 0.02 + 0.001 g, two rows at g = 2 averaged.
  std::map<int, std::pair<double, int>> sync = {{2, {0.021 + 0.023, 2}}, {4, {0.024, 1}}, {8, {0.028, 1}}};
  double s0 = -1, s1 = -1;
  EXPECT_TRUE(fit_sync_line(sync, OnePoint::Constant, s0, s1));
  EXPECT_NEAR(s0, 0.02, kFit);
  EXPECT_NEAR(s1, 0.001, kFit);
  // A falling line is noise: the mean of the sizes, flat.
  EXPECT_TRUE(fit_sync_line({{2, {0.03, 1}}, {4, {0.01, 1}}}, OnePoint::Constant, s0, s1));
  EXPECT_NEAR(s0, 0.02, kExact);
  EXPECT_EQ(s1, 0.0);
  // One size: a constant, or proportional to the size.
  EXPECT_TRUE(fit_sync_line({{4, {0.02, 1}}}, OnePoint::Constant, s0, s1));
  EXPECT_NEAR(s0, 0.02, kExact);
  EXPECT_EQ(s1, 0.0);
  EXPECT_TRUE(fit_sync_line({{4, {0.02, 1}}}, OnePoint::Proportional, s0, s1));
  EXPECT_EQ(s0, 0.0);
  EXPECT_NEAR(s1, 0.005, kExact);
  EXPECT_FALSE(fit_sync_line({}, OnePoint::Constant, s0, s1));
}

TEST(Goodput, ShrinkageTowardTheNearestMeasurement) {
  EXPECT_NEAR(trust_of(1), 0.5, kExact);
  EXPECT_NEAR(trust_of(3), 0.75, kExact);
  EXPECT_EQ(trust_of(0), 0.0);
  EXPECT_NEAR(trust_of(1, 0.25), 0.8, kExact);  // half the way at a quarter of a configuration
  EXPECT_NEAR(trust_of(3, 3.0), 0.5, kExact);
  EXPECT_NEAR(log_distance(8, 2), std::log(4.0), kExact);
  EXPECT_NEAR(log_distance(2, 8), std::log(4.0), kExact);
  // Measured 100 where the model says 80; the model says 4x that elsewhere: with one measurement
  // (trust 1/2) the prediction claims only the square root of the ratio.
  EXPECT_NEAR(shrink_toward(100, 80, 320, 0.5), 200.0, 200.0 * kExact);
  EXPECT_NEAR(shrink_toward(100, 80, 320, 1.0), 400.0, 400.0 * kExact);
  EXPECT_NEAR(shrink_toward(100, 80, 320, 0.0), 100.0, kExact);
}
