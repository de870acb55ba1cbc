// Inference with a model saved by regression.cpp: the same layers built again, the weights
// loaded by name, predictions for the first rows of X.npy and the error over all of y.npy.
#include <cstdio>
#include <string>

#include <edp/edp.h>

int main(int argc, char** argv) {
  using namespace edp;
  train::Options opts("inference", "Loads model.edp and predicts y from X.npy.");
  opts.add("data", ".", "folder of X.npy and y.npy").add("model", "model.edp", "model file");
  opts.parse(argc, argv);
  auto ds = data::load_npy(opts.str("data") + "/X.npy", opts.str("data") + "/y.npy");
  const int64_t features = ds->sample_shape()[0];
  nn::Sequential model{nn::make<nn::Linear>(features, 32), nn::make<nn::Tanh>(), nn::make<nn::Linear>(32, 1)};
  const auto meta = train::load_model(opts.str("model"), model);  // throws naming any mismatch
  model.eval();
  std::printf("loaded %s (saved by edp %s)\n", opts.str("model").c_str(), meta.at("build.version").c_str());
  Tensor x({3, features}, DType::F32);
  ds->features().read_f32(/*row=*/0, /*rows=*/3, x.data<float>());  // converted from float64
  const Tensor y = model.forward(x);
  for (int64_t i = 0; i < 3; ++i) std::printf("sample %ld: predicted %.4f\n", static_cast<long>(i), y.item(i));
  const train::EvalResult r = train::evaluate(model, *ds);
  std::printf("over %ld samples: mse %.5f  mae %.5f  rmse %.5f\n", static_cast<long>(r.samples), r.loss, r.mae, r.rmse);
}
