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

std::string shown(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 120) s = s.substr(0, 100) + "... (" + std::to_string(s.size()) + " characters)";
  return s;
}

namespace {

// The parser of parse() and parse_each(). With `key`, the elements of the root object's array
// field `key` are dropped from the tree as soon as each is complete, after being handed to `each`
// when it is given.
Json parse_impl(const std::string& text, const std::string& where, const std::string* key,
                const std::function<void(size_t, const Json&)>* each) {
  // A stack of the keys seen in each open object: a repeated key is refused (nlohmann keeps the
  // last one silently, so a request that says "gpus" twice would mean whichever came last).
  std::vector<std::set<std::string>> keys;
  std::string duplicate, root_key;
  bool in_target = false;
  size_t index = 0;
  const Json::parser_callback_t watch = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    using E = Json::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth >= kMaxDepth)
      throw DataError(where + ": nested more than " + std::to_string(kMaxDepth) +
                      " arrays or objects deep; no document edp reads is");
    if (ev == E::object_start) keys.emplace_back();
    else if (ev == E::object_end && !keys.empty()) keys.pop_back();
    else if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    if (!key) return true;
    if (ev == E::key && depth == 1) root_key = parsed.get<std::string>();
    if (depth == 1 && ev == E::array_start) in_target = root_key == *key && keys.size() == 1;
    if (depth == 1 && ev == E::array_end) in_target = false;
    if (in_target && depth == 2 && (ev == E::object_end || ev == E::array_end || ev == E::value)) {
      if (each) (*each)(index++, parsed);
      return false;  // not kept in the tree
    }
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

}  // namespace

Json parse(const std::string& text, const std::string& where) { return parse_impl(text, where, nullptr, nullptr); }

void parse_each(const std::string& text, const std::string& where, const std::string& key,
                const std::function<void(const Json& header)>& header,
                const std::function<void(size_t index, const Json& element)>& each) {
  header(parse_impl(text, where, &key, nullptr));
  parse_impl(text, where, &key, &each);
}

std::optional<Json> try_parse(const std::string& text) {
  try {
    return parse(text, "");
  } catch (const DataError&) {
    return std::nullopt;
  }
}

Fields::Fields(const Json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj_.is_object()) throw DataError(where_ + ": must be a JSON object, got " + shown(obj_));
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
  const std::string want = "must be an integer in " + range_text(double(lo), double(hi)) + ", got " + shown(v);
  if (!v.is_number_integer()) fail(key, want);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(key, want);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail(key, want);
  return x;
}

double Fields::to_number(std::string_view key, const Json& v, double lo, double hi) const {
  if (!v.is_number()) fail(key, "must be a number, got " + shown(v));
  const double x = v.get<double>();
  const int cls = std::fpclassify(x);
  if (cls == FP_SUBNORMAL) fail(key, "must be a normal number, got the denormal " + shown(v));
  if (!std::isfinite(x) || x < lo || x > hi)
    fail(key, "must be a finite number in " + range_text(lo, hi) + ", got " + shown(v));
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
  if (!v.is_string()) fail(key, "must be a string, got " + shown(v));
  return v.get<std::string>();
}
std::string Fields::text(std::string_view key, const std::string& def) const { return has(key) ? text(key) : def; }

bool Fields::boolean(std::string_view key, bool def) const {
  if (!has(key)) return def;
  const Json& v = obj_.at(std::string(key));
  if (!v.is_boolean()) fail(key, "must be true or false, got " + shown(v));
  return v.get<bool>();
}

Fields Fields::object(std::string_view key) const {
  const Json& v = need(key);
  if (!v.is_object()) fail(key, "must be a JSON object, got " + shown(v));
  return Fields(v, where_ + ": field '" + std::string(key) + "'");
}

std::optional<Fields> Fields::object_if(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return object(key);
}

const Json& Fields::array(std::string_view key) const {
  const Json& v = need(key);
  if (!v.is_array()) fail(key, "must be an array, got " + shown(v));
  return v;
}

Fields Fields::element(std::string_view key, size_t i) const {
  const Json& a = array(key);
  const std::string name = std::string(key) + "[" + std::to_string(i) + "]";
  if (!a.at(i).is_object()) fail(name, "must be a JSON object, got " + shown(a.at(i)));
  return Fields(a.at(i), where_ + ": field '" + name + "'");
}

}  // namespace edp::json_fields
