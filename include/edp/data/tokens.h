// Token streams for language models: a file of token ids read memory-mapped, the windows of it a
// model trains on, and the byte-level tokenizer.
//
// Token file (".tok"): a 24-byte header — the magic "EDPTOK01", uint32 bytes per token (1, 2 or
// 4), uint32 vocabulary size, uint64 token count, all little-endian — then the ids, little-endian,
// each below the vocabulary size. write_token_file() writes one atomically (files::write_atomic);
// TokenFile maps one read-only (a regular file only) and checks the header against the file's
// size and every id against the vocabulary, naming the byte offset of the first one outside it.
//
// TokenWindows is a Dataset over a token file: window i starts at token i·stride and holds
// context + 1 tokens; its features are the first `context` (int32 [context]) and its labels the
// last `context` (the next token at every position). With stride = context (the default) the
// windows tile the stream; every sampler, DistributedSampler included, then shuffles, shards and
// resumes them like any dataset's samples, so a rescale in place or a restart at another world
// size keeps every window seen exactly once per epoch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edp/data/dataset.h"

namespace edp::data {

void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab);

class TokenFile {
 public:
  // Throws DataError naming the file and the byte offset of what is wrong.
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  int64_t vocab() const { return vocab_; }
  int bytes_per_token() const { return width_; }
  const std::string& path() const { return path_; }
  int32_t at(int64_t i) const;  // no bounds check beyond an EDP_CHECK in debug use
  // Copies tokens [begin, begin + n) to out.
  void read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  int width_ = 0;
  int64_t vocab_ = 0, count_ = 0;
};

class TokenWindows : public Dataset {
 public:
  TokenWindows(std::shared_ptr<const TokenFile> tokens, int64_t context, int64_t stride = 0);
  int64_t size() const override { return windows_; }
  Shape sample_shape() const override { return Shape{context_}; }
  int num_classes() const override { return static_cast<int>(tokens_->vocab()); }
  DType feature_dtype() const override { return DType::I32; }
  Shape label_shape() const override { return Shape{context_}; }
  void get_sample(int64_t i, void* x, int32_t* y) const override;
  // Token windows have int32 features: get() is refused (use get_sample or a DataLoader).
  int32_t get(int64_t i, float* out) const override;
  int64_t context() const { return context_; }
  int64_t stride() const { return stride_; }
  const TokenFile& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const TokenFile> tokens_;
  int64_t context_, stride_, windows_;
};

// Bytes as tokens: vocabulary 256, id = the byte's value. Lossless for any text (UTF-8 included).
struct ByteTokenizer {
  static constexpr int64_t kVocab = 256;
  static std::vector<int32_t> encode(const std::string& text);
  // Ids outside [0, 256) are an error.
  static std::string decode(const std::vector<int32_t>& ids);
};

}  // namespace edp::data
