// Helpers shared by the dataset readers (not part of the public API): turning bytes into
// normalised floats and describing a missing input file in a way the user can act on.
#pragma once
#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "edp/data/dataset.h"

namespace edp::data::detail {

// Per-channel lookup tables byte -> (byte/255 - mean[c]) / std[c]. Checks that `norm` has one
// value or `channels` values and positive finite stds; `who` names the caller in the message.
std::vector<std::vector<float>> normalize_tables(const Normalize& norm, int64_t channels,
                                                 const char* who);

// Converts `samples` samples of `channels` planes of `plane` bytes each (CHW order).
void bytes_to_features(const uint8_t* src, int64_t samples, int64_t channels, int64_t plane,
                       const std::vector<std::vector<float>>& tables, float* dst);

// "<path>: file not found" plus what to do (the Debian package for the Fashion-MNIST default
// folder, the download address otherwise); "<path>: is a directory" etc. Throws DataError.
void check_input_file(const std::string& path, const std::string& hint);

// The decoded-data cache of IDX images (idx.cpp): the copy at `copy` if it was made from a source
// with this content hash (files::fnv1a64) and size and its pixels' checksum holds; nullopt with
// the reason otherwise.
std::optional<IdxImages> read_decoded_cache(const std::string& copy, uint64_t src_hash, uint64_t src_size,
                                            std::string& why);
std::string encode_decoded_cache(const IdxImages& img, uint64_t src_hash, uint64_t src_size);
// A file mapped read-only (the whole of it; an empty file maps to nothing), unmapped when the
// last owner lets go.
struct Mapping {
  void* p = nullptr;
  size_t n = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
};
// check_input_file(path, hint), then opens it non-blocking as a regular file and maps it.
std::shared_ptr<const Mapping> map_file(const std::string& path, const std::string& hint);

// The hint for IDX files: apt-get for the Debian Fashion-MNIST folder, else the dataset's site.
std::string idx_missing_hint(const std::string& path);

}  // namespace edp::data::detail
