// The worker counts a job may be rescaled to, as the launcher tells the ranks.
//
// edprun knows which sizes it can start the job at (hosts, GPUs x ranks per GPU, cores); the
// ranks do not. So edprun passes them in EDP_ALLOWED_WORKERS, and rank 0 refuses a rescale
// request for any other count before a rank acts on it (a controller's mistake never stops a
// job). The syntax is a comma-separated list of counts and inclusive ranges, ascending:
//   "1-8"        1, 2, ..., 8
//   "1-4,6,8"    1, 2, 3, 4, 6, 8
// Empty means "not launched by edprun": any count is accepted.
#pragma once
#include <string>
#include <vector>

namespace edp::elastic {

// Parses EDP_ALLOWED_WORKERS. Returns the counts, ascending, without duplicates ({} for an empty
// string). Throws edp::Error naming the text and the bad item for anything else: non-numbers,
// counts below 1, ranges whose end is below their start, more than kMaxAllowedWorkers counts.
std::vector<int> parse_allowed_workers(const std::string& text);

// The shortest text parse_allowed_workers() reads back as `counts` (sorted, deduplicated):
// runs of three or more consecutive counts become ranges ({1,2,3,4,6,8} -> "1-4,6,8").
std::string format_allowed_workers(std::vector<int> counts);

// True when `workers` may run: `allowed` is empty (any) or contains it.
bool workers_allowed(const std::vector<int>& allowed, int workers);

// The largest number of counts the list may expand to (edprun never plans beyond it).
constexpr int kMaxAllowedWorkers = 4096;

}  // namespace edp::elastic
