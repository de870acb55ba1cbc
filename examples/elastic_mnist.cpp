// An elastic data-parallel training program: Fashion-MNIST, a small MLP. Run it with
//   mpirun -np 2 ./elastic_mnist [--checkpoint-dir DIR]
//   edprun -np 2 --control-file F -- ./elastic_mnist --checkpoint-dir DIR
// It resumes from the newest checkpoint at any world size, and changes size on request (the
// control file): in place, or by a restart that edprun carries out.
#include <cstdio>

#include "edp/edp.h"

using namespace edp;

int main(int argc, char** argv) {
  train::Options opts("elastic_mnist", "An elastic MLP on Fashion-MNIST: 2 epochs at global batch 128.");
  opts.add("checkpoint-dir", "", "commit checkpoints here; resume from the newest one at any world size")
      .run_setting()  // a resume may change it: not part of the job's identity
      .add_accept_config_change();
  opts.parse(argc, argv);  // --help lists the options; an unknown one is an error (exit 2)
  return comm::run_main(argc, argv, [&](comm::Communicator& world) {
    const auto train = data::load_fashion_mnist(data::kFashionMnistDir, "train");
    const auto test = data::load_fashion_mnist(data::kFashionMnistDir, "test");
    manual_seed(1);
    auto model = nn::make<nn::Sequential>();
    model->add(nn::make<nn::Flatten>(), "flatten");
    model->add(nn::make<nn::Linear>(784, 128), "fc1");
    model->add(nn::make<nn::ReLU>(), "relu");
    model->add(nn::make<nn::Linear>(128, 10), "fc2");
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});

    elastic::JobOptions o;
    o.name = "elastic_mnist";
    o.epochs = 2;
    o.global_batch = 128;  // the optimizer's LR is for a global batch of 64: it follows (linear rule)
    o.warmup_steps = 50;
    o.checkpoint_dir = opts.str("checkpoint-dir");
    o.resume_may_change = opts.run_settings();
    o.accept_config_change = opts.flag("accept-config-change");
    elastic::Job job(world, model, opt, train, o);

    nn::SoftmaxCrossEntropy loss_fn;
    data::Batch b;
    while (job.next_epoch()) {
      while (job.next_batch(b)) {
        const double loss = loss_fn.forward(job.forward(b.x), b.y);
        job.backward(loss_fn.backward());
        job.step(loss);
      }
      if (!job.active()) break;  // this rank left the job, or the job restarts at another size
      const train::EvalResult r = train::evaluate(*model, *test, job.world());
      if (job.is_root())
        std::printf("epoch %lld: %d worker(s), train loss %.4f, test accuracy %.4f\n",
                    static_cast<long long>(job.epoch() + 1), job.size(), job.last_epoch().train_loss, r.accuracy);
    }
    return job.exit_code();
  });
}
