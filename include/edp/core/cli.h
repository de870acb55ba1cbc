// Command lines, one toolkit for every edp program (examples, edprun, edp-autoscale, benchmarks).
//
// An option --some-knob is also read from the environment variable <PREFIX>SOME_KNOB (the prefix
// is the program's: EDP_ for the examples and edprun, EDP_AUTOSCALE_ for edp-autoscale).
// Precedence: flag > environment > default. --help prints every option with its variable and
// default; an unknown option, an option given twice on the command line, a missing value, a
// malformed number, a number out of its range or a word outside its choices is an error that
// names the option and where its value came from (exit code 2).
//
// A program with subcommands (edp-autoscale plan | simulate | serve ...) builds one Options per
// subcommand from one table of OptionDefs: each name is defined once (one meaning, one default,
// one variable) and each subcommand lists the names it takes, so its --help shows only those.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace edp::cli {

// One option's definition. Defaults are strings as a user would type them; "" = no default.
struct OptionDef {
  std::string name;  // "max-scale" -> --max-scale, <PREFIX>MAX_SCALE
  std::string def;
  std::string help;
  bool flag = false;  // takes no value; "1" when given
  // A number in [lo, hi] when lo <= hi (checked whether it came from the flag, the environment or
  // the default); else no range. integer: the value must be an integer.
  double lo = 1, hi = 0;
  bool integer = false;
  std::vector<std::string> choices;  // when not empty, the value must be one of them
  // A setting of this run only (how long, how often, where, how verbose), not of the training
  // trajectory: a resume from a checkpoint may change it (run_settings()).
  bool run_setting = false;
};

// The result of parsing, for callers that decide themselves what to do (tests, subcommands).
struct ParseResult {
  enum Kind { Ok, Help, Error } kind = Ok;
  std::string message;  // Error: what was wrong (without the program name)
};

class Options {
 public:
  Options(std::string program, std::string description, std::string env_prefix = "EDP_");

  Options& add(const std::string& name, const std::string& default_value, const std::string& help);
  Options& add_flag(const std::string& name, const std::string& help);  // boolean, default false
  Options& add(const OptionDef& def);
  // The last added option takes a number in [lo, hi] (integer: a whole number) / one of `words`.
  Options& range(double lo, double hi);
  Options& int_range(int64_t lo, int64_t hi);
  Options& choices(std::vector<std::string> words);
  // The last added option is a run setting (OptionDef::run_setting).
  Options& run_setting();
  // --accept-config-change, the flag of every elastic training program: resume from a checkpoint
  // written with other settings of the trajectory (elastic::JobOptions::accept_config_change).
  Options& add_accept_config_change();
  // A positional argument (in the order added); required ones are errors when absent.
  Options& add_positional(const std::string& name, const std::string& help, bool required = true);

  // Parses argv (argv[0] is the program). On --help prints usage() to stdout and exits 0; on an
  // error prints "<program>: <message>" and a hint to stderr and exits 2. Arguments after "--"
  // are left in rest().
  void parse(int argc, char** argv);
  // The same without printing or exiting.
  ParseResult try_parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  int64_t i64(const std::string& name) const;
  double f64(const std::string& name) const;
  bool flag(const std::string& name) const;
  // Whether a value was given (flag or environment), not just defaulted.
  bool given(const std::string& name) const { return source(name) != "default"; }
  // "flag", "env EDP_X" or "default": where the value came from.
  std::string source(const std::string& name) const;
  const std::vector<std::string>& rest() const { return rest_; }
  std::string positional(const std::string& name) const;
  // Every option as (name, value), in the order they were added (e.g. for comm::check_agreement).
  std::vector<std::pair<std::string, std::string>> values() const;
  // The run settings as "--name" (elastic::JobOptions::resume_may_change): every other option of
  // a training program is part of its job's identity, recorded in each checkpoint.
  std::vector<std::string> run_settings() const;
  std::string usage() const;
  const std::string& program() const { return program_; }

  std::string env_name(const std::string& name) const;  // "data-dir" -> "<PREFIX>DATA_DIR"

 private:
  struct Opt {
    OptionDef def;
    std::string value, source = "default";
  };
  struct Positional {
    std::string name, help, value;
    bool required = true, given = false;
  };
  const Opt& get(const std::string& name) const;
  std::string check_value(const Opt& o) const;  // "" when the value is acceptable
  std::string program_, description_, prefix_;
  std::vector<std::string> order_;
  std::vector<Opt> opts_;  // in order_
  std::vector<Positional> positionals_;
  std::vector<std::string> rest_;
};

}  // namespace edp::cli
