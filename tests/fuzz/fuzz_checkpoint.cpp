// Fuzz target: the checkpoint decoder. The CRC-32 trailer would make nearly every mutation fail
// at the checksum, so for inputs whose first byte is odd the target appends a valid trailer to the
// rest (the body), and the decoder's every length check below the checksum is reached.
#include <cstring>
#include <vector>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/train/checkpoint.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<char> bytes(reinterpret_cast<const char*>(data) + 1, reinterpret_cast<const char*>(data) + size);
  if (data[0] & 1) {
    const uint32_t crc = edp::files::crc32(bytes.data(), bytes.size());
    const char* end = "EDPCKEND";
    bytes.insert(bytes.end(), reinterpret_cast<const char*>(&crc), reinterpret_cast<const char*>(&crc) + 4);
    bytes.insert(bytes.end(), end, end + 8);
  }
  try {
    const edp::train::Checkpoint c = edp::train::decode_checkpoint(bytes, "fuzz input");
    // What a decoded checkpoint promises: every tensor holds exactly its shape's bytes, and it
    // encodes back to the same bytes.
    for (const auto& [name, t] : c.tensors)
      if (t.defined() && t.nbytes() != static_cast<size_t>(t.numel()) * edp::dtype_size(t.dtype())) std::abort();
    if (edp::train::encode_checkpoint(c) != bytes) {
      // Metadata is a map: keys given twice or out of order encode differently; decoding again
      // must give the same checkpoint.
      const edp::train::Checkpoint again = edp::train::decode_checkpoint(edp::train::encode_checkpoint(c), "again");
      if (again.meta != c.meta || again.tensors.size() != c.tensors.size()) std::abort();
    }
  } catch (const edp::Error&) {
  }
  return 0;
}
