// Everything a training program needs, in one include: tensors and devices, the op set, layers,
// optimizers and schedules, data (datasets, loaders, the distributed sampler), communicators and
// DistributedDataParallel, checkpoints, training helpers and the elastic protocol.
//
// Not included (scripts/check_layers.py checks that every public header is in one list):
//   edp/backend/cuda_ops.h       the CUDA ops called directly (tests, benchmarks); edp/backend/
//                                ops.h dispatches to them
//   edp/launch/edprun.h          edprun's entry point (the launcher tool)
//   edp/launch/process.h         process identity (pid, start time) for launchers' records
//   edp/autoscale/cluster_sim.h  the autoscaler's optimizer, policies, simulators, throughput
//   edp/autoscale/goodput.h      model and live planning (the edp-autoscale tool and programs that
//   edp/autoscale/live.h         plan clusters)
//   edp/autoscale/memory.h
//   edp/autoscale/online.h
//   edp/autoscale/optimizer.h
//   edp/autoscale/plan.h
//   edp/autoscale/policy.h
//   edp/autoscale/simulator.h
//   edp/autoscale/throughput.h
//   edp/autoscale/typed_optimizer.h
#pragma once
#include "edp/config.h"

#include "edp/core/allocator.h"
#include "edp/core/cli.h"
#include "edp/core/dtype.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/process.h"
#include "edp/core/random.h"
#include "edp/core/stopwatch.h"
#include "edp/core/tensor.h"
#include "edp/core/threads.h"
#include "edp/core/timeline.h"
#include "edp/cuda/runtime.h"
#include "edp/backend/ops.h"
#include "edp/nn/gpt.h"
#include "edp/nn/gradcheck.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"
#include "edp/comm/agree.h"
#include "edp/comm/colocated.h"
#include "edp/comm/comm_thread.h"
#include "edp/comm/communicator.h"
#include "edp/comm/device.h"
#include "edp/comm/layout.h"
#include "edp/comm/membership.h"
#include "edp/comm/nccl.h"
#include "edp/comm/stall.h"
#include "edp/ddp/ddp.h"
#include "edp/ddp/shard.h"
#include "edp/data/arrays.h"
#include "edp/data/dataset.h"
#include "edp/data/distributed_loader.h"
#include "edp/data/distributed_sampler.h"
#include "edp/data/image_folder.h"
#include "edp/data/loader.h"
#include "edp/data/tokens.h"
#include "edp/train/checkpoint.h"
#include "edp/train/evaluate.h"
#include "edp/train/options.h"
#include "edp/train/progress.h"
#include "edp/train/shards.h"
#include "edp/train/state_dict.h"
#include "edp/elastic/allowed.h"
#include "edp/elastic/elastic.h"
#include "edp/elastic/events.h"
#include "edp/elastic/job.h"
#include "edp/launch/placement.h"
