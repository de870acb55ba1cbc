// CIFAR-10 binary version: each file is a run of 3073-byte records (1 label byte, then 1024
// red, 1024 green and 1024 blue bytes of a 32x32 image). Sizes and labels are checked before
// anything is trusted; the whole file is read at once (30 MiB per official batch).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {

constexpr int64_t kSide = 32, kChannels = 3, kPlane = kSide * kSide;
constexpr int64_t kImageBytes = kChannels * kPlane;  // 3072
constexpr int64_t kRecord = 1 + kImageBytes;         // 3073
constexpr int kClasses = 10;
constexpr const char* kCifarHint =
    "the CIFAR-10 binary version is https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Size of a CIFAR-10 file, checked to be a positive whole number of records.
int64_t checked_size(const std::string& path) {
  detail::check_input_file(path, kCifarHint);
  uint64_t size = 0;
  ::close(files::open_regular(path, "", &size));  // a regular file (a FIFO would block)
  const int64_t n = static_cast<int64_t>(size);
  if (n == 0 || n % kRecord != 0)
    throw DataError(concat(path, ": size ", n, " bytes is not a positive multiple of the ",
                           kRecord, "-byte CIFAR-10 record (1 label byte + ", kImageBytes,
                           " pixel bytes): ", n / kRecord, " whole records and ", n % kRecord,
                           " bytes left over"));
  return n;
}

}  // namespace

std::shared_ptr<TensorDataset> load_cifar10_files(const std::vector<std::string>& files,
                                                  const Normalize& norm) {
  if (files.empty()) throw Error("load_cifar10_files: no files given");
  detail::normalize_tables(norm, kChannels, "load_cifar10_files");  // refused before any file is read
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const auto& f : files) {
    sizes.push_back(checked_size(f));
    total += sizes.back() / kRecord;
  }
  Tensor x(Shape{total, kChannels, kSide, kSide}, DType::U8);
  std::vector<int32_t> labels(static_cast<size_t>(total));
  uint8_t* out = x.data<uint8_t>();
  int64_t sample = 0;
  std::vector<uint8_t> buf;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& path = files[fi];
    const int fd = files::open_regular(path, "");
    std::unique_ptr<std::FILE, FileCloser> f(::fdopen(fd, "rb"));
    if (!f) {
      ::close(fd);
      throw DataError(concat(path, ": cannot open: ", std::strerror(errno)));
    }
    buf.resize(static_cast<size_t>(sizes[fi]));
    const size_t got = std::fread(buf.data(), 1, buf.size(), f.get());
    if (got != buf.size())
      throw DataError(concat(path, ": expected ", buf.size(), " bytes, read ", got,
                             " (did the file change while it was read?)"));
    const int64_t records = sizes[fi] / kRecord;
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* rec = buf.data() + r * kRecord;
      if (rec[0] >= kClasses)
        throw DataError(concat(path, ": label ", int{rec[0]}, " in record ", r, " (byte offset ",
                               r * kRecord, ") is out of range: expected 0..", kClasses - 1));
      labels[static_cast<size_t>(sample)] = rec[0];
      std::memcpy(out + sample * kImageBytes, rec + 1, kImageBytes);
      ++sample;
    }
  }
  return std::make_shared<TensorDataset>(std::move(x), std::move(labels), kClasses, norm);
}

std::shared_ptr<TensorDataset> load_cifar10(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else if (split == "test") {
    names.push_back("test_batch.bin");
  } else {
    throw Error(concat("load_cifar10: split must be \"train\" or \"test\", got \"", split, "\""));
  }
  // The official tarball unpacks into cifar-10-batches-bin/: accept its parent folder too.
  fs::path base(dir);
  std::error_code ec;
  if (!fs::exists(base / names[0], ec) && fs::exists(base / "cifar-10-batches-bin" / names[0], ec))
    base /= "cifar-10-batches-bin";
  std::vector<std::string> files;
  for (const auto& n : names) files.push_back((base / n).string());
  return load_cifar10_files(files, cifar10_normalize());
}

}  // namespace edp::data
