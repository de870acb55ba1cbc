// The pure half of the colocated communicator (see colocated.h): grouping ranks by (host, GPU),
// the per-rank step program of the hierarchical allreduce and its chunking. In a build without
// CUDA it also provides the factory, which explains why the backend is unavailable.
#include <algorithm>
#include <map>

#include "edp/comm/colocated.h"
#include "edp/config.h"
#include "edp/core/error.h"

namespace edp::comm {

ColocatedGroups plan_colocated_groups(const std::vector<ColocationKey>& keys, int rank, int max_group) {
  const int n = static_cast<int>(keys.size());
  EDP_CHECK(rank >= 0 && rank < n, "plan_colocated_groups: rank ", rank, " of ", n);
  ColocatedGroups g;
  g.rank = rank;
  g.world_size = n;
  // Groups in order of first appearance = order of their lowest world rank.
  std::map<std::pair<std::string, std::string>, int> index;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < n; ++r) {
    EDP_CHECK(!keys[r].gpu.empty(), "rank ", r, " reported no GPU; the colocated communicator needs a CUDA device on every rank");
    auto [it, fresh] = index.try_emplace({keys[r].host, keys[r].gpu}, static_cast<int>(groups.size()));
    if (fresh) groups.emplace_back();
    groups[static_cast<size_t>(it->second)].push_back(r);
  }
  g.num_groups = static_cast<int>(groups.size());
  for (int k = 0; k < g.num_groups; ++k) {
    const auto& m = groups[static_cast<size_t>(k)];
    EDP_CHECK(static_cast<int>(m.size()) <= max_group, m.size(), " ranks share GPU ", keys[m[0]].gpu, " on ", keys[m[0]].host,
              ": more than the ", max_group, " clients MPS allows per GPU");
    g.leaders.push_back(m.front());
    if (std::find(m.begin(), m.end(), rank) != m.end()) {
      g.group = k;
      g.members = m;
      g.group_size = static_cast<int>(m.size());
      g.group_rank = static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
      g.leader = m.front();
    }
  }
  g.leader_index = g.is_leader() ? g.group : -1;
  return g;
}

const char* colocated_step_name(ColocatedStep s) {
  switch (s) {
    case ColocatedStep::CopyToStaging: return "copy-to-staging";
    case ColocatedStep::GroupBarrier: return "group-barrier";
    case ColocatedStep::LeaderReduce: return "leader-reduce";
    case ColocatedStep::LeadersAllreduce: return "leaders-allreduce";
    case ColocatedStep::Scale: return "scale";
    case ColocatedStep::CopyResultOwn: return "copy-result-own";
    case ColocatedStep::CopyResultLeader: return "copy-result-from-leader";
  }
  return "?";
}

std::vector<ColocatedStep> colocated_allreduce_steps(const ColocatedGroups& g, ReduceOp op) {
  using S = ColocatedStep;
  std::vector<S> s;
  if (g.is_leader()) {
    s.push_back(S::GroupBarrier);  // members' events are recorded
    s.push_back(S::LeaderReduce);
    if (g.num_groups > 1) s.push_back(S::LeadersAllreduce);
    if (op == ReduceOp::Avg && g.world_size > 1) s.push_back(S::Scale);
    s.push_back(S::CopyResultOwn);
    s.push_back(S::GroupBarrier);  // the result event is recorded
  } else {
    s.push_back(S::CopyToStaging);
    s.push_back(S::GroupBarrier);
    s.push_back(S::GroupBarrier);
    s.push_back(S::CopyResultLeader);
  }
  return s;
}

std::vector<std::pair<int64_t, int64_t>> colocated_chunks(int64_t count, size_t elem_size, size_t capacity_bytes) {
  EDP_CHECK(elem_size > 0 && capacity_bytes >= elem_size, "colocated_chunks: staging of ", capacity_bytes,
            " bytes cannot hold one element of ", elem_size);
  const int64_t per = static_cast<int64_t>(capacity_bytes / elem_size);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t off = 0; off < count; off += per) out.emplace_back(off, std::min(per, count - off));
  return out;
}

#if !EDP_HAVE_CUDA
bool colocated_available() { return false; }
std::unique_ptr<Communicator> make_colocated_communicator(const Communicator&, ColocatedOptions) {
  throw Error("the colocated communicator needs a CUDA build of edp (configure with nvcc present, EDP_CUDA=ON); "
              "use the world (MPI) communicator instead");
}
#endif

}  // namespace edp::comm
