// Flag/environment option parsing (see options.h).
#include "edp/train/options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "edp/core/error.h"

namespace edp::train {

Options::Options(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

Options& Options::add(const std::string& name, const std::string& def, const std::string& help) {
  order_.push_back(name);
  opts_[name] = Opt{def, def, help, "default", false};
  return *this;
}

Options& Options::add_flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  opts_[name] = Opt{"0", "0", help, "default", true};
  return *this;
}

std::string Options::env_name(const std::string& name) {
  std::string e = "EDP_";
  for (char c : name) e += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return e;
}

void Options::parse(int argc, char** argv) {
  auto fail = [&](const std::string& msg) {
    std::cerr << program_ << ": " << msg << "\n(run " << program_ << " --help for the options)\n";
    std::exit(2);
  };
  // Arguments after "--" are the program's own; --help anywhere before them prints usage().
  std::vector<const char*> args{argc > 0 ? argv[0] : program_.c_str()};
  std::vector<std::string> given;  // the options named on the command line
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) rest_.push_back(argv[j]);
      break;
    }
    if (a == "--help" || a == "-h") {
      std::cout << usage();
      std::exit(0);
    }
    if (a.rfind("--", 0) == 0) given.push_back(a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
    args.push_back(argv[i]);
  }
  // CLI11 parses; each option also reads EDP_<NAME> (envname) when the flag is absent.
  CLI::App app{description_, program_};
  app.set_help_flag();
  app.allow_extras(true);
  std::map<std::string, std::string> vals;
  for (const auto& name : order_) {
    const Opt& o = opts_.at(name);
    if (o.is_flag)
      app.add_flag("--" + name + "{1}", vals[name], o.help)->envname(env_name(name));
    else
      app.add_option("--" + name, vals[name], o.help)->envname(env_name(name));
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    std::string m = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      for (const auto& g : given)
        if (m.find("--" + g) != std::string::npos) m = "option --" + g + " needs a value";
    }
    fail(m);
  }
  for (const auto& extra : app.remaining()) {
    if (extra.rfind("--", 0) == 0) fail("unknown option " + extra.substr(0, extra.find('=')));
    fail("unexpected argument '" + extra + "'");
  }
  for (const auto& name : order_) {
    Opt& o = opts_[name];
    if (app.count("--" + name) == 0) continue;
    o.value = vals[name];
    const bool on_command_line = std::find(given.begin(), given.end(), name) != given.end();
    o.source = on_command_line ? "flag" : "env " + env_name(name);
  }
  // Validate numeric options eagerly so that a typo fails before any work starts.
  for (auto& [name, o] : opts_) {
    if (o.is_flag && o.value != "0" && o.value != "1" && o.value != "true" && o.value != "false")
      fail("--" + name + " (" + o.source + ") expects 0/1/true/false, got '" + o.value + "'");
    if (!o.is_flag && !o.def.empty()) {
      char* end = nullptr;
      std::strtod(o.def.c_str(), &end);
      const bool numeric_default = end && *end == '\0';
      if (numeric_default) {
        std::strtod(o.value.c_str(), &end);
        if (o.value.empty() || !end || *end != '\0')
          fail("--" + name + " (" + o.source + ") expects a number, got '" + o.value + "'");
      }
    }
  }
}

const Options::Opt& Options::get(const std::string& name) const {
  auto it = opts_.find(name);
  EDP_CHECK(it != opts_.end(), "option --", name, " was not declared");
  return it->second;
}

std::string Options::str(const std::string& name) const { return get(name).value; }
std::vector<std::pair<std::string, std::string>> Options::values() const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const std::string& n : order_) v.emplace_back(n, get(n).value);
  return v;
}
int64_t Options::i64(const std::string& name) const {
  const std::string& v = get(name).value;
  char* end = nullptr;
  const long long r = std::strtoll(v.c_str(), &end, 10);
  EDP_CHECK(end && *end == '\0', "--", name, " expects an integer, got '", v, "'");
  return r;
}
double Options::f64(const std::string& name) const { return std::strtod(get(name).value.c_str(), nullptr); }
bool Options::flag(const std::string& name) const {
  const std::string& v = get(name).value;
  return v == "1" || v == "true";
}
std::string Options::source(const std::string& name) const { return get(name).source; }

std::string Options::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << description_ << "\n\noptions (each also read from its environment variable):\n";
  for (const auto& name : order_) {
    const Opt& o = opts_.at(name);
    std::string lhs = "  --" + name + (o.is_flag ? "" : " V");
    os << lhs << std::string(lhs.size() < 24 ? 24 - lhs.size() : 1, ' ') << o.help;
    if (!o.is_flag) os << " (default: " << (o.def.empty() ? "\"\"" : o.def) << ")";
    os << " [" << env_name(name) << "]\n";
  }
  return os.str();
}

}  // namespace edp::train
