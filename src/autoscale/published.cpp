// The published average JCTs the node-level simulator is compared with (cluster_sim.h).
#include <cmath>

#include "edp/autoscale/cluster_sim.h"

namespace edp::autoscale {

namespace {

// The Pollux paper's simulator study, 16 nodes x 4 GPUs, per workload file 1..8 (petuum/adaptdl,
// branch osdi21-artifact, simulator/results-jobload/<policy>-<load>/summary.json; docs/autoscaler.md
// cites them). 0 = not published.
const PublishedJct kPublished[] = {
    {"pollux", 1.0, {2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952}, 2751},
    {"tiresias", 1.0, {2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080}, 4038},
    {"optimus", 1.0, {4087, 6914, 3944, 5968, 5656, 5302, 7291, 6294}, 5682},
    {"pollux", 0.5, {1059.5, 1826.3, 1310.5, 1497.8, 976.8, 1287.8, 2881.1, 1432.0}, 1534.0},
    {"pollux", 1.5, {3855.8, 3380.6, 3299.9, 3902.7, 4007.3, 3474.3, 3217.6, 4345.1}, 3685.4},
    {"pollux", 2.0, {6186.3, 4190.8, 5131.8, 5262.4, 6590.8, 5105.3, 3836.3, 6009.8}, 5289.2},
    {"tiresias", 0.5, {1450.9, 2333.3, 1869.9, 1946.8, 1425.4, 1826.6, 3979.2, 1900.0}, 2091.5},
    {"tiresias", 1.5, {5520.3, 6333.8, 6562.0, 5577.3, 6832.4, 5830.5, 5366.8, 7435.8}, 6182.3},
    {"tiresias", 2.0, {10138.2, 8656.0, 10727.8, 9664.7, 12098.1, 10254.7, 8370.8, 10405.8}, 10039.5},
    {"optimus", 0.5, {1309.7, 3124.6, 1986.8, 2173.9, 1324.5, 1958.0, 5314.0, 1971.5}, 2395.4},
    {"optimus", 1.5, {7673.8, 6678.2, 5683.6, 7683.8, 7899.7, 7500.3, 6426.2, 8331.3}, 7234.6},
    {"optimus", 2.0, {10806.6, 8515.4, 8363.4, 10312.9, 11830.0, 9767.3, 6998.0, 11174.8}, 9721.0},
};

}  // namespace

const PublishedJct* published_jct(const std::string& policy, double load) {
  for (const PublishedJct& p : kPublished)
    if (p.policy == policy && std::abs(p.load - load) < 1e-9) return &p;
  return nullptr;
}

}  // namespace edp::autoscale
