// decide() on a cluster of several GPU types (plan.h, PlanRequest::types): the checks a typed
// request needs, the solve over the types' capacities (typed_optimizer.h) and the placement of
// each type's jobs on that type's nodes. Internal to src/autoscale/plan*.cpp.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "edp/autoscale/online.h"
#include "edp/autoscale/plan.h"

namespace edp::autoscale::detail {

// The index of the type named `name` in req.types, or -1.
int type_index(const PlanRequest& req, const std::string& name);

// The memory of each GPU a configuration runs on: its type's, else the request's.
int64_t gpu_memory_of(const PlanRequest& req, const Config& c);

// The checks of a typed request (edp::DataError naming the field), and that a request without
// types names none. Called by validate().
void validate_types(const PlanRequest& req);

// Values every option of req.jobs[i] (option_value) into vals and returns the indices decide() may
// choose from: options with throughput that fit in their GPUs' memory (or are current); a value
// that is not finite there is an edp::DataError naming the option. One rule for decide() and
// decide_typed().
std::vector<size_t> choosable_options(const PlanRequest& req, size_t i, std::vector<double>& vals);

// Values every option (option_value), solves over the types (solve_typed) and fills plan's
// choices, values, objective and GPUs used. Jobs' options must already be checked (validate).
void decide_typed(const PlanRequest& req, Plan& plan);

// The options a learned job is offered on one pool of GPUs (a request's, or one type's): one per
// GPU count up to cap that packs onto nodes of node_size (1..node_size, then whole nodes), and its
// current count cur on the cur_nodes nodes it holds, each at the batch with the best predicted
// goodput, samples_per_s scaled by `scale`, named `type`. Returns the shortest predicted finish.
double add_learned_options(PlanJob& j, const GoodputModel& m, int node_size, int cap, int cur, double scale,
                           const std::string& type);

// Where a job's speed on type `target` comes from, given how many observations it has on each type
// (`observed`) and the types' speeds (`types`, TypeLearn::speed): the target itself when it was
// observed there (scale 1); else the type it was observed on most (ties: the first name in order),
// scaled by speed(target) / speed(source); a job observed nowhere: no source, scale speed(target) /
// the fastest speed. One rule for plan's learned jobs and the live controller (live.cpp).
struct TypeProjection {
  std::string source;  // "" when the job was observed nowhere
  double scale = 1.0;
};
TypeProjection project_type(const std::map<std::string, int>& observed, const std::vector<TypeLearn>& types,
                            const std::string& target);

// expand_learned (plan.h) on a request with types: per type the job may run on, options from that
// type's observations, or projected from the type it ran on most by their speeds; a job that has
// not run gets one configuration on each type, valued by its speed there.
void expand_learned_typed(PlanRequest& req);

// The nodes of a typed request's jobs (Plan::nodes): each type's jobs on that type's nodes, node
// indices counted across the types in order; empty when no type has nodes.
std::vector<std::vector<int>> place_typed(const PlanRequest& req, const Plan& plan);

}  // namespace edp::autoscale::detail
