// The knob registry: every EDP_* environment variable edp reads is defined once, in the table in
// src/core/knobs.cpp (name, type, default, help, area), and read through the typed accessors
// below. A malformed value is an edp::Error naming the variable, the value and what is expected
// (never silently ignored). docs/knobs.md is generated from the same table (`edp-knobs
// --markdown`; a test fails when the two differ).
//
// The accessors read the environment when called (tests and edprun's rank shim change it at run
// time); code on a hot path keeps the value in a function-local static.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace edp::knobs {

enum class Type { Bool, Int, Double, String, Enum };

struct Knob {
  const char* name;     // "EDP_NUM_THREADS"
  Type type;
  const char* def;      // the default as text; "" when the default depends on the context
  const char* help;     // one or more sentences; says what an empty default means
  const char* area;     // the layer or program that reads it: "core", "comm", "launch"...
  const char* choices;  // Enum: "a|b|c"; otherwise ""
  int64_t min = INT64_MIN, max = INT64_MAX;  // Int, Double: the accepted range
  bool internal = false;  // set by edprun for its ranks rather than by users
};

// Every registered knob, in the table's order.
const std::vector<Knob>& all();
// The knob called `name`; an edp::Error if none is (a typo in edp's own code).
const Knob& find(std::string_view name);

// True when the variable is set to a non-empty value.
bool is_set(std::string_view name);
// The value as text ("" when unset or empty); no validation beyond the name being registered.
std::string raw(std::string_view name);

// Typed reads: the environment's value when set (validated against the knob's type, range and
// choices), else `fallback` where given, else the knob's default. get_bool accepts
// 1/0/true/false/yes/no/on/off; an Enum is read with get_string.
bool get_bool(std::string_view name);
int64_t get_int(std::string_view name);
int64_t get_int(std::string_view name, int64_t fallback);
double get_double(std::string_view name);
std::string get_string(std::string_view name);
std::string get_string(std::string_view name, const std::string& fallback);

// Checks every EDP_* variable that is set against its knob's type, range and choices (a number is
// finite; a Double knob's range is min..max like an Int's); an edp::Error naming the first bad one.
// Programs call it when they start (edprun, elastic::Job), so that a typo fails at once instead of
// at the first use of the knob, perhaps hours later (EDP_SPAWN_TIMEOUT at the first grow).
void check_environment();

// "bool", "int", "double", "string", "enum".
const char* type_name(Type t);
// The Markdown table of all knobs, grouped by area (docs/knobs.md's body).
std::string markdown();

// Open MPI's view of the job: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, each -1 when
// unset. A malformed value is an edp::Error naming the variable. The one place edp parses them.
struct OmpiWorld {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  bool present() const { return rank >= 0; }
};
OmpiWorld ompi_world();

// EDP_LAUNCH_HOSTS ("a:2,b:2,c:1"), which edprun gives the ranks of an elastic job on several
// hosts: the hosts in edprun's order and the most ranks each takes. Ranks fill them in that order
// (edprun's plan, Open MPI's by-slot mapping), so the host of any rank at any size follows, and an
// in-place grow places its new ranks where a restart at the grown size would. Empty when unset;
// a malformed value is an edp::Error naming the variable.
struct LaunchHost {
  std::string name;
  int capacity = 0;
};
std::vector<LaunchHost> launch_hosts();
// Where rank `rank` of a job of `size` ranks runs when the ranks fill `hosts` in order: the host's
// index (-1 when `size` exceeds their capacity), the rank's local rank there and the ranks there.
struct HostSlot {
  int host = -1;
  int local_rank = 0;
  int local_size = 0;
};
HostSlot fill_slot(const std::vector<LaunchHost>& hosts, int size, int rank);

}  // namespace edp::knobs
