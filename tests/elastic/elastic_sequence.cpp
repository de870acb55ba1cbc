// A test program for elastic::Job: trains the Fashion-MNIST MLP (or, with --model gpt, a tiny
// GPT on the token windows of a generated text) and changes its size at given steps, recording
// which samples (token windows) every rank trained on.
//
//   elastic_sequence --plan 4:4,8:1,12:3 --record DIR [--ckpt DIR] [--limit N] [--epochs N]
//                    [--batch B] [--model mlp|gpt] [--device cpu|cuda] [--zero 0|1|2]
//
// --device cuda  every rank on a GPU (its local rank modulo the visible GPUs; ranks may share one);
//   without a usable GPU the program prints "elastic_sequence: skipped, no GPU: <why>" and exits 77.
// --plan STEP:W[:GB],...  before step STEP, rank 0 writes {"workers": W, "global_batch": GB} to
//   DIR/control.json (GB absent: B per worker), which the job reads in that step.
// --record DIR  every process appends "epoch index" lines for the samples it trained on to
//   DIR/seen.<pid>; at the end, rank 0 checks that every sample of every epoch was seen exactly
//   once by the job as a whole (all processes, present or gone) and prints
//   "coverage: E epoch(s) x N samples, each seen once".
// --die-at N  rank 1 dies by SIGKILL before step N (once), for the crash-and-restart test.
// --new-rank-fails  a rank started by a grow throws during its setup, before it joins.
// --new-rank-hangs  a rank started by a grow never starts MPI (it sleeps where it would), so the
//   running ranks' MPI_Comm_spawn does not return: the grow is given up after EDP_SPAWN_TIMEOUT.
// Every process also appends "size=W rank=R host=H" to DIR/where.<pid> whenever its place in the
// job changes (its first step, and after each rescale): where the ranks ran, for the host test.
// The last line is JSON: {"workers", "global_batch", "steps", "test_acc", "digest"}.
#include <dirent.h>
#include <unistd.h>

#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "edp/comm/membership.h"
#include "edp/edp.h"

using namespace edp;

namespace {
struct Change {
  int64_t step;
  int workers;
  int64_t global_batch;
};

// A deterministic English-like byte stream of about `n` tokens (words drawn from a fixed list),
// written to a token file of this process (every process makes the same one).
std::string make_token_file(const std::string& dir, int64_t n) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "see",
                                "it", "was", "late", "in", "day", "so", "they", "slept", "well"};
  Rng rng(11);
  std::string text;
  while (static_cast<int64_t>(text.size()) < n) {
    text += words[rng.next_u64() % 20];
    text += rng.next_u64() % 7 == 0 ? ".\n" : " ";
  }
  text.resize(static_cast<size_t>(n));
  const std::string path = dir + "/tokens." + std::to_string(getpid()) + ".tok";
  data::write_token_file(path, data::ByteTokenizer::encode(text), data::ByteTokenizer::kVocab);
  return path;
}

std::vector<Change> parse_plan(const std::string& s, int64_t batch) {
  std::vector<Change> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    Change c{};
    long long gb = 0;
    const int n = std::sscanf(item.c_str(), "%" SCNd64 ":%d:%lld", &c.step, &c.workers, &gb);
    EDP_CHECK(n >= 2 && c.step >= 1 && c.workers >= 1, "--plan: bad item '", item, "' (STEP:W[:GB])");
    c.global_batch = n == 3 ? gb : batch * c.workers;
    out.push_back(c);
  }
  return out;
}

void write_control(const std::string& path, const Change& c) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << "{\"workers\": " << c.workers << ", \"global_batch\": " << c.global_batch << "}\n";
  std::rename(tmp.c_str(), path.c_str());
}

// Every sample of every epoch exactly once, over all the processes' records.
std::string check_coverage(const std::string& dir, int64_t epochs, int64_t n) {
  std::vector<std::vector<int>> seen(static_cast<size_t>(epochs), std::vector<int>(static_cast<size_t>(n), 0));
  DIR* d = opendir(dir.c_str());
  EDP_CHECK(d, "cannot read ", dir);
  int files = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("seen.", 0) != 0) continue;
    ++files;
    std::ifstream f(dir + "/" + name);
    int64_t ep, idx;
    while (f >> ep >> idx) {
      EDP_CHECK(ep >= 0 && ep < epochs && idx >= 0 && idx < n, "bad record ", ep, " ", idx, " in ", name);
      ++seen[static_cast<size_t>(ep)][static_cast<size_t>(idx)];
    }
  }
  closedir(d);
  for (int64_t ep = 0; ep < epochs; ++ep)
    for (int64_t i = 0; i < n; ++i) {
      const int k = seen[static_cast<size_t>(ep)][static_cast<size_t>(i)];
      EDP_CHECK(k == 1, "coverage: sample ", i, " of epoch ", ep + 1, " was seen ", k, " time(s) (", files,
                " record file(s))");
    }
  return std::to_string(epochs) + " epoch(s) x " + std::to_string(n) + " samples, each seen once (" +
         std::to_string(files) + " processes)";
}
}  // namespace

int main(int argc, char** argv) {
  train::Options o("elastic_sequence", "elastic::Job under planned size changes (a test program)");
  o.add("plan", "", "STEP:W[:GB],... size changes").add("record", "", "record directory (required)");
  o.add("ckpt", "", "checkpoint directory").add("limit", "3000", "training samples");
  o.add("epochs", "2", "epochs").add("batch", "32", "batch per worker at the start");
  o.add("ckpt-every", "0", "commit a checkpoint every N steps (0: every epoch)");
  o.add("die-at", "0", "rank 1 kills itself (SIGKILL) before step N, once (a marker in --record)");
  o.add("die-in-reshard", "-1", "this rank of the old world kills itself in the first move of a sharded optimizer "
        "state (EDP_FAULT=reshard:<rank>), once (a marker per rank in --record)");
  o.add_flag("new-rank-fails", "a rank started by a grow fails (throws) during its setup, before it joins");
  o.add_flag("new-rank-hangs", "a rank started by a grow never starts MPI (sleeps), so that its spawn does not return");
  o.add("settle-at", "0", "before step N, wait for a grow under way to join its new ranks (Job::settle)");
  o.add("model", "mlp", "mlp (Fashion-MNIST) or gpt (a tiny GPT on --limit token windows of 16)");
  o.add_flag("no-coverage", "do not check the coverage (a crash repeats the steps since the last checkpoint)");
  o.add("device", "cpu", "cpu or cuda (a rank's GPU: its local rank modulo the visible GPUs)");
  o.add("zero", "0", "1: the optimizer state sharded over the ranks, 2: the gradients too (JobOptions::zero_stage)").int_range(0, 2);
  o.parse(argc, argv);
  // A grow sets EDP_SPAWN_RANK_BASE on the ranks it starts. Ended by mpirun with the job.
  if (o.flag("new-rank-hangs") && std::getenv("EDP_SPAWN_RANK_BASE")) {
    sleep(600);
    return 1;
  }
  return comm::run_main(argc, argv, [&](comm::Communicator& world) {
    set_num_threads(1);
    const std::string record = o.str("record");
    EDP_CHECK(!record.empty(), "--record is required");
    const auto plan = parse_plan(o.str("plan"), o.i64("batch"));
    if (o.flag("new-rank-fails") && comm::spawned())
      throw Error("elastic_sequence: this new rank fails during its setup (--new-rank-fails)");
    Device device = Device::cpu();
    if (o.str("device") != "cpu") {
      EDP_CHECK(o.str("device") == "cuda", "--device: cpu or cuda, not ", o.str("device"));
      if (!cuda::available()) {
        std::printf("elastic_sequence: skipped, no GPU: %s\n", cuda::unavailable_reason().c_str());
        return 77;
      }
      device = Device::cuda(world.local_rank() % cuda::device_count());
      cuda::set_device(device.index);
    }
    const bool gpt = o.str("model") == "gpt";
    EDP_CHECK(gpt || o.str("model") == "mlp", "--model: mlp or gpt, not ", o.str("model"));
    constexpr int64_t kContext = 16;
    std::shared_ptr<const data::Dataset> train;
    std::shared_ptr<data::TensorDataset> test;
    std::shared_ptr<nn::Module> model;
    std::unique_ptr<optim::Optimizer> opt_ptr;
    if (gpt) {
      auto tokens = std::make_shared<data::TokenFile>(make_token_file(record, o.i64("limit") * kContext + 1));
      train = std::make_shared<data::TokenWindows>(tokens, kContext);
      manual_seed(7);
      model = nn::make<nn::GPT>(nn::GPTConfig{.vocab = 256, .context = kContext, .layers = 1, .dim = 16, .heads = 2});
      model->to(device);
      opt_ptr = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.1});
    } else {
      train = data::load_fashion_mnist(data::kFashionMnistDir, "train")->head(o.i64("limit"));
      test = data::load_fashion_mnist(data::kFashionMnistDir, "test");
      manual_seed(7);
      auto seq = nn::make<nn::Sequential>();
      seq->add(nn::make<nn::Flatten>(), "flatten");
      seq->add(nn::make<nn::Linear>(784, 64), "fc1");
      seq->add(nn::make<nn::ReLU>(), "relu");
      seq->add(nn::make<nn::Linear>(64, 10), "fc2");
      model = seq;
      model->to(device);
      opt_ptr = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    }
    optim::Optimizer& opt = *opt_ptr;
    elastic::JobOptions jo;
    jo.name = "elastic_sequence";
    jo.epochs = o.i64("epochs");
    jo.global_batch = o.i64("batch") * world.size();
    jo.lr = gpt ? 1e-3 : 0.05;
    if (gpt) jo.max_grad_norm = 1.0;
    jo.lr_base_batch = 32;
    jo.warmup_steps = 10;
    jo.checkpoint_dir = o.str("ckpt");
    jo.checkpoint_every = o.i64("ckpt-every");
    jo.control_file = record + "/control.json";
    jo.progress = false;
    jo.device = device;
    jo.zero_stage = static_cast<int>(o.i64("zero"));
    if (const int64_t r = o.i64("die-in-reshard"); r >= 0) {  // armed in the first run only
      const std::string marker = record + "/reshard-fault." + std::to_string(world.rank());
      if (access(marker.c_str(), F_OK) != 0) {
        std::ofstream(marker) << "armed\n";
        setenv("EDP_FAULT", ("reshard:" + std::to_string(r)).c_str(), 1);
      }
    }
    elastic::Job job(world, model, opt, train, jo);
    std::ofstream seen(record + "/seen." + std::to_string(getpid()), std::ios::app);
    std::ofstream where(record + "/where." + std::to_string(getpid()), std::ios::app);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    int placed_rank = -1, placed_size = -1;
    nn::SoftmaxCrossEntropy ce;
    nn::SequenceCrossEntropy sce;
    data::Batch b;
    while (job.next_epoch()) {
      while (job.next_batch(b)) {
        if (job.rank() != placed_rank || job.size() != placed_size) {
          placed_rank = job.rank();
          placed_size = job.size();
          // Log lines name the rank in the job, not in MPI's world (which a grow or shrink leaves
          // behind: the new ranks have a world of their own).
          const std::string want = placed_size > 1 ? "edp[r" + std::to_string(placed_rank) + "/" +
                                                         std::to_string(placed_size) + "]"
                                                   : "edp";
          EDP_CHECK(log::prefix() == want, "log prefix ", log::prefix(), " at rank ", placed_rank, " of ",
                    placed_size);
          where << "size=" << placed_size << " rank=" << placed_rank << " host=" << host << std::endl;
        }
        for (int64_t i : b.indices) seen << job.epoch() << ' ' << i << '\n';
        seen.flush();
        if (o.i64("die-at") == job.steps() + 1 && job.rank() == 1 && access((record + "/died").c_str(), F_OK) != 0) {
          std::ofstream(record + "/died") << "rank 1 at step " << job.steps() + 1 << "\n";
          std::fprintf(stderr, "elastic_sequence: rank 1 kills itself before step %lld\n",
                       static_cast<long long>(job.steps() + 1));
          std::fflush(stderr);
          raise(SIGKILL);
        }
        for (const Change& c : plan)
          if (job.is_root() && c.step == job.steps() + 1) write_control(jo.control_file, c);
        if (gpt) {
          const double loss = sce.forward(job.forward(b.x), b.y);
          job.backward(sce.backward());
          job.step(loss);
          continue;
        }
        const double loss = ce.forward(job.forward(b.x), b.y);
        job.backward(ce.backward());
        job.step(loss);
        if (o.i64("settle-at") == job.steps() + 1 && job.rescaling()) {  // a step boundary
          job.settle();
          if (job.is_root()) std::fprintf(stderr, "elastic_sequence: settled before step %lld\n",
                                          static_cast<long long>(job.steps() + 1));
        }
      }
    }
    if (!job.active()) return job.exit_code();
    const double acc = gpt ? 0.0 : train::evaluate(*model, *test, job.world()).accuracy;
    job.world().barrier();  // every record of the processes still here is written
    if (job.is_root()) {
      if (!o.flag("no-coverage"))
        std::printf("coverage: %s\n", check_coverage(record, jo.epochs, train->size()).c_str());
      uint64_t h = 1469598103934665603ull;
      for (nn::Parameter* p : model->parameters()) {
        const Tensor t = p->value.to(Device::cpu());
        const auto* c = static_cast<const unsigned char*>(t.raw());
        for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ c[i]) * 1099511628211ull;
      }
      std::printf("{\"workers\": %d, \"global_batch\": %lld, \"steps\": %lld, \"test_acc\": %.4f, \"digest\": \"%016" PRIx64
                  "\"}\n",
                  job.size(), static_cast<long long>(job.global_batch()), static_cast<long long>(job.steps()),
                  acc, h);
    }
    return 0;
  });
}
