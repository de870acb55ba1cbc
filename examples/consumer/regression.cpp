// A regression on a user's NumPy arrays (X.npy: float64 [N, F], y.npy: float64 [N]): an MLP with
// a mean-squared-error loss, then the trained model saved for inference.cpp. The README shows it.
#include <cstdio>

#include <edp/edp.h>

int main(int argc, char** argv) {
  using namespace edp;
  train::Options opts("regression", "Fits an MLP to X.npy -> y.npy and saves it to model.edp.");
  opts.add("data", ".", "folder of X.npy and y.npy").add("epochs", "20", "epochs").add("out", "model.edp", "model file");
  opts.parse(argc, argv);
  manual_seed(0);
  auto ds = data::load_npy(opts.str("data") + "/X.npy", opts.str("data") + "/y.npy");  // any dtype
  const int64_t features = ds->sample_shape()[0];
  nn::Sequential model{nn::make<nn::Linear>(features, 32), nn::make<nn::Tanh>(), nn::make<nn::Linear>(32, 1)};
  optim::AdamW opt(model.parameters(), {.lr = 0.01, .weight_decay = 0});
  data::DataLoader loader(ds, std::make_shared<data::RandomSampler>(ds->size(), 0), {.batch_size = 32});
  nn::MSELoss loss;
  for (int epoch = 0; epoch < opts.i64("epochs"); ++epoch) {
    loader.start_epoch(epoch);
    for (data::Batch b; loader.next(b);) {
      opt.zero_grad();
      loss.forward(model.forward(b.x), b.y);  // [B, 1] predictions against [B] targets
      model.backward(loss.backward());
      opt.step();
    }
  }
  const train::EvalResult r = train::evaluate(model, *ds);
  std::printf("after %ld epochs: mse %.5f  mae %.5f  rmse %.5f\n", static_cast<long>(opts.i64("epochs")), r.loss, r.mae, r.rmse);
  train::save_model(opts.str("out"), model, {{"features", std::to_string(features)}});
}
