// The small text helpers that edp's parsers and messages share (flags, knobs, EDP_ALLOWED_WORKERS,
// hostfiles, Slurm's output, nvidia-smi's, launcher messages): one definition each, so that a
// value reads the same wherever it is written. Callers keep their own error messages; these only
// say whether a text is well formed.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace edp::text {

// isspace()'s characters in the "C" locale.
inline constexpr std::string_view kSpace = " \t\n\v\f\r";

// `s` without the leading and trailing characters of `chars`.
inline std::string trim(std::string_view s, std::string_view chars = kSpace) {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(chars) - b + 1));
}

// The items of `v` (strings or integers) with `sep` between them: "a,b,c".
template <typename T>
std::string join(const std::vector<T>& v, std::string_view sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    if constexpr (std::is_integral_v<T>) out += std::to_string(v[i]);
    else out += v[i];
  }
  return out;
}

// The whole of `s` as a base-10 integer (strtoll: an optional sign, leading blanks allowed):
// false for an empty text, anything after the number, or a value outside int64_t.
inline bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (!end || *end != '\0' || errno == ERANGE) return false;
  out = v;
  return true;
}

// The whole of `s` as a number (strtod): false for an empty text or anything after the number.
// The value may be infinite or NaN ("inf", "nan", an overflow); callers that refuse those check.
inline bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

// A count written with decimal digits only (no sign, no blanks) that fits `Int` (int: at most 9
// digits; int64_t: 18): false for anything else. Counts in lists that people write (hostfile
// slots, Slurm node ranges, EDP_ALLOWED_WORKERS), where "+3" or " 3" is a typo rather than a
// number, and sizes and offsets edp writes itself.
template <typename Int, typename = std::enable_if_t<std::is_same_v<Int, int> || std::is_same_v<Int, int64_t>>>
bool parse_digits(std::string_view s, Int& out) {
  constexpr size_t kMaxDigits = std::is_same_v<Int, int> ? 9 : 18;
  if (s.empty() || s.size() > kMaxDigits) return false;
  Int v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

}  // namespace edp::text
