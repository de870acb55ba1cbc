// A DistributedDataParallel bucket (ddp.h): the flat buffer its parameters' gradients are reduced
// in, and where the bucket stands in the current backward. Internal to src/ddp.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/ddp/ddp.h"

namespace edp::ddp {

struct DistributedDataParallel::Bucket {
  // Unsharded: [numel + 1], the gradients, then the order-check element. Sharded: one block of
  // part + 1 per rank (part = ceil(numel / ranks)), each ending in an order-check element, the
  // last block's tail padding; `shard` is this rank's block (a view), where its reduced part lands.
  // zero_stage 2: `shard` is a tensor of its own (part + 1) and `buffer` exists only from the
  // bucket's first gradient of a backward until its reduce-scatter completed.
  Tensor buffer;
  Tensor shard;
  int64_t numel = 0, part = 0;
  std::vector<size_t> slots;
  size_t ready = 0;
  bool launched = false;
  comm::Request request;
  std::shared_ptr<std::atomic<int64_t>> comm_us = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace edp::ddp
