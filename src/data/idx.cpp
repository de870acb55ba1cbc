// IDX reader (MNIST, Fashion-MNIST) through zlib: gzopen/gzread read gzip and plain files
// alike. Every way a file can be wrong — missing, wrong kind, short header, short data, extra
// data, a header announcing absurd sizes, a damaged gzip stream — ends in a DataError that names
// the file, what was expected and what was found. Nothing is allocated from header sizes alone
// beyond a bounded first chunk: data is read incrementally, so a lying header fails at EOF.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <filesystem>
#include <optional>

#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/files.h"
#include "edp/core/log.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int64_t kMaxSide = int64_t{1} << 16;
constexpr int64_t kMaxPayload = int64_t{1} << 36;  // 64 GiB: far above any real IDX file
constexpr size_t kFirstChunk = size_t{64} << 20;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// What a magic number that is not the one we wanted probably is, to help the user see a
// swapped argument or a file of the wrong kind.
std::string describe_magic(uint32_t m) {
  if (m == kImagesMagic) return " (that is an IDX images file)";
  if (m == kLabelsMagic) return " (that is an IDX labels file)";
  if ((m >> 16) == 0x1f8b) return " (a gzip header inside the decompressed data: gzipped twice?)";
  if ((m >> 16) == 0 && ((m >> 8) & 0xff) >= 0x08 && ((m >> 8) & 0xff) <= 0x0e)
    return concat(" (an IDX file of type 0x", std::hex, ((m >> 8) & 0xff), std::dec, " with ",
                  (m & 0xff), " dimensions)");
  return " (not an IDX file)";
}

// A gzip or plain file read sequentially; counts the decompressed bytes it has delivered.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    detail::check_input_file(path, detail::idx_missing_hint(path));
    // A regular file only, opened without blocking (a FIFO or a device would block or never end).
    const int fd = files::open_regular(path, "");
    errno = 0;
    f_ = gzdopen(fd, "rb");
    if (!f_) {
      ::close(fd);
      throw DataError(concat(path, ": cannot open: ",
                             errno ? std::strerror(errno) : "zlib could not allocate its state"));
    }
    gzbuffer(f_, 1u << 18);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. A damaged stream throws.
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      // gzread takes an unsigned count and returns an int: stay well inside both.
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, size_t{1} << 30));
      const int r = gzread(f_, static_cast<char*>(dst) + got, chunk);
      if (r < 0) {
        int errnum = 0;
        const std::string msg = zlib_message(&errnum);
        throw DataError(concat(path_, ": read error after ", pos_ + got, " bytes of data: ",
                               errnum == Z_ERRNO ? std::strerror(errno) : msg,
                               errnum == Z_DATA_ERROR ? " (the gzip stream is damaged)" : ""));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    pos_ += got;
    return got;
  }

  // Why the data ended: "" for a clean end of file, or zlib's complaint (a cut .gz file).
  std::string end_reason() {
    int errnum = 0;
    const std::string msg = zlib_message(&errnum);
    if (errnum == Z_OK) return "";
    return concat(" (zlib: ", msg, errnum == Z_BUF_ERROR ? ": the .gz file is cut short" : "", ")");
  }

  size_t pos() const { return pos_; }
  const std::string& path() const { return path_; }

 private:
  // gzerror's text without the "<path>: " zlib puts in front (our messages start with it).
  std::string zlib_message(int* errnum) {
    std::string msg = gzerror(f_, errnum);
    if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);
    return msg;
  }

  std::string path_;
  gzFile f_ = nullptr;
  size_t pos_ = 0;
};

// Header bytes [from, to), or a DataError saying where the file ended. The magic is read on
// its own first so that a file of the wrong kind is reported as such, not as a short header.
void read_header(GzReader& in, uint8_t* hdr, size_t from, size_t to, size_t header_size,
                 const char* kind) {
  const size_t got = in.read(hdr + from, to - from);
  if (got < to - from)
    throw DataError(concat(in.path(), ": truncated header: expected ", header_size,
                           " header bytes (IDX ", kind, "), file ends after ", from + got,
                           in.end_reason()));
}

void check_magic(GzReader& in, uint32_t magic, uint32_t want, const char* kind) {
  if (magic != want)
    throw DataError(concat(in.path(), ": bad magic ", hex32(magic), ", expected ", hex32(want),
                           " (IDX ", kind, ")", describe_magic(magic)));
}

// Reads exactly `total` payload bytes and checks that nothing follows them.
std::vector<uint8_t> read_payload(GzReader& in, int64_t total, const std::string& what,
                                  const std::string& layout) {
  std::vector<uint8_t> buf;
  const size_t want = static_cast<size_t>(total);
  size_t have = 0;
  while (have < want) {
    if (buf.size() == have)  // grow geometrically, never beyond what the header announced
      buf.resize(std::min(want, std::max(kFirstChunk, 2 * buf.size())));
    const size_t got = in.read(buf.data() + have, buf.size() - have);
    have += got;
    if (got == 0) break;
  }
  if (have < want)
    throw DataError(concat(in.path(), ": truncated data: expected ", want, " ", what,
                           " bytes after the header (", layout, "), file ends after ", have,
                           in.end_reason()));
  uint8_t extra;
  if (in.read(&extra, 1) != 0)
    throw DataError(concat(in.path(), ": the file continues after the ", want, " ", what,
                           " bytes the header announces (", layout,
                           "): the header's count does not match the file"));
  return buf;
}

std::string find_idx(const std::string& dir, const std::string& base) {
  namespace fs = std::filesystem;
  const std::string gz = (fs::path(dir) / (base + ".gz")).string();
  const std::string plain = (fs::path(dir) / base).string();
  std::error_code ec;
  if (fs::exists(gz, ec)) return gz;
  if (fs::exists(plain, ec)) return plain;
  const bool debian = fs::path(dir).lexically_normal() == fs::path(kFashionMnistDir) ||
                      fs::path(dir).lexically_normal() ==
                          fs::path(std::string(kFashionMnistDir) + "/").lexically_normal();
  throw DataError(concat(
      gz, ": file not found (nor ", plain, ")",
      debian ? "; the Debian package provides it: apt-get install dataset-fashion-mnist"
             : concat(fs::exists(dir, ec) ? "" : concat("; the folder ", dir, " does not exist"),
                      "; Fashion-MNIST: https://github.com/zalandoresearch/fashion-mnist , "
                      "on Debian: apt-get install dataset-fashion-mnist (files in ",
                      kFashionMnistDir, ")")));
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  GzReader in(path);
  uint8_t hdr[16];
  read_header(in, hdr, 0, 4, 16, "images");
  check_magic(in, be32(hdr), kImagesMagic, "images");
  read_header(in, hdr, 4, 16, 16, "images");
  IdxImages img;
  img.count = be32(hdr + 4);
  img.rows = be32(hdr + 8);
  img.cols = be32(hdr + 12);
  if (img.rows < 1 || img.rows > kMaxSide || img.cols < 1 || img.cols > kMaxSide)
    throw DataError(concat(path, ": implausible image size ", img.rows, "x", img.cols,
                           " in the header (expected 1..", kMaxSide,
                           " per side): the header is probably corrupt"));
  const int64_t per_image = img.rows * img.cols;
  if (img.count > kMaxPayload / per_image)
    throw DataError(concat(path, ": the header announces ", img.count, " images of ", img.rows,
                           "x", img.cols, ", more than the ", kMaxPayload >> 30,
                           " GiB this reader accepts: the header is probably corrupt"));
  img.pixels = read_payload(in, img.count * per_image, "pixel",
                            concat(img.count, " images of ", img.rows, "x", img.cols));
  return img;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  GzReader in(path);
  uint8_t hdr[8];
  read_header(in, hdr, 0, 4, 8, "labels");
  check_magic(in, be32(hdr), kLabelsMagic, "labels");
  read_header(in, hdr, 4, 8, 8, "labels");
  const int64_t count = be32(hdr + 4);  // at most 2^32 - 1 < kMaxPayload: no size guard needed
  return read_payload(in, count, "label", concat(count, " labels"));
}

namespace {

// A decoded copy of a gzip IDX image file in EDP_DATA_CACHE (edprun points it at its job
// directory, which lives as long as the job): a restart, or the new ranks of a grow, read the
// bytes there instead of decompressing the file again (0.4-0.5 s for Fashion-MNIST's training
// images, most of a rank's start). The copy is named by the source's content — a 64-bit hash of
// its bytes (files::fnv1a64) and its size — so a source replaced by another one (whatever its
// modification time) is decoded again, and it carries the CRC-32 of its pixels: a copy that does
// not read back whole and unchanged is never used; it is decoded again, with a warning. (Not the
// CRC-32 of the source for its name: CRC-32 is linear, and a gzip file ends with the CRC-32 of what
// it holds, so two stored-block gzip files of one length have the same CRC-32.)
//
// Format (little-endian): "EDPIDXC2", i64 count, i64 rows, i64 cols, u64 source hash, u64 source
// size, u32 CRC-32 of the pixels, u32 0, then count*rows*cols pixel bytes.
constexpr char kCacheMagic[8] = {'E', 'D', 'P', 'I', 'D', 'X', 'C', '2'};
constexpr size_t kCacheHeader = 56;

// The source's content key: its hash and size, read through (a regular file only).
bool source_key(const std::string& path, uint64_t& hash, uint64_t& size) {
  int fd = -1;
  try {
    fd = files::open_regular(path, "", &size);
  } catch (const DataError&) {
    return false;  // read_idx_images reports it
  }
  hash = files::fnv1a64(nullptr, 0);
  std::vector<char> buf(size_t{1} << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    hash = files::fnv1a64(buf.data(), static_cast<size_t>(n), hash);
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total == size;
}

}  // namespace

namespace detail {

std::optional<IdxImages> read_decoded_cache(const std::string& copy, uint64_t src_hash, uint64_t src_size,
                                            std::string& why) {
  uint64_t size = 0;
  int fd = -1;
  try {
    fd = files::open_regular(copy, "", &size);
  } catch (const DataError& e) {
    why = e.what();
    return std::nullopt;
  }
  auto fail = [&](const std::string& w) {
    ::close(fd);
    why = w;
    return std::nullopt;
  };
  auto read_all = [&](void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd, static_cast<char*>(dst) + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got == n;
  };
  uint8_t h[kCacheHeader];
  if (size < kCacheHeader || !read_all(h, kCacheHeader)) return fail(concat(size, " bytes, shorter than its header"));
  if (std::memcmp(h, kCacheMagic, 8) != 0) return fail("not a decoded copy of this format (no EDPIDXC2 magic)");
  IdxImages img;
  uint64_t hash_src = 0, len_src = 0;
  uint32_t crc_px = 0, reserved = 0;
  std::memcpy(&img.count, h + 8, 8);
  std::memcpy(&img.rows, h + 16, 8);
  std::memcpy(&img.cols, h + 24, 8);
  std::memcpy(&hash_src, h + 32, 8);
  std::memcpy(&len_src, h + 40, 8);
  std::memcpy(&crc_px, h + 48, 4);
  std::memcpy(&reserved, h + 52, 4);
  if (hash_src != src_hash || len_src != src_size) return fail("made from another version of the source");
  if (reserved != 0) return fail("not a decoded copy of this format (bytes 52-55 are not 0)");
  if (img.count < 0 || img.rows < 1 || img.rows > kMaxSide || img.cols < 1 || img.cols > kMaxSide ||
      img.count > kMaxPayload / (img.rows * img.cols))
    return fail(concat("implausible sizes ", img.count, " x ", img.rows, " x ", img.cols, " in its header"));
  const uint64_t pixels = static_cast<uint64_t>(img.count * img.rows * img.cols);
  if (size != kCacheHeader + pixels)
    return fail(concat(size, " bytes, but its header announces ", kCacheHeader + pixels));
  img.pixels.resize(static_cast<size_t>(pixels));
  if (!read_all(img.pixels.data(), img.pixels.size())) return fail("it ended early (did it change while read?)");
  ::close(fd);
  const uint32_t actual = files::crc32(img.pixels.data(), img.pixels.size());
  if (actual != crc_px) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "checksum mismatch (stored %08x, computed %08x over the pixels)", crc_px, actual);
    why = msg;
    return std::nullopt;
  }
  return img;
}

std::string encode_decoded_cache(const IdxImages& img, uint64_t src_hash, uint64_t src_size) {
  std::string out(kCacheHeader + img.pixels.size(), '\0');
  const uint32_t crc_px = files::crc32(img.pixels.data(), img.pixels.size());
  std::memcpy(out.data(), kCacheMagic, 8);
  std::memcpy(out.data() + 8, &img.count, 8);
  std::memcpy(out.data() + 16, &img.rows, 8);
  std::memcpy(out.data() + 24, &img.cols, 8);
  std::memcpy(out.data() + 32, &src_hash, 8);
  std::memcpy(out.data() + 40, &src_size, 8);
  std::memcpy(out.data() + 48, &crc_px, 4);
  if (!img.pixels.empty()) std::memcpy(out.data() + kCacheHeader, img.pixels.data(), img.pixels.size());
  return out;
}

}  // namespace detail

namespace {

IdxImages read_idx_images_cached(const std::string& path) {
  const std::string dir = knobs::get_string("EDP_DATA_CACHE");
  std::error_code ec;
  uint64_t hash = 0, size = 0;
  if (dir.empty() || path.size() < 3 || path.substr(path.size() - 3) != ".gz" ||
      !std::filesystem::is_directory(dir, ec) ||  // absent (e.g. on a host other than edprun's): no copy
      !source_key(path, hash, size))
    return read_idx_images(path);
  char name[56];
  std::snprintf(name, sizeof name, "idx-%016llx-%llx.u8", static_cast<unsigned long long>(hash),
                static_cast<unsigned long long>(size));
  const std::string copy = dir + "/" + name;
  std::string why;
  if (std::optional<IdxImages> img = detail::read_decoded_cache(copy, hash, size, why)) return std::move(*img);
  if (::access(copy.c_str(), F_OK) == 0)
    log::warn("the decoded copy ", copy, " of ", path, " is not used: ", why, "; decoding the source again");
  IdxImages img = read_idx_images(path);
  // A cache: a copy that cannot be written is simply not used (the checksum catches a torn one).
  std::string werr;
  if (!files::try_write_atomic(copy, detail::encode_decoded_cache(img, hash, size), &werr))
    log::debug("no decoded copy of ", path, ": ", werr);
  return img;
}

}  // namespace

std::shared_ptr<TensorDataset> load_idx(const std::string& images_path,
                                        const std::string& labels_path, const Normalize& norm,
                                        int num_classes) {
  if (num_classes < 1 || num_classes > 256)
    throw Error(concat("load_idx: num_classes must be in 1..256 (labels are bytes), got ",
                       num_classes));
  detail::normalize_tables(norm, 1, "load_idx");  // a bad Normalize is refused before any file is read
  IdxImages img = read_idx_images_cached(images_path);
  std::vector<uint8_t> raw_labels = read_idx_labels(labels_path);
  if (static_cast<int64_t>(raw_labels.size()) != img.count)
    throw DataError(concat("count mismatch: ", images_path, " holds ", img.count, " images but ",
                           labels_path, " holds ", raw_labels.size(),
                           " labels; the two files must belong together"));
  std::vector<int32_t> labels(raw_labels.size());
  for (size_t i = 0; i < raw_labels.size(); ++i) {
    if (raw_labels[i] >= num_classes)
      throw DataError(concat(labels_path, ": label ", int{raw_labels[i]}, " of sample ", i,
                             " (byte offset ", 8 + i, ") is out of range: expected 0..",
                             num_classes - 1));
    labels[i] = raw_labels[i];
  }
  Tensor x(Shape{img.count, 1, img.rows, img.cols}, DType::U8);
  if (!img.pixels.empty()) std::memcpy(x.data<uint8_t>(), img.pixels.data(), img.pixels.size());
  img.pixels = {};
  return std::make_shared<TensorDataset>(std::move(x), std::move(labels), num_classes, norm);
}

std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir,
                                                  const std::string& split) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test")
    prefix = "t10k";
  else
    throw Error(concat("load_fashion_mnist: split must be \"train\" or \"test\", got \"", split,
                       "\""));
  const std::string images = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels = find_idx(dir, prefix + "-labels-idx1-ubyte");
  return load_idx(images, labels, fashion_mnist_normalize(), 10);
}

}  // namespace edp::data
