// The NCCL backend of edp::comm::Communicator: one rank per GPU, collectives on GPU buffers
// through NCCL, bootstrapped over an existing communicator (the MPI world): the ncclUniqueId is
// broadcast over it. No NCCL or CUDA header is included here.
//
// Stream semantics (as PyTorch's NCCL process group): a collective on device buffers is
// enqueued on the communicator's own stream after the calling thread's current stream (see
// edp/cuda/runtime.h) has reached the call, and on return — or on Request::wait() for the
// non-blocking variants — the caller's current stream waits for it. The host is not blocked:
// kernels enqueued afterwards see the result; host code that reads device results must
// synchronise the stream as usual. Host buffers are staged through device memory and those
// calls return with the result in place (host-blocking). Avg divides the sum by size() in the
// buffer's type (exact for integer-valued sums divisible by size, as the MPI backend).
//
// NCCL refuses two ranks on one GPU. make_nccl_communicator checks first: every rank's GPU
// (UUID, host, PCI bus id) is gathered over the bootstrap communicator, and if two ranks share a
// GPU every rank throws the same edp::Error, naming the ranks and pointing to the several-ranks-
// per-GPU path (edprun --ranks-per-gpu), instead of NCCL's "Duplicate GPU detected".
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"

namespace edp::comm {

// One rank's GPU, as exchanged before NCCL starts.
struct GpuIdentity {
  std::array<uint8_t, 16> uuid{};
  int32_t device = -1;     // CUDA ordinal within the rank's visible devices
  std::string pci_bus_id;  // up to 27 characters
  std::string host;        // up to 79 characters
};
constexpr int64_t kGpuIdentityBytes = 128;
// Fixed-size wire form (for the allgather) and back.
std::array<uint8_t, kGpuIdentityBytes> pack_gpu_identity(const GpuIdentity& g);
GpuIdentity unpack_gpu_identity(const uint8_t* bytes);
// Empty when no two ranks share a GPU; otherwise the error message every rank throws. Pure
// function of the gathered identities (rank r's at index r), so all ranks agree.
std::string duplicate_gpu_error(const std::vector<GpuIdentity>& ranks);
// Collective over `world`: every rank's GPU (`device`, a CUDA ordinal of this rank), rank r's at
// index r. Needs a CUDA build and the device.
std::vector<GpuIdentity> gather_gpu_identities(Communicator& world, int device);

// True when this build has NCCL and a CUDA device is visible.
bool nccl_available();
// NCCL's version as "2.28.3" ("" without NCCL).
std::string nccl_version();

// Collective over `bootstrap` (every rank calls it). device < 0: the rank's local rank modulo
// the visible devices. The result keeps its own duplicate of `bootstrap` for control traffic.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device = -1);

}  // namespace edp::comm
