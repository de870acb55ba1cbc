// Command-line options with one rule for environment variables: the flag --some-knob is also
// read from EDP_SOME_KNOB. Precedence: flag > environment > default. --help lists every option
// with its variable and default; a malformed or unknown option is an error (exit code 2).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edp::train {

class Options {
 public:
  Options(std::string program, std::string description);
  Options& add(const std::string& name, const std::string& default_value, const std::string& help);
  Options& add_flag(const std::string& name, const std::string& help);  // boolean, default false

  // Parses argv; on --help prints usage to stdout and exits 0; on an error prints it with the
  // usage hint to stderr and exits 2. Arguments after "--" are left in rest().
  void parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  int64_t i64(const std::string& name) const;
  double f64(const std::string& name) const;
  bool flag(const std::string& name) const;
  // "flag", "env EDP_X" or "default": where the value came from.
  std::string source(const std::string& name) const;
  const std::vector<std::string>& rest() const { return rest_; }
  // Every option as (name, value), in the order they were added (e.g. for comm::check_agreement).
  std::vector<std::pair<std::string, std::string>> values() const;
  std::string usage() const;

  static std::string env_name(const std::string& name);  // "data-dir" → "EDP_DATA_DIR"

 private:
  struct Opt {
    std::string value, def, help, source = "default";
    bool is_flag = false;
  };
  const Opt& get(const std::string& name) const;
  std::string program_, description_;
  std::vector<std::string> order_;
  std::map<std::string, Opt> opts_;
  std::vector<std::string> rest_;
};

}  // namespace edp::train
