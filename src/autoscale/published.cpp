// The published average JCTs the node-level simulator is compared with (cluster_sim.h).
#include <cmath>

#include "edp/autoscale/cluster_sim.h"

namespace edp::autoscale {

namespace {

// The Pollux paper's simulator study, 16 nodes x 4 GPUs, per workload file 1..8 (petuum/adaptdl,
// branch osdi21-artifact, simulator/results*/ summaries; docs/autoscaler.md cites them).
// 0 = not published.
const PublishedJct kPublished[] = {
    {"pollux", 1.0, {2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952}, 2751},
    {"tiresias", 1.0, {2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080}, 4038},
    {"optimus", 1.0, {4087, 6914, 3944, 5968, 5656, 5302, 7291, 6294}, 5682},
    {"pollux", 0.5, {0, 0, 0, 0, 0, 0, 0, 0}, 1534},
    {"pollux", 1.5, {0, 0, 0, 0, 0, 0, 0, 0}, 3685},
    {"pollux", 2.0, {0, 0, 0, 0, 0, 0, 0, 0}, 5289},
    {"tiresias", 0.5, {1450.9, 2333.3, 1869.9, 1946.8, 1425.4, 1826.6, 3979.2, 1900.0}, 2091.5},
    {"tiresias", 1.5, {5520.3, 6333.8, 6562.0, 5577.3, 6832.4, 5830.5, 5366.8, 7435.8}, 6182.3},
};

}  // namespace

const PublishedJct* published_jct(const std::string& policy, double load) {
  for (const PublishedJct& p : kPublished)
    if (p.policy == policy && std::abs(p.load - load) < 1e-9) return &p;
  return nullptr;
}

}  // namespace edp::autoscale
