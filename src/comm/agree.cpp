// comm::check_agreement (edp/comm/agree.h).
#include "edp/comm/agree.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "edp/comm/communicator.h"
#include "edp/comm/stall.h"
#include "edp/core/error.h"

namespace edp::comm {

namespace {
int64_t digest(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

std::string rank_list(const std::vector<int>& v) {
  std::string s = v.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}
}  // namespace

void check_agreement(Communicator& world, const std::vector<Setting>& settings, const std::string& what) {
  StallLabel label("settings check: " + what);
  const int W = world.size();
  const size_t n = settings.size();
  // 1. The same list of names (else the programs differ, and step 2's layout would not match).
  std::string names;
  for (const auto& [k, v] : settings) names += k + '\n';
  const int64_t mine[2] = {static_cast<int64_t>(n), digest(names)};
  std::vector<int64_t> all(2 * static_cast<size_t>(W));
  world.allgather(mine, all.data(), 2, DType::I64);
  for (int r = 0; r < W; ++r)
    if (all[2 * static_cast<size_t>(r)] != mine[0] || all[2 * static_cast<size_t>(r) + 1] != mine[1])
      throw Error("ranks disagree on which settings to compare (" + what + "): rank " + std::to_string(world.rank()) +
                  " has " + std::to_string(n) + " settings, rank " + std::to_string(r) + " has " +
                  std::to_string(all[2 * static_cast<size_t>(r)]) +
                  " or other names; every rank must run the same program and version");
  if (n == 0) return;
  // 2. A digest per value.
  std::vector<int64_t> h(n), hs(n * static_cast<size_t>(W));
  for (size_t i = 0; i < n; ++i) h[i] = digest(settings[i].second);
  world.allgather(h.data(), hs.data(), static_cast<int64_t>(n), DType::I64);
  std::vector<size_t> differ;
  for (size_t i = 0; i < n; ++i)
    for (int r = 0; r < W; ++r)
      if (hs[static_cast<size_t>(r) * n + i] != hs[i]) {
        differ.push_back(i);
        break;
      }
  if (differ.empty()) return;
  // 3. The differing values themselves, for the message (every rank computed the same `differ`).
  std::string blob;
  for (size_t i : differ) blob += settings[i].second + '\0';
  const int64_t len = static_cast<int64_t>(blob.size());
  const int64_t maxlen = world.allreduce_value<int64_t>(len, ReduceOp::Max);
  blob.resize(static_cast<size_t>(maxlen), '\0');
  std::string everyone(static_cast<size_t>(maxlen) * static_cast<size_t>(W), '\0');
  world.allgather(blob.data(), everyone.data(), maxlen, DType::U8);
  std::string msg = "ranks disagree on settings that must be the same on every rank (" + what + "):";
  for (size_t d = 0; d < differ.size(); ++d) {
    std::map<std::string, std::vector<int>> by_value;
    std::vector<std::string> order;  // values in the order of their first rank
    for (int r = 0; r < W; ++r) {
      const char* p = everyone.data() + static_cast<size_t>(r) * static_cast<size_t>(maxlen);
      for (size_t skip = 0; skip < d; ++skip) p += std::char_traits<char>::length(p) + 1;
      const std::string v(p);
      if (!by_value.count(v)) order.push_back(v);
      by_value[v].push_back(r);
    }
    msg += "\n  " + settings[differ[d]].first + ": ";
    for (size_t k = 0; k < order.size(); ++k)
      msg += (k ? "; " : "") + ("'" + order[k] + "' on ") + rank_list(by_value[order[k]]);
  }
  throw CollectiveError(msg, world.rank(), world.size());  // every rank computed the same message
}

}  // namespace edp::comm
