// Token files (written atomically, read memory-mapped), token windows, the byte tokenizer
// (include/edp/data/tokens.h).
#include "edp/data/tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {
constexpr char kMagic[8] = {'E', 'D', 'P', 'T', 'O', 'K', '0', '1'};
constexpr size_t kHeader = 24;

template <typename T>
T read_le(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}
template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace

void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab) {
  EDP_CHECK(vocab > 0 && vocab <= (int64_t{1} << 31), "write_token_file(", path, "): vocabulary ", vocab,
            " must be in [1, 2^31]");
  const uint32_t width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
  std::string bytes(kMagic, sizeof kMagic);
  put_le<uint32_t>(bytes, width);
  put_le<uint32_t>(bytes, static_cast<uint32_t>(vocab));
  put_le<uint64_t>(bytes, static_cast<uint64_t>(ids.size()));
  bytes.reserve(kHeader + ids.size() * width);
  for (size_t i = 0; i < ids.size(); ++i) {
    EDP_CHECK(ids[i] >= 0 && ids[i] < vocab, "write_token_file(", path, "): token ", i, " is ", ids[i],
              ", outside the vocabulary [0, ", vocab, ")");
    put_le<uint32_t>(bytes, static_cast<uint32_t>(ids[i]));
    bytes.resize(bytes.size() - (4 - width));  // keep the low `width` bytes
  }
  try {
    files::write_atomic(path, bytes);
  } catch (const Error& e) {
    throw DataError(concat(path, ": cannot write the token file: ", e.what()));
  }
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  detail::check_input_file(path, "make one with scripts/prepare_text_corpus.sh or data::write_token_file");
  uint64_t size = 0;
  const int fd = files::open_regular(path, "", &size);  // a regular file (a FIFO cannot be mapped)
  map_bytes_ = static_cast<size_t>(size);
  if (map_bytes_ < kHeader) {
    ::close(fd);
    throw DataError(concat(path, ": ", map_bytes_, " bytes, shorter than the ", kHeader,
                           "-byte header of a token file"));
  }
  void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw DataError(concat(path, ": cannot map (", std::strerror(errno), ")"));
  map_ = static_cast<const uint8_t*>(m);
  auto fail = [&](const std::string& what) {
    ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
    map_ = nullptr;
    throw DataError(concat(path, ": ", what));
  };
  if (std::memcmp(map_, kMagic, sizeof kMagic) != 0) fail("byte 0: not a token file (no EDPTOK01 magic)");
  width_ = static_cast<int>(read_le<uint32_t>(map_ + 8));
  vocab_ = read_le<uint32_t>(map_ + 12);
  count_ = static_cast<int64_t>(read_le<uint64_t>(map_ + 16));
  if (width_ != 1 && width_ != 2 && width_ != 4) fail(concat("byte 8: ", width_, " bytes per token (1, 2 or 4)"));
  if (vocab_ < 1 || vocab_ > (int64_t{1} << 31)) fail(concat("byte 12: vocabulary size ", vocab_, " (1 to 2^31)"));
  const uint64_t want = kHeader + static_cast<uint64_t>(count_) * static_cast<uint64_t>(width_);
  if (count_ < 0 || static_cast<uint64_t>(count_) > (map_bytes_ - kHeader) / static_cast<size_t>(width_) ||
      want != map_bytes_)
    fail(concat("byte 16: the header announces ", count_, " tokens (", want, " bytes) but the file has ",
                map_bytes_, " bytes"));
  // Every id is checked once, here: a token outside the vocabulary would index past the model's
  // embedding (or train on garbage) long after the file was accepted.
  for (int64_t i = 0; i < count_; ++i)
    if (const int32_t v = at(i); v < 0 || v >= vocab_)
      fail(concat("byte ", kHeader + static_cast<size_t>(i) * static_cast<size_t>(width_), ": token ", i, " is ",
                  static_cast<uint32_t>(v), ", outside the vocabulary [0, ", vocab_, ") the header declares"));
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

int32_t TokenFile::at(int64_t i) const {
  const uint8_t* p = map_ + kHeader + static_cast<size_t>(i) * static_cast<size_t>(width_);
  switch (width_) {
    case 1: return p[0];
    case 2: return static_cast<int32_t>(read_le<uint16_t>(p));
    default: return static_cast<int32_t>(read_le<uint32_t>(p));
  }
}

void TokenFile::read(int64_t begin, int64_t n, int32_t* out) const {
  EDP_CHECK(begin >= 0 && n >= 0 && begin + n <= count_, path_, ": tokens [", begin, ", ", begin + n,
            ") are outside the file's ", count_);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t v = at(begin + i);
    if (v >= vocab_)
      throw DataError(concat(path_, ": byte ", kHeader + static_cast<size_t>(begin + i) * static_cast<size_t>(width_),
                             ": token ", v, " is outside the vocabulary [0, ", vocab_, ")"));
    out[i] = v;
  }
}

TokenWindows::TokenWindows(std::shared_ptr<const TokenFile> tokens, int64_t context, int64_t stride)
    : tokens_(std::move(tokens)), context_(context), stride_(stride > 0 ? stride : context) {
  EDP_CHECK(tokens_ != nullptr, "TokenWindows: no token file");
  EDP_CHECK(context_ > 0, "TokenWindows: context ", context_, " must be > 0");
  const int64_t n = tokens_->size();
  if (n < context_ + 1)
    throw DataError(concat(tokens_->path(), ": ", n, " tokens, fewer than one window of ", context_ + 1,
                           " (context + 1)"));
  windows_ = (n - context_ - 1) / stride_ + 1;
}

void TokenWindows::get_sample(int64_t i, void* x, int32_t* y) const {
  EDP_CHECK(i >= 0 && i < windows_, "TokenWindows: window ", i, " out of range (", windows_, " windows)");
  int32_t* xi = static_cast<int32_t*>(x);
  tokens_->read(i * stride_, context_, xi);
  std::memcpy(y, xi + 1, static_cast<size_t>(context_ - 1) * sizeof(int32_t));
  tokens_->read(i * stride_ + context_, 1, y + context_ - 1);
}

int32_t TokenWindows::get(int64_t, float*) const {
  throw Error("TokenWindows::get: token windows have int32 features and a label per position; read them "
              "with get_sample() or a DataLoader");
}

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) {
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    EDP_CHECK(ids[i] >= 0 && ids[i] < kVocab, "ByteTokenizer::decode: id ", ids[i], " at ", i, " is not a byte");
    s[i] = static_cast<char>(ids[i]);
  }
  return s;
}

}  // namespace edp::data
