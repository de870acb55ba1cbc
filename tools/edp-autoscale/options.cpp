// The one table of edp-autoscale's options (commands.h).
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "commands.h"
#include "core/text.h"
#include "edp/autoscale/policy.h"
#include "edp/core/error.h"

namespace edp::autoscale_tool {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The policies a command takes, from the one registry (policy.h).
std::string names(autoscale::PolicyScope scope) { return text::join(autoscale::policy_names(scope), ", "); }
using autoscale::PolicyScope;

cli::OptionDef opt(std::string name, std::string def, std::string help) {
  cli::OptionDef d;
  d.name = std::move(name);
  d.def = std::move(def);
  d.help = std::move(help);
  return d;
}
cli::OptionDef num(std::string name, std::string def, std::string help, double lo, double hi, bool integer = false) {
  cli::OptionDef d = opt(std::move(name), std::move(def), std::move(help));
  d.lo = lo;
  d.hi = hi;
  d.integer = integer;
  return d;
}
cli::OptionDef flag(std::string name, std::string help) {
  cli::OptionDef d = opt(std::move(name), "", std::move(help));
  d.flag = true;
  return d;
}
cli::OptionDef words(std::string name, std::string def, std::string help, std::vector<std::string> choices) {
  cli::OptionDef d = opt(std::move(name), std::move(def), std::move(help));
  d.choices = std::move(choices);
  return d;
}

const std::vector<cli::OptionDef>& table() {
  static const std::vector<cli::OptionDef> t = {
      // plan
      opt("input", "", "the JSON request (docs/plan.md; '-' for stdin)"),
      flag("example", "print a complete v2 request (every field) and exit"),
      num("gpus", "", "cluster size (plan: replaces the request's \"gpus\")", 0, 1 << 20, true),
      // simulate, workload
      opt("trace", "", "Philly-format CSV (submit_time_s,gpus_requested,duration_s,...) or a Pollux workload CSV "
                       "(name,time,application,num_replicas,batch_size)"),
      num("poisson", "", "N synthetic Poisson jobs instead of a trace", 0, 10000000, true),
      num("poisson-rate", "40", "synthetic arrivals per hour", 1e-9, kInf),
      opt("profiles", "", "model_profiles directory (default: model_profiles beside the trace or up to two folders "
                          "above, else synthetic)"),
      opt("policy", "", "the policy: serve one of " + names(PolicyScope::Live) + " (default goodput); simulate and "
                        "workload a comma-separated list of " + names(PolicyScope::Pool) + " (default "
                        "static,baseline,dp); with --compare-published of " + names(PolicyScope::Cluster) +
                        " (default tiresias,optimus,goodput)"),
      opt("sweep", "", "comma-separated cluster sizes (instead of --gpus)"),
      opt("out", "", "output directory"),
      num("pause", "", "seconds a rescale pauses a job (simulate: every rescaled job; serve: until a job measured its "
                       "own); default by --slot-kind: 30 on GPUs (Pollux's figure), on CPU slots the pause edp "
                       "measured (autoscale::kMeasuredCpuRescalePauseS, 0.8)", 0, 3600),
      words("slot-kind", "auto", "what a slot is: gpu, cpu, mig (serve: a MIG instance, one rank each; --slots is their "
                                 "number, edprun --mig checks them), or auto (serve: gpu when nvidia-smi lists GPUs; "
                                 "the simulators: gpu); sets the default --pause", {"auto", "cpu", "gpu", "mig"}),
      num("sim-replan", "300", "simulate: simulated seconds between periodic re-plans (besides arrivals and completions)",
          1e-3, kInf),
      num("rescale-penalty", "0.05", "simulate: value fraction an option other than a job's current one loses (with "
                                     "--compare-published, when given: the edp policies' hysteresis, else theirs, 0)",
          0, 0.999),
      words("weighting", "remaining", "simulate: DP job weights: equal or remaining (1/remaining time, SRPT-like)",
            {"equal", "remaining"}),
      num("max-scale", "4", "a job may use up to max(4, K x requested) GPUs (<= 64)", 1, 64, true),
      words("own-batch", "model", "a trace job's own batch: per-gpu (model's initial batch x GPUs) or model (the "
                                  "model's default global batch, kept at any GPU count)", {"per-gpu", "model"}),
      num("window", "604800", "seconds: jobs finished by then count as completed in the window", 1, kInf),
      num("limit", "", "use only the first N jobs of the trace", 0, 1e9, true),
      num("seed", "1", "seed of the model assignment (and the Poisson generator)", 0, 1e18, true),
      flag("restart-aware", "simulate: elastic policies value an option at 1 / (time the job still needs + the pause "
                            "if it restarts)"),
      flag("statistical-efficiency", "progress = samples/s x statistical efficiency (Pollux)"),
      num("max-ranks-per-gpu", "1", "the most ranks one job may run on each GPU (collocation under MPS; simulate: "
                                    "k in 1, 2, 4, 8)", 1, 8, true),
      opt("gpu-speeds", "", "serve on GPUs of several types: TYPE=SPEED,... each type's speed relative to the others "
                            "(a job's throughput on a type it has not run on is predicted from where it ran, by these "
                            "ratios; a type not named: measured from jobs that ran on it and on another type at "
                            "the same size, else 1)"),
      num("slot-memory-mib", "0", "serve: each slot's memory in MiB (a GPU's); a job spec's \"memory\" then sets the "
                                  "fewest workers it fits on (0: not limited)", 0, 1e9, true),
      num("colocation-idle", "0", "simulate: share of a rank's fixed step time (the model's a) its GPU idles; what "
                                  "collocated ranks can fill (an assumption until measured on a GPU)", 0, 1),
      flag("allocations", "simulate: also write allocations_<policy>_<gpus>.csv (every job's GPUs and batch over time)"),
      num("threads", "1", "simulations run in parallel", 1, 1024, true),
      flag("no-plots", "simulate: do not call the plot script"),
      opt("plot-script", "", "simulate: path of plot_autoscale.py (default: installed or source copy)"),
      flag("quiet", "no progress (simulate) or log (serve) on stderr"),
      flag("compare-published", "simulate: run the Pollux workloads in the node-level simulator and print edp's "
                                "policies next to the published Tiresias / Optimus+Oracle / Pollux average JCTs"),
      opt("workloads", "", "compare-published: the pollux_workloads folder (default: beside --profiles, else the "
                           "installed or source copy of data/pollux_workloads)"),
      opt("job-loads", "1.0", "compare-published: comma-separated relative job loads (1.0 = workloads/, 0.5 = "
                              "workloads-0.5/, ...)"),
      opt("sia", "", "simulate: run Sia's workloads in the node-level simulator with GPU types, on the tables of the "
                     "Sia SOSP'23 artifact in DIR (a checkout of siasosp23/artifacts, or its sia-simulator/)"),
      opt("sia-traces", "philly", "sia: comma-separated trace families (workloads/<trace>/: philly, saturn, newtrace; rate_10 ... rate_50: "
                                  "workloads/scale/<trace>/)"),
      opt("sia-workloads", "1,2,3,4", "sia: comma-separated workload numbers (workload-N.csv of each trace)"),
      opt("cluster", "aws:6,dgx-ext:2,rtx:3", "sia: nodes per GPU type, TYPE:NODES,... (the artifact's types; default: "
                                              "the paper's 64 GPUs)"),
      num("learn-fixed-share", "", "compare-published, sia: the learning policy's share of a step's compute taken as "
                                   "fixed while one micro-batch was measured (default: 0.25; sia 0.75)", 0, 0.999),
      num("learn-trust-half", "", "compare-published, sia: the configurations measured at which the learning policy "
                                  "believes a prediction away from them half (default: 1; sia 0.25)", 0.01, 100),
      num("interval", "60", "compare-published, sia: scheduling interval of the node-level simulator (s)", 1e-3, kInf),
      num("change-margin", "150", "compare-published (sia: 300): seconds a change of a running job must save beyond its pause "
                                  "(edp's restart-aware policies)", 0, 1e6),
      num("pause-per-gpu", "0.5", "compare-published (sia: 1): a running job's change pause counts (1 + this x its GPUs) "
                                  "times (edp's restart-aware policies)", 0, 1e3),
      // serve, submit, status, cancel
      opt("root", "", "the controller's directory (jobs, table, decision log)"),
      num("slots", "", "serve: slots of the cluster: GPUs, or CPU workers (cores) on a machine without GPUs (with "
                       "--hostfile: the sum of its slots)", 1, 4096, true),
      opt("hostfile", "", "serve: CPU jobs on several hosts: an Open MPI hostfile (host slots=N); each job gets a "
                          "hostfile of its own slots, rewritten before its rescales"),
      words("backend", "auto", "serve: where the slots come from: local (this host), hostfile (--hostfile), slurm (the "
                               "nodes Slurm gives; each job a Slurm job), auto (hostfile with --hostfile, else local)",
            {"auto", "local", "hostfile", "slurm"}),
      opt("partition", "", "serve --backend slurm: the Slurm partition (default: Slurm's default partition)"),
      words("slurm-grow", "auto", "serve --backend slurm: how a job grows: expand (job expansion, needs "
                                  "SchedulerParameters=permit_job_expansion), new-allocation (stop at a checkpoint, "
                                  "start again at the new size), auto (expand where permitted)",
            {"auto", "expand", "new-allocation"}),
      num("slurm-poll", "2", "serve --backend slurm: seconds between looks at squeue and sinfo", 0.1, 3600),
      opt("slurm-args", "", "serve --backend slurm: extra sbatch/salloc arguments, space-separated (--account, --qos, "
                            "--time)"),
      num("replan", "30", "serve: seconds between periodic plans (besides submit, end, measurement)", 0.1, 86400),
      num("hysteresis", "0.15", "serve: value fraction a change must beat staying by", 0, 0.99),
      num("start-cost", "3", "serve: seconds a job start is assumed to cost", 0, 3600),
      num("rescale-timeout", "120", "serve: seconds after which a rescale that did not land is given up", 1, 86400),
      num("preempt-grace", "60", "serve: seconds a preempted job has to checkpoint and stop before it gets SIGTERM",
          0, 86400),
      num("settle", "30", "serve: seconds a job stays at the size a rescale gave it before its speed there is judged "
                          "(longer when the change needs longer to pay for its pause and an undo's)", 0, 86400),
      num("warmup-steps", "3", "serve: steps at a new size that do not count as its measurement (a size is measured "
                               "after 2 x N + 1 steps)", 0, 1000, true),
      num("tick", "0.05", "serve: seconds between looks at the jobs", 0.01, 10),
      opt("edprun", "", "serve: the edprun to start jobs with (default: beside this program, else PATH)"),
      opt("edprun-args", "", "serve: extra edprun arguments, space-separated (e.g. --allow-run-as-root)"),
      flag("exit-when-idle", "serve: stop once a job was submitted and every job has ended, nothing queued"),
      flag("json", "status: the table as JSON, with each job's measurements and throughput fit"),
  };
  return t;
}

}  // namespace

cli::Options options_for(const char* cmd, const char* description, std::initializer_list<const char*> names) {
  cli::Options o(std::string("edp-autoscale ") + cmd, description, "EDP_AUTOSCALE_");
  for (const char* n : names) {
    const cli::OptionDef* found = nullptr;
    for (const cli::OptionDef& d : table())
      if (d.name == n) found = &d;
    EDP_CHECK(found != nullptr, "edp-autoscale: option --", n, " is not in the table");
    o.add(*found);
  }
  return o;
}

int parse(cli::Options& o, int argc, char** argv) {
  const cli::ParseResult r = o.try_parse(argc, argv);
  if (r.kind == cli::ParseResult::Help) {
    std::cout << o.usage();
    return 0;
  }
  if (r.kind == cli::ParseResult::Error) {
    std::cerr << o.program() << ": " << r.message << " (see " << o.program() << " --help)\n";
    return 2;
  }
  return -1;
}

}  // namespace edp::autoscale_tool
