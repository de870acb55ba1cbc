// The command-line toolkit (edp/core/cli.h). CLI11 parses; this file adds the environment rule,
// the checks on values wherever they came from, and the usage text.
#include "edp/core/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>

#include "core/text.h"
#include "edp/core/error.h"

namespace edp::cli {

namespace {

using text::parse_double;
using text::parse_int;

std::string num_text(double x) {
  char buf[32];
  if (x == std::floor(x) && std::abs(x) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string range_text(const OptionDef& d) {
  const bool top = std::isinf(d.hi) || d.hi >= 1e300;
  const std::string what = d.integer ? "an integer" : "a number";
  return top ? what + " >= " + num_text(d.lo) : what + " in [" + num_text(d.lo) + ", " + num_text(d.hi) + "]";
}

}  // namespace

Options::Options(std::string program, std::string description, std::string env_prefix)
    : program_(std::move(program)), description_(std::move(description)), prefix_(std::move(env_prefix)) {}

Options& Options::add(const OptionDef& def) {
  EDP_CHECK(std::find(order_.begin(), order_.end(), def.name) == order_.end(), "option --", def.name,
            " is defined twice for ", program_);
  order_.push_back(def.name);
  opts_.push_back(Opt{def, def.flag ? "0" : def.def, "default"});
  return *this;
}

Options& Options::add(const std::string& name, const std::string& def, const std::string& help) {
  OptionDef d;
  d.name = name;
  d.def = def;
  d.help = help;
  return add(d);
}

Options& Options::add_flag(const std::string& name, const std::string& help) {
  OptionDef d;
  d.name = name;
  d.help = help;
  d.flag = true;
  return add(d);
}

Options& Options::range(double lo, double hi) {
  EDP_CHECK(!opts_.empty() && lo <= hi, "range() needs an option before it and lo <= hi");
  opts_.back().def.lo = lo;
  opts_.back().def.hi = hi;
  return *this;
}

Options& Options::int_range(int64_t lo, int64_t hi) {
  range(static_cast<double>(lo), static_cast<double>(hi));
  opts_.back().def.integer = true;
  return *this;
}

Options& Options::choices(std::vector<std::string> words) {
  EDP_CHECK(!opts_.empty(), "choices() needs an option before it");
  opts_.back().def.choices = std::move(words);
  return *this;
}

Options& Options::run_setting() {
  EDP_CHECK(!opts_.empty(), "run_setting() needs an option before it");
  opts_.back().def.run_setting = true;
  return *this;
}

Options& Options::add_accept_config_change() {
  add_flag("accept-config-change",
           "resume from a checkpoint written with other settings of the training (a deliberate change, e.g. of "
           "--lr); the run's own settings (how long, how often, where) may change without it");
  return run_setting();
}

std::vector<std::string> Options::run_settings() const {
  std::vector<std::string> out;
  for (const Opt& o : opts_)
    if (o.def.run_setting) out.push_back("--" + o.def.name);
  return out;
}

Options& Options::add_positional(const std::string& name, const std::string& help, bool required) {
  positionals_.push_back(Positional{name, help, "", required, false});
  return *this;
}

std::string Options::env_name(const std::string& name) const {
  std::string e = prefix_;
  for (char c : name) e += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return e;
}

std::string Options::check_value(const Opt& o) const {
  const OptionDef& d = o.def;
  const std::string& v = o.value;
  const std::string who = "--" + d.name + " (" + o.source + ")";
  if (d.flag) {
    if (v != "0" && v != "1" && v != "true" && v != "false") return who + " expects 0/1/true/false, got '" + v + "'";
    return "";
  }
  if (v.empty() && o.source == "default") return "";  // no default: not set
  if (!d.choices.empty()) {
    if (std::find(d.choices.begin(), d.choices.end(), v) != d.choices.end()) return "";
    return who + " must be one of " + text::join(d.choices, ", ") + ", got '" + v + "'";
  }
  double x = 0;
  const bool ranged = d.lo <= d.hi;
  const bool numeric_default = parse_double(d.def, x);
  if (!ranged && !numeric_default) return "";
  if (d.integer) {
    int64_t i = 0;
    if (!parse_int(v, i)) return who + " expects an integer, got '" + v + "'";
    x = static_cast<double>(i);
  } else if (!parse_double(v, x)) {
    return who + " expects a number, got '" + v + "'";
  }
  // Unranged numbers may be inf or nan (the program checks what it needs, naming its own rule).
  if (ranged && (std::isnan(x) || x < d.lo || x > d.hi)) return who + " must be " + range_text(d) + ", got '" + v + "'";
  return "";
}

ParseResult Options::try_parse(int argc, char** argv) {
  // Arguments after "--" are the program's own; --help anywhere before them prints usage().
  std::vector<const char*> args{argc > 0 ? argv[0] : program_.c_str()};
  std::vector<std::string> given;  // the options named on the command line
  rest_.clear();
  for (Opt& o : opts_) {  // a second parse starts from the defaults again
    o.value = o.def.flag ? "0" : o.def.def;
    o.source = "default";
  }
  for (Positional& p : positionals_) p.value.clear(), p.given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) rest_.push_back(argv[j]);
      break;
    }
    if (a == "--help" || a == "-h") return ParseResult{ParseResult::Help, ""};
    if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      // Given twice, one of the two values would silently win (or the second would be taken for a
      // value of the first): refused, naming it.
      if (std::find(given.begin(), given.end(), name) != given.end() &&
          std::any_of(opts_.begin(), opts_.end(), [&](const Opt& o) { return o.def.name == name; }))
        return ParseResult{ParseResult::Error, "option --" + name + " is given twice; give it once"};
      given.push_back(name);
    }
    args.push_back(argv[i]);
  }
  CLI::App app{description_, program_};
  app.set_help_flag();
  app.allow_extras(true);
  std::map<std::string, std::string> vals;
  for (const Opt& o : opts_) {
    const std::string& name = o.def.name;
    if (o.def.flag)
      app.add_flag("--" + name + "{1}", vals[name], o.def.help)->envname(env_name(name));
    else
      app.add_option("--" + name, vals[name], o.def.help)->envname(env_name(name));
  }
  for (Positional& p : positionals_) app.add_option(p.name, p.value, p.help);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    std::string m = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr)
      for (const auto& g : given)
        if (m.find("--" + g) != std::string::npos) m = "option --" + g + " needs a value";
    return ParseResult{ParseResult::Error, m};
  }
  for (const auto& extra : app.remaining()) {
    if (extra.rfind("--", 0) == 0) return ParseResult{ParseResult::Error, "unknown option " + extra.substr(0, extra.find('='))};
    return ParseResult{ParseResult::Error, "unexpected argument '" + extra + "'"};
  }
  for (Opt& o : opts_) {
    const std::string& name = o.def.name;
    if (app.count("--" + name) == 0) continue;
    o.value = vals[name];
    const bool on_command_line = std::find(given.begin(), given.end(), name) != given.end();
    o.source = on_command_line ? "flag" : "env " + env_name(name);
  }
  for (Positional& p : positionals_) {
    p.given = app.count(p.name) > 0;
    if (p.required && !p.given) return ParseResult{ParseResult::Error, "missing argument " + p.name};
  }
  // Every value is checked, wherever it came from, so that a typo fails before any work starts.
  for (const Opt& o : opts_)
    if (std::string why = check_value(o); !why.empty()) return ParseResult{ParseResult::Error, why};
  return ParseResult{};
}

void Options::parse(int argc, char** argv) {
  const ParseResult r = try_parse(argc, argv);
  if (r.kind == ParseResult::Help) {
    std::cout << usage();
    std::exit(0);
  }
  if (r.kind == ParseResult::Error) {
    std::cerr << program_ << ": " << r.message << "\n(run " << program_ << " --help for the options)\n";
    std::exit(2);
  }
}

const Options::Opt& Options::get(const std::string& name) const {
  for (const Opt& o : opts_)
    if (o.def.name == name) return o;
  throw Error("option --" + name + " was not declared for " + program_);
}

std::string Options::str(const std::string& name) const { return get(name).value; }

std::vector<std::pair<std::string, std::string>> Options::values() const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const Opt& o : opts_) v.emplace_back(o.def.name, o.value);
  return v;
}

int64_t Options::i64(const std::string& name) const {
  const std::string& v = get(name).value;
  int64_t r = 0;
  EDP_CHECK(parse_int(v, r), "--", name, " expects an integer, got '", v, "'");
  return r;
}

double Options::f64(const std::string& name) const {
  const std::string& v = get(name).value;
  double r = 0;
  EDP_CHECK(parse_double(v, r), "--", name, " expects a number, got '", v, "'");
  return r;
}

bool Options::flag(const std::string& name) const {
  const std::string& v = get(name).value;
  return v == "1" || v == "true";
}

std::string Options::source(const std::string& name) const { return get(name).source; }

std::string Options::positional(const std::string& name) const {
  for (const Positional& p : positionals_)
    if (p.name == name) return p.value;
  throw Error("argument " + name + " was not declared for " + program_);
}

std::string Options::usage() const {
  std::ostringstream os;
  os << "usage: " << program_;
  for (const Positional& p : positionals_) os << (p.required ? " " + p.name : " [" + p.name + "]");
  os << " [options]\n" << description_ << "\n";
  for (const Positional& p : positionals_) os << "  " << p.name << std::string(p.name.size() < 22 ? 22 - p.name.size() : 1, ' ') << p.help << "\n";
  os << "\noptions (each also read from its environment variable):\n";
  for (const Opt& o : opts_) {
    const OptionDef& d = o.def;
    std::string lhs = "  --" + d.name + (d.flag ? "" : " V");
    os << lhs << std::string(lhs.size() < 24 ? 24 - lhs.size() : 1, ' ') << d.help;
    if (!d.choices.empty()) {
      os << " (" << text::join(d.choices, "|") << ")";
    } else if (!d.flag && d.lo <= d.hi) {
      os << " (" << range_text(d) << ")";
    }
    if (!d.flag) os << " (default: " << (d.def.empty() ? "\"\"" : d.def) << ")";
    os << " [" << env_name(d.name) << "]\n";
  }
  return os.str();
}

}  // namespace edp::cli
