// edp_bench_zero: what ZeRO stages 1 and 2 are for, measured on one run of a GPT trained
// data-parallel on the CPU: the optimizer-state bytes and the peak RSS per rank, and the step time,
// with the optimizer state sharded over the ranks (--zero 1), the gradients too (--zero 2), or
// neither (--zero 0). Run it once per setting
// under mpirun (each process's peak RSS is its own); bench/zero.sh runs the grid and PyTorch's
// ZeroRedundancyOptimizer beside it.
//
//   mpirun -np N edp_bench_zero [--zero 0|1|2] [--layers 4 --dim 256 --heads 4 --context 128]
//                               [--batch 8] [--steps 20] [--warmup 3]
// Data: random tokens (the memory and time of a step do not depend on them). Prints one line per
// rank and one JSON line (rank 0) with the medians over ranks.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "edp/comm/communicator.h"
#include "edp/core/cli.h"
#include "edp/core/random.h"
#include "edp/core/stopwatch.h"
#include "edp/core/threads.h"
#include "edp/ddp/ddp.h"
#include "edp/nn/gpt.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "edp/train/progress.h"

using namespace edp;

int main(int argc, char** argv) {
  return comm::run_main(argc, argv, [&](comm::Communicator& world) {
    cli::Options o("edp_bench_zero", "A GPT trained data-parallel with and without ZeRO stages 1 and 2: state bytes, "
                                     "peak RSS and step time per rank", "EDP_BENCH_");
    o.add("zero", "1", "0: every rank holds the whole optimizer state; 1: sharded over the ranks; 2: the gradients too").int_range(0, 2);
    o.add("layers", "4", "transformer blocks").int_range(1, 64);
    o.add("dim", "256", "model width").int_range(8, 8192);
    o.add("heads", "4", "attention heads").int_range(1, 128);
    o.add("context", "128", "tokens per sequence").int_range(2, 8192);
    o.add("batch", "8", "sequences per rank and step").int_range(1, 4096);
    o.add("steps", "20", "timed steps").int_range(1, 100000);
    o.add("warmup", "3", "steps before the timed ones").int_range(0, 1000);
    o.parse(argc, argv);
    const int zero = static_cast<int>(o.i64("zero"));
    const int64_t T = o.i64("context"), B = o.i64("batch");
    const nn::GPTConfig cfg{.vocab = 256, .context = T, .layers = o.i64("layers"), .dim = o.i64("dim"),
                            .heads = o.i64("heads"), .mlp_ratio = 4};
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(cfg);
    optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
    ddp::DistributedDataParallel net(model, world, {.zero_stage = zero});
    nn::SequenceCrossEntropy ce;
    Rng rng(derive_seed(7, static_cast<uint64_t>(world.rank())));
    Tensor x({B, T}, DType::I32), y({B, T}, DType::I32);
    std::vector<double> step_s;
    const int64_t warm = o.i64("warmup"), steps = o.i64("steps");
    for (int64_t s = 0; s < warm + steps; ++s) {
      for (int64_t i = 0; i < x.numel(); ++i) {
        x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(256));
        y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(256));
      }
      world.barrier();
      Stopwatch sw;
      opt.zero_grad();
      ce.forward(net.forward(x), y);
      net.backward(ce.backward());
      net.step(opt);
      if (s >= warm) step_s.push_back(sw.seconds());
    }
    std::sort(step_s.begin(), step_s.end());
    const double median = step_s[step_s.size() / 2];
    const int64_t state = net.optimizer_state_bytes(opt), rss = train::peak_rss_bytes();
    const int64_t params = model->num_parameters();
    std::printf("rank %d/%d zero %d: %lld parameters, optimizer state %.2f MiB, peak RSS %.1f MiB, step %.1f ms "
                "(median of %lld)\n",
                world.rank(), world.size(), zero, static_cast<long long>(params), state / 1048576.0, rss / 1048576.0,
                median * 1e3, static_cast<long long>(steps));
    std::fflush(stdout);
    // Rank 0 reports the largest state and RSS over the ranks and the slowest rank's median step.
    const int64_t state_max = world.allreduce_value<int64_t>(state, comm::ReduceOp::Max);
    const int64_t rss_max = world.allreduce_value<int64_t>(rss, comm::ReduceOp::Max);
    const double step_max = world.allreduce_value<double>(median, comm::ReduceOp::Max);
    if (world.rank() == 0)
      std::printf("%s\n", nlohmann::json{{"bench", "zero"}, {"impl", "edp"}, {"zero", zero}, {"ranks", world.size()},
                                         {"threads", num_threads()}, {"model", cfg.str()}, {"parameters", params},
                                         {"batch_per_rank", B}, {"steps", steps},
                                         {"optimizer_state_mib_per_rank", state_max / 1048576.0},
                                         {"peak_rss_mib_per_rank", rss_max / 1048576.0},
                                         {"step_ms", step_max * 1e3}}.dump().c_str());
    return 0;
  });
}
