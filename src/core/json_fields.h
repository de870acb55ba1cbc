// Reading JSON that people write (job specs, plan requests, tables edp keeps): one parser and one
// field reader, so that every refusal reads the same and names where it is:
//   "<where>: field 'max_gpus': must be an integer in [1, 4096], got 1.5"
// parse() refuses what nlohmann's parser lets through silently: a key given twice in one object
// (the parser keeps the last), and gives syntax errors with their line and column. Numbers must be
// finite and normal (a denormal such as 5e-324 is refused: no real quantity is that small, and
// dividing by one overflows), integers must be integers (1.5 and 1e30 are not) within their range.
// Nesting deeper than kMaxDepth arrays and objects is refused while parsing (no document edp
// reads needs more than a handful; a deep one would cost stack and memory in whoever walks it);
// the size of a document is limited where it is read (files::read_file's limits).
// Every error is an edp::DataError.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace edp::json_fields {

using Json = nlohmann::json;

constexpr int kMaxDepth = 64;

// Parses `text`; `where` names the document in errors ("plan request req.json").
Json parse(const std::string& text, const std::string& where);
// Parses `text` like parse() but never holds the elements of the top-level array field `key` (a
// plan request's "jobs") all at once: first the document without them is handed to `header` (the
// array is there, empty), then each element, in order, to `each` — so that reading an element
// may depend on any other field wherever it stands in the text (the text is parsed twice). A
// document of 10^5 jobs never exists whole as a tree.
void parse_each(const std::string& text, const std::string& where, const std::string& key,
                const std::function<void(const Json& header)>& header,
                const std::function<void(size_t index, const Json& element)>& each);
// The same for readers that skip what does not parse (a torn line, a record being written):
// nullopt instead of an error.
std::optional<Json> try_parse(const std::string& text);

// A value as errors show it: its JSON text, shortened beyond about a hundred characters.
std::string shown(const Json& v);

// One JSON object and where it is, with typed, range-checked access to its fields.
class Fields {
 public:
  Fields(const Json& obj, std::string where);  // DataError unless obj is an object

  const std::string& where() const { return where_; }
  const Json& json() const { return obj_; }
  bool has(std::string_view key) const { return obj_.contains(key); }
  // Refuses any field not listed, naming it and listing the allowed ones.
  void allow(std::initializer_list<std::string_view> names) const;
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;

  // Required (throws when missing) and optional (def when missing) fields.
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;
  int64_t integer(std::string_view key, int64_t lo, int64_t hi, int64_t def) const;
  double number(std::string_view key, double lo, double hi) const;
  double number(std::string_view key, double lo, double hi, double def) const;
  std::string text(std::string_view key) const;
  std::string text(std::string_view key, const std::string& def) const;
  bool boolean(std::string_view key, bool def) const;
  // A nested object; its `where` is "<where>: field 'key'".
  Fields object(std::string_view key) const;
  std::optional<Fields> object_if(std::string_view key) const;
  // An array (required); elements are read by the caller, e.g. with element().
  const Json& array(std::string_view key) const;
  // Element i of the array field `key` as an object, where = "<where>: field 'key[i]'".
  Fields element(std::string_view key, size_t i) const;

 private:
  const Json& need(std::string_view key) const;
  int64_t to_integer(std::string_view key, const Json& v, int64_t lo, int64_t hi) const;
  double to_number(std::string_view key, const Json& v, double lo, double hi) const;
  const Json& obj_;
  std::string where_;
};

}  // namespace edp::json_fields
