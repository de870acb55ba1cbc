// Data-parallel training as one program for any number of ranks (mpirun -np N, edprun, Slurm, or
// alone): each step's global batch is split over the ranks, and the gradients are averaged by
// DistributedDataParallel while backward runs. Correct for any dataset size: in an epoch's last,
// uneven step a rank may get fewer samples or none, and its gradient is weighted by its share.
// The README shows this file; the tests run it on 2 and 3 ranks with sizes that do not divide.
#include <cstdio>

#include <edp/edp.h>

int main(int argc, char** argv) {
  using namespace edp;
  train::Options opts("ddp_program", "Trains a 784-128-10 MLP on Fashion-MNIST, data-parallel.");
  opts.add("data", data::kFashionMnistDir, "folder of the Fashion-MNIST IDX files")
      .add("epochs", "1", "epochs").add("limit", "0", "the first N training samples (0: all)");
  opts.parse(argc, argv);
  return comm::run_main(argc, argv, [&](comm::Communicator& world) {
    manual_seed(0);
    auto train = data::load_fashion_mnist(opts.str("data"), "train");
    if (opts.i64("limit") > 0) train = train->head(opts.i64("limit"));
    auto test = data::load_fashion_mnist(opts.str("data"), "test");
    auto model = nn::make<nn::Sequential>({nn::make<nn::Flatten>(), nn::make<nn::Linear>(784, 128),
                                           nn::make<nn::ReLU>(), nn::make<nn::Linear>(128, 10)});
    ddp::DistributedDataParallel dmodel(model, world);  // checks the replicas agree, broadcasts rank 0's
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    data::DistributedLoader loader(train, /*seed=*/0, world.size(), world.rank(), /*batch per rank=*/64);
    nn::SoftmaxCrossEntropy loss;
    for (int epoch = 0; epoch < opts.i64("epochs"); ++epoch) {
      loader.start_epoch(epoch);
      for (data::DistributedLoader::Step s; loader.next(s);) {
        opt.zero_grad();
        dmodel.set_step_weight(static_cast<double>(s.local) / static_cast<double>(s.global));
        if (s.local > 0) {
          loss.forward(dmodel.forward(s.batch.x), s.batch.y);
          dmodel.backward(loss.backward());
        } else {
          dmodel.sync_without_backward();  // no samples in this step: still part of its allreduces
        }
        dmodel.step(opt);
      }
      const train::EvalResult r = train::evaluate(*model, *test, world);  // each rank a share
      if (world.rank() == 0)
        std::printf("epoch %d: %ld steps on %d rank(s), test accuracy %.4f\n", epoch,
                    static_cast<long>(loader.steps_per_epoch()), world.size(), r.accuracy);
    }
    return 0;
  });
}
