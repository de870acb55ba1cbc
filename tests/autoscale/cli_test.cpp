// The `edp-autoscale plan` contract, exercised by running the built tool: a valid request gives
// the optimal plan as JSON (checked against the library's brute force), and every kind of bad
// input exits with code 2 and a message naming the job and the field; version 2 (docs/plan.md)
// and its example. The command lines: per-subcommand help, one definition per option name, an
// environment variable for each. Also a tiny `simulate` and `workload` (the load and bound report).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "edp/autoscale/optimizer.h"
#include "edp/autoscale/plan.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct RunResult {
  int code;
  std::string out;  // stdout + stderr
};

RunResult run(const std::string& args) {
  const std::string cmd = std::string(EDP_AUTOSCALE_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return RunResult{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

fs::path tmpdir() {
  const fs::path d = fs::temp_directory_path() / ("edp_autoscale_cli_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

json good_request() {
  return json::parse(R"({
    "gpus": 6,
    "jobs": [
      {"id": "a", "min_gpus": 0, "max_gpus": 4, "max_batch_per_gpu": 128, "ref": {"gpus": 1, "batch": 64},
       "throughput": [{"gpus": 1, "batch": 64, "samples_per_s": 100}, {"gpus": 1, "batch": 128, "samples_per_s": 150},
                      {"gpus": 2, "batch": 256, "samples_per_s": 280}, {"gpus": 4, "batch": 512, "samples_per_s": 520}]},
      {"id": "b", "min_gpus": 1, "max_gpus": 4, "max_batch_per_gpu": 16, "weight": 2, "ref": {"gpus": 2, "batch": 16},
       "throughput": [{"gpus": 1, "batch": 16, "samples_per_s": 10}, {"gpus": 2, "batch": 16, "samples_per_s": 18},
                      {"gpus": 4, "batch": 32, "samples_per_s": 40}]},
      {"id": "c", "min_gpus": 0, "max_gpus": 2, "max_batch_per_gpu": 8, "ref": {"gpus": 1, "batch": 8},
       "throughput": [{"gpus": 1, "batch": 8, "samples_per_s": 5}, {"gpus": 2, "batch": 16, "samples_per_s": 9.5}]}
    ]})");
}

RunResult plan_with(const json& req) {
  const fs::path f = tmpdir() / "req.json";
  std::ofstream(f) << req.dump();
  return run("plan --input " + f.string());
}

}  // namespace

TEST(AutoscaleCli, PlanGivesTheOptimumAsJson) {
  const RunResult r = plan_with(good_request());
  ASSERT_EQ(r.code, 0) << r.out;
  const json out = json::parse(r.out);
  // The same request through the library's brute force.
  edp::autoscale::TableRequest req;
  req.gpus = 6;
  const json request = good_request();
  for (const json& j : request["jobs"]) {
    edp::autoscale::TableJob jr;
    jr.id = j["id"].get<std::string>();
    jr.min_gpus = j["min_gpus"].get<int>();
    jr.max_gpus = j["max_gpus"].get<int>();
    jr.max_batch_per_gpu = j["max_batch_per_gpu"].get<int>();
    jr.weight = j.value("weight", 1.0);
    jr.ref_gpus = j["ref"]["gpus"].get<int>();
    jr.ref_batch = j["ref"]["batch"].get<int>();
    for (const json& p : j["throughput"])
      jr.throughput.push_back({p["gpus"].get<int>(), p["batch"].get<int>(), p["samples_per_s"].get<double>()});
    req.jobs.push_back(jr);
  }
  const auto bf = edp::autoscale::solve_brute_force(edp::autoscale::make_problem(req), 6);
  EXPECT_NEAR(out["objective"].get<double>(), bf.objective, 1e-12);
  ASSERT_EQ(out["allocations"].size(), 3u);
  int used = 0;
  for (const json& a : out["allocations"]) used += a["gpus"].get<int>();
  EXPECT_LE(used, 6);
  EXPECT_GE(out["allocations"][1]["gpus"].get<int>(), 1);  // b must run
  EXPECT_TRUE(out.contains("solve_ms"));
  // --gpus overrides the request's size.
  const fs::path f = tmpdir() / "req.json";
  const RunResult r2 = run("plan --gpus 1 --input " + f.string());
  ASSERT_EQ(r2.code, 0) << r2.out;
  const json o2 = json::parse(r2.out);
  EXPECT_EQ(o2["allocations"][1]["gpus"].get<int>(), 1);
  EXPECT_EQ(o2["allocations"][0]["gpus"].get<int>(), 0);
}

TEST(AutoscaleCli, BadInputExitsWithCode2NamingJobAndField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> expect;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"unknown field", [](json& r) { r["jobs"][1]["colour"] = "red"; }, {"job 'b'", "colour"}},
      {"unknown top-level field", [](json& r) { r["cluster"] = 1; }, {"cluster"}},
      {"missing ref row", [](json& r) { r["jobs"][2]["ref"]["batch"] = 16; }, {"job 'c'", "ref"}},
      {"negative number", [](json& r) { r["jobs"][0]["throughput"][1]["samples_per_s"] = -1; },
       {"job 'a'", "samples_per_s"}},
      {"negative gpus", [](json& r) { r["jobs"][0]["max_gpus"] = -2; }, {"job 'a'", "max_gpus"}},
      {"not an integer", [](json& r) { r["jobs"][1]["min_gpus"] = 1.5; }, {"job 'b'", "min_gpus"}},
      {"missing field", [](json& r) { r["jobs"][0].erase("max_batch_per_gpu"); }, {"job 'a'", "max_batch_per_gpu"}},
      {"infeasible must-run set",
       [](json& r) {
         r["gpus"] = 3;
         r["jobs"][0]["min_gpus"] = 4;
       },
       {"non-preemptible", "'a'"}},
  };
  for (const Case& c : cases) {
    json req = good_request();
    c.edit(req);
    const RunResult r = plan_with(req);
    EXPECT_EQ(r.code, 2) << c.what << ": " << r.out;
    for (const std::string& s : c.expect) EXPECT_NE(r.out.find(s), std::string::npos) << c.what << ": " << r.out;
  }
  const fs::path f = tmpdir() / "broken.json";
  std::ofstream(f) << "{\"gpus\": 4,\n \"jobs\": [ }";
  const RunResult r = run("plan --input " + f.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;
  EXPECT_EQ(run("plan --input /nonexistent/x.json").code, 2);
  EXPECT_EQ(run("plan").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
}

// What nlohmann's parser lets through silently, and numbers no real request has.
TEST(AutoscaleCli, PlanRefusesDuplicateKeysOverflowDenormalsAndInconsistentCurrent) {
  const fs::path f = tmpdir() / "raw.json";
  auto plan_text = [&](const std::string& text) {
    std::ofstream(f) << text;
    return run("plan --input " + f.string());
  };
  std::string text = good_request().dump();
  text.replace(text.find("\"gpus\":6"), 8, "\"gpus\":6,\"gpus\":60");
  RunResult r = plan_text(text);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("field 'gpus' is given twice"), std::string::npos) << r.out;
  json req = good_request();
  std::string t2 = req.dump();
  t2.replace(t2.find("\"samples_per_s\":100"), 19, "\"samples_per_s\":1e400");
  r = plan_text(t2);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("number overflow"), std::string::npos) << r.out;
  req["jobs"][0]["throughput"][0]["samples_per_s"] = 5e-324;
  r = plan_with(req);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("normal number"), std::string::npos) << r.out;
  req = good_request();
  req["jobs"][0]["throughput"][1]["samples_per_s"] = 1e-300;
  r = plan_with(req);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("at least 1e-9"), std::string::npos) << r.out;
  req = good_request();
  req["jobs"][2]["current"] = {{"gpus", 3}, {"batch", 24}};  // max_gpus 2
  r = plan_with(req);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("job 'c'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("above max_gpus 2"), std::string::npos) << r.out;
}

// Inputs that crashed or exhausted `plan`: a 400 KB request of deeply nested arrays (SIGSEGV:
// the error message's copy of the value recursed once per level) is refused with exit 2; a
// device or a FIFO as --input is refused at once, naming it (it would never end or block).
TEST(AutoscaleCli, PlanRefusesDeepNestingAndFilesThatAreNotRegular) {
  const fs::path f = tmpdir() / "deep.json";
  std::ofstream(f) << "{\"version\": 2, \"gpus\": 4, \"jobs\": " << std::string(200000, '[') << std::string(200000, ']')
                   << "}";
  RunResult r = run("plan --input " + f.string());
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 300);
  EXPECT_NE(r.out.find("nested more than 64 arrays or objects deep"), std::string::npos) << r.out.substr(0, 300);
  r = run("plan --input /dev/zero");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/zero: a character device, not a regular file"), std::string::npos) << r.out;
  const fs::path fifo = tmpdir() / "fifo.json";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = run("plan --input " + fifo.string());  // blocked forever before: CTest's timeout would end it
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("a FIFO, not a regular file"), std::string::npos) << r.out;
  fs::remove(fifo);
}

// submit reads the spec as an outside file (a link to /dev/zero was read until memory ran out) and
// never writes through a link planted in the root (next_id once wrote its number into the link's
// target); a spec that could never start is refused before it reaches the inbox.
TEST(AutoscaleCli, SubmitReadsSpecsSafelyAndWritesNoLink) {
  const fs::path root = tmpdir() / "serve_root";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::create_symlink("/dev/zero", root / "zero.json");
  RunResult r = run("submit --root " + root.string() + " " + (root / "zero.json").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("zero.json: a character device, not a regular file"), std::string::npos) << r.out;
  const fs::path victim = tmpdir() / "victim";
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, root / "next_id");
  const fs::path spec = root / "spec.json";
  std::ofstream(spec) << R"({"name": "x", "command": ["/bin/true"], "min_batch": 64})";
  r = run("submit --root " + root.string() + " " + spec.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("next_id: a symbolic link"), std::string::npos) << r.out;
  std::ifstream v(victim);
  std::string text((std::istreambuf_iterator<char>(v)), {});
  EXPECT_EQ(text, "precious\n");
  fs::remove(root / "next_id");
  std::ofstream(spec) << R"({"name": "x", "command": ["/bin/true"], "min_batch": 64, "env": {"BIG": ")"
                      << std::string(200000, 'x') << R"("}})";
  r = run("submit --root " + root.string() + " " + spec.string());
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 300);
  EXPECT_NE(r.out.find("field 'env': 'BIG' is 200004 bytes as NAME=value"), std::string::npos) << r.out.substr(0, 300);
  EXPECT_FALSE(fs::exists(root / "inbox" / "j0001.json"));
  r = run("submit --root " + root.string() + " --root " + root.string() + " " + spec.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("option --root is given twice"), std::string::npos) << r.out;
  fs::remove_all(root);
}

// plan --example is the repository's example (docs/plan_example.json), a complete v2 request; plan
// decides it exactly as the library does, and v2 refusals name their field.
TEST(AutoscaleCli, PlanVersion2AndItsExample) {
  const RunResult ex = run("plan --example");
  ASSERT_EQ(ex.code, 0) << ex.out;
  std::ifstream doc(fs::path(EDP_SOURCE_DIR) / "docs" / "plan_example.json");
  std::stringstream ss;
  ss << doc.rdbuf();
  EXPECT_EQ(ex.out, ss.str()) << "docs/plan_example.json differs from `edp-autoscale plan --example`; regenerate it";
  const fs::path f = tmpdir() / "v2.json";
  std::ofstream(f) << ex.out;
  const RunResult r = run("plan --input " + f.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const json out = json::parse(r.out);
  const edp::autoscale::PlanRequest req = edp::autoscale::parse_plan_request(ex.out, "example");
  const edp::autoscale::Plan want = edp::autoscale::decide(req);
  EXPECT_EQ(out["version"].get<int>(), 2);
  ASSERT_EQ(out["allocations"].size(), req.jobs.size());
  for (size_t j = 0; j < req.jobs.size(); ++j) {
    const json& a = out["allocations"][j];
    EXPECT_EQ(a["gpus"].get<int>(), want.choices[j].config.gpus);
    EXPECT_EQ(a["option"].get<int>(), want.choices[j].option);
    ASSERT_EQ(a["option_values"].size(), want.values[j].size());
    for (size_t o = 0; o < want.values[j].size(); ++o)
      EXPECT_EQ(a["option_values"][o].get<double>(), want.values[j][o]);  // JSON doubles round-trip exactly
  }
  auto refused = [&](const std::function<void(json&)>& edit, const std::string& want) {
    json bad = json::parse(ex.out);
    edit(bad);
    const RunResult b = plan_with(bad);
    EXPECT_EQ(b.code, 2) << want << ": " << b.out;
    EXPECT_NE(b.out.find(want), std::string::npos) << b.out;
  };
  refused([](json& r) { r["version"] = 3; }, "field 'version'");
  refused([](json& r) { r["policy"] = "fastest"; }, "unknown policy 'fastest'");
  refused([](json& r) { r["jobs"][1].erase("remaining"); }, "job 'bert-b' (jobs[1]): field 'remaining'");
  refused([](json& r) { r["jobs"][0]["current"]["gpus"] = 9; }, "more than the cluster's 8");
  refused([](json& r) { r["jobs"][0]["options"].push_back(r["jobs"][0]["options"][0]); }, "listed twice");
}

// Every subcommand has its own help, listing only its options; an option name means the same, with
// the same default and variable, in every subcommand that takes it.
TEST(AutoscaleCli, EachSubcommandHasItsOwnHelpAndEveryOptionOneDefinition) {
  const std::vector<std::string> cmds = {"plan", "simulate", "workload", "serve", "submit", "status", "cancel"};
  std::map<std::string, std::string> seen;  // option -> its help line (text, default, variable)
  std::map<std::string, std::string> helps;
  const std::regex line(R"(^  --([a-z-]+)( V)? +(.*)$)");
  for (const std::string& c : cmds) {
    const RunResult r = run(c + " --help");
    ASSERT_EQ(r.code, 0) << c << ": " << r.out;
    EXPECT_NE(r.out.find("usage: edp-autoscale " + c), std::string::npos) << r.out;
    helps[c] = r.out;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (!std::regex_match(l, m, line)) continue;
      const std::string name = m[1];
      std::string env = "EDP_AUTOSCALE_";
      for (char ch : name) env += ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
      EXPECT_NE(l.find("[" + env + "]"), std::string::npos) << c << " --" << name << " has no variable: " << l;
      if (seen.count(name)) EXPECT_EQ(seen[name], m[3].str()) << "--" << name << " differs between subcommands";
      seen[name] = m[3];
    }
  }
  EXPECT_EQ(helps["plan"].find("--trace"), std::string::npos) << "plan --help lists simulate's options";
  EXPECT_NE(helps["simulate"].find("--sim-replan"), std::string::npos);
  EXPECT_NE(helps["serve"].find("[EDP_AUTOSCALE_RESCALE_TIMEOUT]"), std::string::npos);
  EXPECT_NE(helps["serve"].find("[EDP_AUTOSCALE_TICK]"), std::string::npos);
  // status on a root that does not exist is an error, not an empty table.
  const RunResult st = run("status --root /nonexistent/edp-root");
  EXPECT_EQ(st.code, 2) << st.out;
  EXPECT_NE(st.out.find("--root /nonexistent/edp-root: no such directory"), std::string::npos) << st.out;
  // --slots is serve's count; the simulators' slot kind is --slot-kind, as serve's.
  const RunResult old = run("simulate --poisson 5 --gpus 4 --slots cpu --out /tmp/x --no-plots");
  EXPECT_EQ(old.code, 2) << old.out;
  EXPECT_NE(old.out.find("unknown option --slots"), std::string::npos) << old.out;
}

TEST(AutoscaleCli, SimulateWritesSummaryAndPerJobCsv) {
  const fs::path d = tmpdir() / "sim";
  const RunResult r = run("simulate --poisson 40 --gpus 8 --policy static,dp --window 28800 --out " + d.string() +
                          " --no-plots --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  // The table's header follows --window.
  EXPECT_NE(r.out.find("done/8h"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("done/7d"), std::string::npos) << r.out;
  std::ifstream sf(d / "summary.json");
  const json s = json::parse(sf);
  ASSERT_EQ(s["runs"].size(), 2u);
  for (const json& run : s["runs"]) EXPECT_EQ(run["completed"].get<int>() + run["never_started"].get<int>(), 40);
  EXPECT_TRUE(fs::exists(d / "jobs_dp_8.csv"));
  EXPECT_TRUE(fs::exists(d / "timeline_static_8.csv"));
  const RunResult bad = run("simulate --poisson 10 --gpus 8 --policy nonsense --out " + d.string() + " --no-plots");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("unknown policy"), std::string::npos) << bad.out;
  fs::remove_all(tmpdir());
}

TEST(AutoscaleCli, WorkloadReportsLoadAndPolicyBounds) {
  const RunResult r = run("workload --poisson 60 --sweep 8,16 --policy static,baseline,dp --window 3600");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string last = r.out.substr(r.out.rfind("\n{") + 1);
  const json j = json::parse(last);
  EXPECT_EQ(j["jobs"].get<int>(), 60);
  const double own = j["own_gpu_h"].get<double>();
  ASSERT_EQ(j["sizes"].size(), 2u);
  // Load = GPU-hours / (GPUs x window): 8 GPUs carry twice the load of 16 (relative 1e-12).
  EXPECT_NEAR(j["sizes"][0]["work_load"].get<double>(), own / 8.0, 1e-12 * own);
  EXPECT_NEAR(j["sizes"][0]["work_load"].get<double>(), 2 * j["sizes"][1]["work_load"].get<double>(), 1e-12 * own);
  ASSERT_EQ(j["policies"].size(), 3u);
  // static can only run the own configuration; the elastic policies include it (so need no more
  // GPU-time) and dp's options include the baseline's.
  const json& st = j["policies"][0];
  const json& ba = j["policies"][1];
  const json& dp = j["policies"][2];
  EXPECT_NEAR(st["min_gpu_h"].get<double>(), own, 1e-9 * own);
  EXPECT_LE(ba["min_gpu_h"].get<double>(), own * (1 + 1e-12));
  EXPECT_LE(dp["min_gpu_h"].get<double>(), ba["min_gpu_h"].get<double>() * (1 + 1e-12));
  EXPECT_LE(dp["unlimited_avg_jct_h"].get<double>(), ba["unlimited_avg_jct_h"].get<double>() * (1 + 1e-12));
  EXPECT_LE(ba["unlimited_avg_jct_h"].get<double>(), st["unlimited_avg_jct_h"].get<double>() * (1 + 1e-12));
  const RunResult bad = run("workload --poisson 10 --policy nonsense");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("unknown policy"), std::string::npos) << bad.out;
}

// A trace that cannot be read is the first and only complaint: no word about the profiles (their
// lookup starts from the trace's folder), exit 2, the file named.
TEST(AutoscaleCli, MissingTraceIsReportedBeforeAnythingElse) {
  for (const std::string cmd : {"simulate --gpus 4 --out " + (tmpdir() / "out").string(), std::string("workload --gpus 4")}) {
    const RunResult r = run(cmd + " --trace " + (tmpdir() / "no_such_trace.csv").string());
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("cannot open trace '" + (tmpdir() / "no_such_trace.csv").string() + "'"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("synthetic"), std::string::npos) << r.out;
  }
  fs::remove_all(tmpdir());
}

TEST(AutoscaleCli, PolluxWorkloadFindsTheProfilesAboveIt) {
  const fs::path data = fs::path(EDP_SOURCE_DIR) / "data";
  const fs::path wl = data / "pollux_workloads" / "workloads-realistic" / "workload-1.csv";
  // model_profiles is two folders above the workload file; no --profiles needed.
  const RunResult r = run("workload --trace " + wl.string() + " --gpus 64 --policy baseline,dp");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("synthetic"), std::string::npos) << r.out;
  const json j = json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  EXPECT_EQ(j["jobs"].get<int>(), 160);
  // Outside the data folder there are no profiles: the jobs' models cannot be found.
  const fs::path lone = tmpdir() / "workload-1.csv";
  fs::copy_file(wl, lone, fs::copy_options::overwrite_existing);
  const RunResult bad = run("workload --trace " + lone.string() + " --gpus 64");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("has no profile"), std::string::npos) << bad.out;
  fs::remove_all(tmpdir());
}

TEST(AutoscaleCli, ComparePublishedReproducesTiresiasAndOptimusWithinTenPercent) {
  const fs::path data = fs::path(EDP_SOURCE_DIR) / "data";
  const RunResult r = run("simulate --compare-published --workloads " + (data / "pollux_workloads").string() +
                          " --policy tiresias,optimus,goodput-oracle");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  const json& load = j["loads"][0];
  ASSERT_EQ(load["workloads"].size(), 8u);
  // The calibration: every workload within 10% of the published average JCT.
  for (const json& w : load["workloads"])
    for (const char* p : {"tiresias", "optimus"}) {
      const double sim = w[p]["avg_jct_s"].get<double>(), pub = w[p]["published_s"].get<double>();
      EXPECT_LT(std::abs(sim / pub - 1), 0.10) << p << " workload " << w["workload"] << ": " << sim << " vs " << pub;
      EXPECT_EQ(w[p]["finished"].get<int>(), w[p]["jobs"].get<int>());
    }
  // Restarts are counted and reported per job (goodput's oracle variant, ~1.5 s: the learning one
  // takes 25 s and, on a loaded 2-core machine, past this test's timeout; cluster_sim_test and
  // online_test run it).
  EXPECT_GE(load["mean"]["goodput-oracle"]["restarts_per_job"].get<double>(), 0.0);
  EXPECT_GT(load["pollux_published_mean_s"].get<double>(), 0.0);
  const RunResult bad = run("simulate --compare-published --workloads /nonexistent");
  EXPECT_EQ(bad.code, 2) << bad.out;
}

TEST(AutoscaleCli, SimulateSiaRunsTheTypedClusterOnTheArtifactsLayout) {
  // A minimal sia-simulator/ folder: bert (the artifact's 2 epochs, 120-s restarts) with tables on
  // aws (4 GPUs per node) and rtx (8, twice as fast), three jobs in workloads/philly/.
  const fs::path d = tmpdir() / "sia-simulator";
  fs::create_directories(d / "traces" / "bert");
  fs::create_directories(d / "workloads" / "philly");
  for (const auto& [type, speed] : {std::pair{"aws", 1.0}, std::pair{"rtx", 2.0}}) {
    std::ofstream p(d / "traces" / "bert" / (std::string("placements-") + type + ".csv"));
    p << "placement,local_bsz,step_time,sync_time\n";
    for (const char* k : {"1", "2", "4", "11", "22", "44"})
      for (int b : {4, 8, 12}) p << k << "," << b << "," << (0.1 + 0.02 * b + (k[0] == '1' && !k[1] ? 0 : 0.05)) / speed << ","
                                << (k[0] == '1' && !k[1] ? 0.001 : 0.05) / speed << "\n";
    std::ofstream(d / "traces" / "bert" / (std::string("scalability-") + type + ".csv"))
        << "num_nodes,num_replicas,local_bsz,step_time,sync_time\n3,12,8," << 0.4 / speed << "," << 0.2 / speed << "\n";
  }
  for (int B : {12, 48, 192}) {
    std::ofstream v(d / "traces" / "bert" / ("validation-" + std::to_string(B) + ".csv"));
    v << "progress,iteration,metric,grad_sqr,grad_var\n";
    for (int e = 1; e <= 2; ++e) v << 3000 * e << "," << 3000 * e * 12 / B << ",80,1.0,20.0\n";
  }
  std::ofstream(d / "workloads" / "philly" / "workload-1.csv")
      << "name,time,application,num_replicas,batch_size\nb0,0,bert,1,12\nb1,30,bert,2,24\nb2,400,bert,4,48\n";
  const std::string base = "simulate --sia " + d.parent_path().string();
  const RunResult r = run(base + " --sia-workloads 1 --cluster aws:2,rtx:1 --policy goodput,goodput-oracle");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const json& x : j["runs"]) {
    EXPECT_EQ(x["finished"].get<int>(), 3) << x.dump();
    EXPECT_GT(x["avg_jct_s"].get<double>(), 120.0) << x.dump();  // at least bert's restart delay
    EXPECT_EQ(x["by_app"]["bert"]["jobs"].get<int>(), 3) << x.dump();
  }
  const std::pair<const char*, const char*> bad[] = {
      {" --sia-workloads 1 --cluster aws:0", "must be a number >= 1"},
      {" --sia-workloads 1 --cluster quad:1", "no model has tables of GPU type 'quad'"},
      {" --sia-workloads 1 --cluster aws:1,aws:2", "given twice"},
      {" --sia-workloads 1 --cluster aws:1,foo:2", "unknown GPU type 'foo'"},
      {" --sia-workloads x --cluster aws:2", "expected workload numbers"},
      {" --sia-workloads 2 --cluster aws:2", "no workload"},
      {" --sia-workloads 1 --sia-traces ../philly --cluster aws:2", "trace names"},
      {" --sia-workloads 1 --cluster aws:2 --policy tiresias", "does not take GPU types"}};
  for (const auto& [args, why] : bad) {
    const RunResult b = run(base + args);
    EXPECT_EQ(b.code, 2) << args << ": " << b.out;
    EXPECT_NE(b.out.find(why), std::string::npos) << args << ": " << b.out;
  }
  std::ofstream(d / "workloads" / "philly" / "workload-3.csv") << "name,time,application,num_replicas,batch_size\nx,0,resnet,1,12\n";
  const RunResult unknown = run(base + " --sia-workloads 3 --cluster aws:2");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("model 'resnet' has no tables of GPU type 'aws'"), std::string::npos) << unknown.out;
  const RunResult none = run("simulate --sia " + (tmpdir() / "nope").string());
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("traces/"), std::string::npos) << none.out;
}
