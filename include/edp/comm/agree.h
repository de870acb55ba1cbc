// One run, one configuration: the settings every rank must share, compared across ranks.
//
// Ranks started with different settings do not fail by themselves: a different batch size or
// sample limit gives them different step counts and they hang at the first collective one of
// them skips; a different learning rate trains diverged replicas to the end. check_agreement
// compares them up front and turns any difference into an error that names each differing
// setting, the ranks and their values, on every rank.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace edp::comm {

class Communicator;

using Setting = std::pair<std::string, std::string>;  // (name, value as text)

// Collective over `world`: every rank passes its settings (the same names in the same order;
// values as text). Returns when all values agree; otherwise throws edp::Error on every rank:
//   "ranks disagree on settings that must be the same on every rank (<what>):
//      batch: 64 on ranks 0,2,3; 32 on rank 1"
// Costs two small allgathers when the ranks agree (64-bit digests), a third with the differing
// values when they do not.
void check_agreement(Communicator& world, const std::vector<Setting>& settings, const std::string& what);

}  // namespace edp::comm
