// The JSON field reader (json_fields.h).
#include "core/json_fields.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "edp/core/error.h"

namespace edp::json_fields {

namespace {

std::string range_text(double lo, double hi) {
  auto num = [](double x) {
    if (std::isinf(x)) return std::string(x > 0 ? "inf" : "-inf");
    char buf[32];
    if (x == std::floor(x) && std::abs(x) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", x);
    else std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  std::string s = "[";  // appended piece by piece: GCC 12 warns (-Wrestrict) on the chained operator+
  s += num(lo);
  s += ", ";
  s += num(hi);
  s += "]";
  return s;
}

}  // namespace

Json parse(const std::string& text, const std::string& where) {
  // A stack of the keys seen in each open object: a repeated key is refused (nlohmann keeps the
  // last one silently, so a request that says "gpus" twice would mean whichever came last).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const Json::parser_callback_t watch = [&](int /*depth*/, Json::parse_event_t ev, Json& parsed) {
    if (ev == Json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == Json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, watch);
  } catch (const Json::exception& e) {
    // parse_error carries "at line L, column C"; out_of_range: a number too large for a double.
    std::string what = e.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw DataError(where + ": not valid JSON: " + what);
  }
  if (!duplicate.empty()) throw DataError(where + ": field '" + duplicate + "' is given twice in one object");
  return j;
}

Fields::Fields(const Json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj_.is_object()) throw DataError(where_ + ": must be a JSON object, got " + obj_.dump());
}

void Fields::allow(std::initializer_list<std::string_view> names) const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    bool ok = false;
    for (std::string_view n : names) ok = ok || it.key() == n;
    if (ok) continue;
    std::string list;
    for (std::string_view n : names) (list += list.empty() ? "" : ", ") += n;
    fail(it.key(), "unknown field (allowed: " + list + ")");
  }
}

void Fields::fail(std::string_view key, const std::string& what) const {
  throw DataError(where_ + ": field '" + std::string(key) + "': " + what);
}

const Json& Fields::need(std::string_view key) const {
  if (!obj_.contains(key)) fail(key, "missing (required)");
  return obj_.at(std::string(key));
}

int64_t Fields::to_integer(std::string_view key, const Json& v, int64_t lo, int64_t hi) const {
  const std::string want = "must be an integer in " + range_text(double(lo), double(hi)) + ", got " + v.dump();
  if (!v.is_number_integer()) fail(key, want);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(key, want);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail(key, want);
  return x;
}

double Fields::to_number(std::string_view key, const Json& v, double lo, double hi) const {
  if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
  const double x = v.get<double>();
  const int cls = std::fpclassify(x);
  if (cls == FP_SUBNORMAL) fail(key, "must be a normal number, got the denormal " + v.dump());
  if (!std::isfinite(x) || x < lo || x > hi)
    fail(key, "must be a finite number in " + range_text(lo, hi) + ", got " + v.dump());
  return x;
}

int64_t Fields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  return to_integer(key, need(key), lo, hi);
}
int64_t Fields::integer(std::string_view key, int64_t lo, int64_t hi, int64_t def) const {
  return has(key) ? integer(key, lo, hi) : def;
}
double Fields::number(std::string_view key, double lo, double hi) const { return to_number(key, need(key), lo, hi); }
double Fields::number(std::string_view key, double lo, double hi, double def) const {
  return has(key) ? number(key, lo, hi) : def;
}

std::string Fields::text(std::string_view key) const {
  const Json& v = need(key);
  if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
  return v.get<std::string>();
}
std::string Fields::text(std::string_view key, const std::string& def) const { return has(key) ? text(key) : def; }

bool Fields::boolean(std::string_view key, bool def) const {
  if (!has(key)) return def;
  const Json& v = obj_.at(std::string(key));
  if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

Fields Fields::object(std::string_view key) const {
  const Json& v = need(key);
  if (!v.is_object()) fail(key, "must be a JSON object, got " + v.dump());
  return Fields(v, where_ + ": field '" + std::string(key) + "'");
}

std::optional<Fields> Fields::object_if(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return object(key);
}

const Json& Fields::array(std::string_view key) const {
  const Json& v = need(key);
  if (!v.is_array()) fail(key, "must be an array, got " + v.dump());
  return v;
}

Fields Fields::element(std::string_view key, size_t i) const {
  const Json& a = array(key);
  const std::string name = std::string(key) + "[" + std::to_string(i) + "]";
  if (!a.at(i).is_object()) fail(name, "must be a JSON object, got " + a.at(i).dump());
  return Fields(a.at(i), where_ + ": field '" + name + "'");
}

}  // namespace edp::json_fields
