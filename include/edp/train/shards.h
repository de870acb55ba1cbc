// Sharded checkpoints: the optimizer state of a sharded job (ZeRO stage 1) written by every rank,
// its own part, beside the checkpoint; resumed at any world size, sharded or not.
//
// Layout of a checkpoint ckpt-<step>.edp of a job sharded over W ranks:
//   ckpt-<step>.edp                  the model, the sampler, the counters and the optimizer's step
//                                    count (train::capture without the optimizer's tensors), and
//                                    the manifest in its metadata: optim.state = "sharded",
//                                    optim.shards = W, and per rank r optim.shard.<r>.bytes,
//                                    optim.shard.<r>.crc (CRC-32 of the file) and optim.shard.<r>.runs
//                                    (its runs: "param:offset:length,...", parameters by index)
//   ckpt-<step>.edp.shard-<r>-of-<W> rank r's part, in the checkpoint format (edp/train/checkpoint.h):
//                                    a tensor "optim.<q>.<parameter name>@<offset>" per run and state
//                                    tensor q (AdamW: q = 0, 1 for its two moments)
// Every rank writes its part (atomically) first; the ranks exchange the parts' checksums; then
// rank 0 writes the checkpoint, so a checkpoint that exists has all its parts. CheckpointDir keeps
// and removes the parts with their checkpoint, and latest() skips a checkpoint whose parts are
// missing or of another size (the reason on stderr). The directory must be one the ranks share.
//
// read_shards() gives a rank the runs it asks for (its part at the new world size, or every
// parameter whole for an unsharded job): it reads only the parts that hold some of them, checks
// each against the manifest's checksum, and checks that every element asked for was found.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/ddp/shard.h"
#include "edp/train/checkpoint.h"

namespace edp::nn {
struct Parameter;
}

namespace edp::train {

// Whether `c` keeps its optimizer state in parts beside it.
bool is_sharded(const Checkpoint& c);

// Writes this rank's part of the checkpoint that will be written at `checkpoint` (collective over
// `comm`, whose ranks are the parts' owners: part.world == comm.size()). Returns, on every rank,
// the manifest entries to add to the checkpoint's metadata. Every rank throws alike when a rank
// could not write its part, or when rank 0 does not see every part (a directory not shared).
std::map<std::string, std::string> write_shard(comm::Communicator& comm, const std::string& checkpoint,
                                               const ddp::StateShard& part, const std::vector<nn::Parameter*>& params,
                                               const ddp::ShardLayout& layout);

// The state of the runs `want` (of world `world`, rank `rank`: what ddp::DistributedDataParallel::
// put_optimizer_state takes) from the parts of checkpoint `c`, read from `path`. DataError naming
// the file when a part is missing, damaged, of another checkpoint or of another model.
ddp::StateShard read_shards(const Checkpoint& c, const std::string& path, const std::vector<ddp::ShardRun>& want,
                            int world, int rank, const std::vector<nn::Parameter*>& params);

}  // namespace edp::train
