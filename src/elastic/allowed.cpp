// EDP_ALLOWED_WORKERS: parsing and formatting (allowed.h).
#include "edp/elastic/allowed.h"

#include <algorithm>
#include <string>

#include "core/text.h"
#include "edp/core/error.h"

namespace edp::elastic {

namespace {

// A count: digits only, 1..kMaxAllowedWorkers-sized values (a longer number is garbage, not a size).
int parse_count(const std::string& item, const std::string& text) {
  int v = 0;
  if (!::edp::text::parse_digits(item, v))
    throw Error("EDP_ALLOWED_WORKERS '" + text + "': '" + item +
                "' is not a worker count (expected counts and ranges such as 1-4,6,8)");
  if (v < 1) throw Error("EDP_ALLOWED_WORKERS '" + text + "': worker counts start at 1, got " + item);
  return v;
}

// Blanks and tabs only: a newline inside the list is not a separator.
std::string trim(const std::string& s) { return ::edp::text::trim(s, " \t"); }

}  // namespace

std::vector<int> parse_allowed_workers(const std::string& text) {
  std::vector<int> out;
  if (trim(text).empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(parse_count(item, text));
    } else {
      const int lo = parse_count(trim(item.substr(0, dash)), text);
      const int hi = parse_count(trim(item.substr(dash + 1)), text);
      if (hi < lo) throw Error("EDP_ALLOWED_WORKERS '" + text + "': range '" + item + "' ends before it starts");
      if (hi - lo >= kMaxAllowedWorkers)
        throw Error("EDP_ALLOWED_WORKERS '" + text + "': range '" + item + "' is longer than " +
                    std::to_string(kMaxAllowedWorkers) + " counts");
      for (int v = lo; v <= hi; ++v) out.push_back(v);
    }
    if (out.size() > static_cast<size_t>(kMaxAllowedWorkers))
      throw Error("EDP_ALLOWED_WORKERS '" + text.substr(0, 80) + "...': more than " +
                  std::to_string(kMaxAllowedWorkers) + " worker counts");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_allowed_workers(std::vector<int> counts) {
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::string s;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j + 1 < counts.size() && counts[j + 1] == counts[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(counts[i]);
    if (j > i) {
      s += j - i >= 2 ? '-' : ',';  // a run of three or more is a range
      s += std::to_string(counts[j]);
    }
    i = j + 1;
  }
  return s;
}

bool workers_allowed(const std::vector<int>& allowed, int workers) {
  return allowed.empty() || std::binary_search(allowed.begin(), allowed.end(), workers);
}

}  // namespace edp::elastic
