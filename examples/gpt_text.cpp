// A small GPT trained on English text, data-parallel and elastic, in float32 or bfloat16 mixed
// precision: the byte-level fortunes corpus (scripts/prepare_text_corpus.sh), AdamW with
// decoupled weight decay (not on biases and LayerNorms), warmup + cosine LR, global-norm gradient
// clipping after the allreduce. Prints the validation loss at the end of each epoch and at the
// end, a sample of generated text, and a JSON summary line.
//
//   scripts/prepare_text_corpus.sh                              # once: .cache/corpus/{train,val}.tok
//   build/examples/gpt_text --layers 4 --dim 256 --heads 4 --context 128 --steps 300
//   mpirun -np 2 build/examples/gpt_text --bf16 ...             # 2 ranks; or under edprun
//
// Built on elastic::Job: checkpoints (--checkpoint-dir) resume at any world size, and a request
// in the control file ({"workers": W}) changes the job's size in place mid-run; every token
// window is still trained on exactly once per epoch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/classifier.h"
#include "edp/edp.h"

using namespace edp;

namespace {

// Where the corpus is: --data when given; else .cache/corpus (a source tree, where
// scripts/prepare_text_corpus.sh writes it), else the user's cache (where the installed script
// writes it: ${XDG_CACHE_HOME:-~/.cache}/edp/corpus). None there: an error naming the script.
std::string corpus_dir(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string user = xdg && *xdg ? std::string(xdg) + "/edp/corpus"
                           : home && *home ? std::string(home) + "/.cache/edp/corpus"
                                           : std::string();
  for (const std::string& d : {std::string(".cache/corpus"), user})
    if (!d.empty() && fs::exists(d + "/train.tok")) return d;
  const fs::path exe = self_executable();
  const fs::path installed = exe.parent_path().parent_path() / "share/edp/scripts/prepare_text_corpus.sh";
  const std::string script = !exe.empty() && fs::exists(installed) ? installed.string() : "scripts/prepare_text_corpus.sh";
  throw DataError("gpt_text: no corpus: neither .cache/corpus nor " + (user.empty() ? "~/.cache/edp/corpus" : user) +
                  " holds train.tok. Make it with " + script + " (once, a few seconds), or give --data DIR");
}

// Mean next-token loss over the first `limit` validation windows (0: all), split over the ranks
// and summed in double, in eval mode.
double validation_loss(nn::GPT& model, const data::TokenWindows& val, int64_t limit, int64_t batch,
                       comm::Communicator& world, Device device) {
  const int64_t n = limit > 0 ? std::min(limit, val.size()) : val.size();
  const int64_t T = val.context();
  model.eval();
  double sums[2] = {0, 0};  // Σ loss·count, Σ count
  nn::SequenceCrossEntropy ce;
  for (int64_t first = world.rank() * batch; first < n; first += world.size() * batch) {
    const int64_t b = std::min(batch, n - first);
    Tensor x({b, T}, DType::I32), y({b, T}, DType::I32);
    for (int64_t i = 0; i < b; ++i)
      val.get_sample(first + i, x.data<int32_t>() + i * T, y.data<int32_t>() + i * T);
    const double l = ce.forward(model.forward(x.to(device)), y.to(device));
    sums[0] += l * static_cast<double>(ce.counted());
    sums[1] += static_cast<double>(ce.counted());
  }
  model.train();
  world.allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

int train_gpt(comm::Communicator& world, const train::Options& o) {
  set_num_threads(static_cast<int>(o.i64("threads")));
  const Device device = Device::parse(o.str("device"));
  EDP_CHECK(device.is_cpu() || cuda::available(), "--device ", o.str("device"), ": ", cuda::unavailable_reason());
  if (device.is_cuda()) cuda::set_device(device.index);
  comm::set_comm_timeout(o.f64("comm-timeout"));
  // bfloat16 products where the hardware has them; elsewhere the same program in float32.
  bool bf16 = o.flag("bf16");
  std::string why;
  if (bf16 && device.is_cpu() && !ops::cpu_bf16_available(&why)) {
    if (world.rank() == 0) std::fprintf(stderr, "gpt_text: --bf16: %s; training in float32\n", why.c_str());
    bf16 = false;
  }
  ops::set_matmul_bf16(bf16);

  const std::string dir = corpus_dir(o.str("data"));
  auto train_tokens = std::make_shared<data::TokenFile>(dir + "/train.tok");
  auto val_tokens = std::make_shared<data::TokenFile>(dir + "/val.tok");
  const int64_t T = o.i64("context");
  auto train_set = std::make_shared<data::TokenWindows>(train_tokens, T);
  const data::TokenWindows val_set(val_tokens, T);

  const nn::GPTConfig cfg{.vocab = train_tokens->vocab(), .context = T, .layers = o.i64("layers"),
                          .dim = o.i64("dim"), .heads = o.i64("heads"), .mlp_ratio = 4};
  manual_seed(static_cast<uint64_t>(o.i64("seed")));
  auto model = std::make_shared<nn::GPT>(cfg);
  model->to(device);
  optim::AdamW opt(model->parameters(), {.lr = o.f64("lr"), .beta1 = 0.9, .beta2 = o.f64("beta2"), .eps = 1e-8,
                                         .weight_decay = o.f64("weight-decay")});
  std::vector<comm::Setting> settings;
  for (const auto& [k, v] : o.values())
    if (k != "threads" && k != "device" && k != "control-file" && k != "comm-timeout" && k != "data")
      settings.emplace_back("--" + k, v);
  settings.emplace_back("bfloat16 products", bf16 ? "on" : "off");
  // The job's rules; the other JobOptions keep their defaults (docs/elastic.md).
  elastic::JobOptions jo;
  jo.name = "gpt_text";
  jo.epochs = o.i64("epochs");
  jo.global_batch = o.i64("batch") * world.size();
  jo.lr = o.f64("lr");
  jo.lr_scaling = "none";  // AdamW: the same peak rate at any size
  jo.warmup_steps = o.i64("warmup-steps");
  jo.max_micro_batch = o.i64("max-micro-batch");
  jo.seed = static_cast<uint64_t>(o.i64("seed"));
  jo.checkpoint_dir = o.str("checkpoint-dir");
  jo.checkpoint_every = o.i64("checkpoint-every");
  jo.control_file = o.str("control-file");
  jo.control_every = o.i64("control-every");
  jo.device = device;
  jo.max_grad_norm = o.f64("clip");
  jo.zero_stage = static_cast<int>(o.i64("zero"));
  jo.progress = !o.flag("no-progress");
  // --threads given: that count, kept after a rescale; otherwise the threads follow the ranks on the host.
  jo.threads = o.given("threads") ? static_cast<int>(o.i64("threads")) : 0;
  jo.settings = settings;
  // How long, how often, what to print (the options marked run_setting()): a resume may change
  // them; every other flag is the training run's identity, recorded in each checkpoint.
  jo.resume_may_change = o.run_settings();
  jo.accept_config_change = o.flag("accept-config-change");
  elastic::Job job(world, model, opt, train_set, jo);
  if (job.is_root())
    std::fprintf(stderr,
                 "gpt_text: %s, %lld parameters; %lld train / %lld validation windows of %lld tokens; %d rank(s) x "
                 "batch %lld; %s products%s; %d thread(s) per rank, on %s\n",
                 cfg.str().c_str(), static_cast<long long>(model->num_parameters()),
                 static_cast<long long>(train_set->size()), static_cast<long long>(val_set.size()),
                 static_cast<long long>(T), job.size(), static_cast<long long>(job.batch_per_rank()),
                 bf16 ? "bfloat16" : "float32", device.is_cpu() ? (std::string(" (oneDNN ISA ") + ops::cpu_isa_name() + ")").c_str() : "",
                 num_threads(), device.str().c_str());

  const int64_t max_steps = o.i64("steps"), stop_after = o.i64("stop-after-steps"), warm = 3;
  nn::SequenceCrossEntropy ce;
  data::Batch b;
  Stopwatch clock;
  double timed_s = 0, last_loss = 0;
  int64_t timed_tokens = 0;
  // A run resumed at or past --steps (started again after it finished) trains nothing more.
  bool done = max_steps > 0 && job.steps() >= max_steps;
  if (done) {
    if (job.is_root())
      std::fprintf(stderr, "gpt_text: the checkpoint is at step %lld, --steps %lld: nothing to train\n",
                   static_cast<long long>(job.steps()), static_cast<long long>(max_steps));
    job.end();
  }
  while (!done && job.next_epoch()) {
    while (job.next_batch(b)) {
      if (job.steps() == warm) clock.reset();  // the first steps plan oneDNN primitives and fill caches
      const double loss = ce.forward(job.forward(b.x), b.y);
      job.backward(ce.backward());
      job.step(loss);
      last_loss = loss;
      if (job.steps() > warm) timed_tokens += b.x.numel() * job.size();
      if (stop_after > 0 && job.steps() >= stop_after) {
        if (job.is_root()) std::fprintf(stderr, "gpt_text: stopping after step %lld (--stop-after-steps)\n",
                                        static_cast<long long>(job.steps()));
        job.world().barrier();
        return 3;
      }
      if (max_steps > 0 && job.steps() >= max_steps) {
        job.end();
        done = true;
        break;
      }
    }
    if (!job.active()) break;
    if (!done) {
      const double vl = validation_loss(*model, val_set, o.i64("eval-windows"), o.i64("batch"), job.world(), device);
      if (job.is_root())
        std::fprintf(stderr, "epoch %lld: train loss %.4f  validation loss %.4f (%.3f bits/byte)\n",
                     static_cast<long long>(job.epoch() + 1), job.last_epoch().train_loss, vl, vl / std::log(2.0));
    }
  }
  if (!job.active()) return job.exit_code();
  if (done) job.finish();  // stopped at --steps: the divergence guard judges the last steps
  timed_s = clock.seconds();
  const double val_loss = validation_loss(*model, val_set, o.i64("eval-windows"), o.i64("batch"), job.world(), device);
  const double rss = job.world().allreduce_value<double>(train::peak_rss_bytes() / 1048576.0, comm::ReduceOp::Max);
  double gpu_mb = 0;  // the most device memory the rank's allocator held at once
#if EDP_HAVE_CUDA
  if (device.is_cuda()) gpu_mb = static_cast<double>(cuda::allocator_stats(device.index).peak_reserved_bytes) / 1048576.0;
#endif
  gpu_mb = job.world().allreduce_value<double>(gpu_mb, comm::ReduceOp::Max);
  if (job.is_root()) {
    const std::string prompt = o.str("prompt");
    const auto ids = model->generate(data::ByteTokenizer::encode(prompt), o.i64("sample-tokens"), 0.8, 0,
                                     static_cast<uint64_t>(o.i64("seed")));
    std::fprintf(stderr, "validation loss %.4f after %lld steps\nsample:\n%s\n", val_loss,
                 static_cast<long long>(job.steps()), data::ByteTokenizer::decode(ids).c_str());
    const double tps = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0.0;
    const double gflops = tps * model->train_flops_per_token(T) / 1e9;
    std::printf("{\"model\": \"gpt_text\", \"layers\": %lld, \"dim\": %lld, \"heads\": %lld, \"context\": %lld, "
                "\"parameters\": %lld, \"world_size\": %d, \"threads\": %d, \"batch\": %lld, \"bf16\": %s, "
                "\"steps\": %lld, \"tokens_per_s\": %.1f, \"gflops\": %.2f, \"train_loss\": %.4f, \"val_loss\": %.4f, "
                "\"peak_rss_mb_per_rank\": %.1f, \"peak_gpu_mb_per_rank\": %.1f, \"zero\": %lld, \"cpu_isa\": \"%s\"}\n",
                static_cast<long long>(cfg.layers), static_cast<long long>(cfg.dim), static_cast<long long>(cfg.heads),
                static_cast<long long>(T), static_cast<long long>(model->num_parameters()), job.size(), num_threads(),
                static_cast<long long>(job.batch_per_rank()), bf16 ? "true" : "false",
                static_cast<long long>(job.steps()), tps, gflops, last_loss, val_loss, rss, gpu_mb,
                static_cast<long long>(o.i64("zero")), ops::cpu_isa_name());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int default_threads = examples::default_threads_per_rank();
  train::Options o("gpt_text", "a small GPT on English text (byte-level), data-parallel and elastic");
  o.add("data", "", "directory with train.tok and val.tok (default: .cache/corpus in a source tree, else ~/.cache/edp/corpus; prepare_text_corpus.sh makes it)")
      .add("layers", "4", "transformer blocks")
      .add("dim", "256", "model width")
      .add("heads", "4", "attention heads (dim must be a multiple)")
      .add("context", "128", "tokens per training window")
      .add("batch", "16", "windows per rank per step")
      .add("epochs", "1", "passes over the training windows").run_setting()
      .add("steps", "0", "stop after N optimizer steps (0: train every epoch)").run_setting()
      .add("lr", "1e-3", "peak learning rate (AdamW)")
      .add("beta2", "0.99", "AdamW's second-moment decay")
      .add("weight-decay", "0.1", "AdamW's decoupled weight decay (not on biases and LayerNorms)")
      .add("warmup-steps", "50", "linear LR warmup steps, then cosine decay to 0 at the end of the last epoch")
      .add("max-micro-batch", "0", "the most windows per forward/backward on a rank; a larger per-rank batch is accumulated in micro-batches (0: no limit)").int_range(0, 1 << 30).run_setting()
      .add("clip", "1.0", "clip the gradients' global norm to this (0: no clipping)")
      .add("zero", "0", "1: the optimizer state sharded over the ranks (ZeRO stage 1); 2: the gradients too (ZeRO stage 2); 0: every rank holds it all")
      .int_range(0, 2)
      .run_setting()
      .add("threads", std::to_string(default_threads), "CPU threads per rank")
      .add("seed", "1337", "seed for initialisation, data order and sampling")
      .add("eval-windows", "256", "validation windows to evaluate (0: all)").run_setting()
      .add("sample-tokens", "200", "bytes of text to generate at the end").run_setting()
      .add("prompt", "The ", "the generated sample's beginning").run_setting()
      .add("device", "cpu", "cpu, cuda or cuda:N")
      .add("checkpoint-dir", "", "keep checkpoints here and resume from the newest one (empty: none)").run_setting()
      .add("checkpoint-every", "0", "commit a checkpoint every N steps (0: at the end of every epoch)").run_setting()
      .add("stop-after-steps", "0", "stop with exit code 3 after N steps, as a preempted job would (testing)").run_setting()
      .add("control-file", "", "elastic control file (default: EDP_CONTROL_FILE, set by edprun --control-file)")
      .add("control-every", "1", "look at the control file every N steps").run_setting()
      .add("comm-timeout", knobs::find("EDP_COMM_TIMEOUT").def, "seconds a collective may wait (0: forever)")
      .add_flag("bf16", "matrix products in bfloat16 (fp32 master weights); float32 with a notice where the CPU lacks it")
      .add_flag("no-progress", "no progress line").run_setting()
      .add_accept_config_change();
  o.parse(argc, argv);
  return comm::run_main(argc, argv, [&](comm::Communicator& world) { return train_gpt(world, o); });
}
