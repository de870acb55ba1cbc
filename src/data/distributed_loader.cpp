#include "edp/data/distributed_loader.h"

#include "edp/core/error.h"

namespace edp::data {

DistributedLoader::DistributedLoader(std::shared_ptr<const Dataset> dataset, uint64_t seed, int world_size, int rank,
                                     int64_t batch_size, DistributedLoaderOptions options)
    : dataset_(std::move(dataset)), seed_(seed), opt_(options) {
  EDP_CHECK(dataset_ != nullptr, "DistributedLoader: no dataset");
  build(world_size, rank, batch_size, nullptr);
}

void DistributedLoader::build(int world_size, int rank, int64_t batch_size, const SamplerState* state) {
  loader_.reset();  // stops its workers before the sampler they read goes away
  sampler_ = std::make_shared<DistributedSampler>(
      dataset_->size(), seed_, world_size, rank,
      DistributedSamplerOptions{.batch_size = batch_size, .shuffle = opt_.shuffle, .tail = opt_.tail});
  if (state) sampler_->load_state(*state);
  loader_ = std::make_unique<DataLoader>(
      dataset_, sampler_,
      LoaderOptions{.batch_size = batch_size, .drop_last = false, .workers = opt_.workers, .prefetch = opt_.prefetch});
  if (started_) loader_->start_epoch(sampler_->epoch());
}

void DistributedLoader::start_epoch(int64_t epoch) {
  started_ = true;
  loader_->start_epoch(epoch);  // sets the sampler's epoch: the same one keeps the position
}

bool DistributedLoader::next(Step& out) {
  EDP_CHECK(started_, "DistributedLoader::next before start_epoch");
  if (sampler_->steps_remaining() == 0) return false;
  out.local = sampler_->step_local_count(0);
  out.global = sampler_->step_global_count(0);
  out.batch = Batch{};
  if (out.local > 0) {
    EDP_CHECK(loader_->next(out.batch) && out.batch.size() == out.local,
              "DistributedLoader: the data loader and the sampler disagree at position ", sampler_->position(),
              " of epoch ", sampler_->epoch());
  }
  sampler_->advance();
  return true;
}

void DistributedLoader::reshard(int world_size, int rank, int64_t batch_size) {
  const SamplerState s = sampler_->state();
  build(world_size, rank, batch_size, &s);
}

void DistributedLoader::load_state(const SamplerState& s) {
  build(sampler_->world_size(), sampler_->rank(), sampler_->batch_size(), &s);
}

int64_t DistributedLoader::steps_per_epoch() const {
  const int64_t gb = sampler_->global_batch_size(), n = sampler_->dataset_size();
  return opt_.tail == TailPolicy::Drop ? n / gb : (n + gb - 1) / gb;
}

}  // namespace edp::data
