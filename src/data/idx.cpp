// IDX reader (MNIST, Fashion-MNIST) through zlib: gzopen/gzread read gzip and plain files
// alike. Every way a file can be wrong — missing, wrong kind, short header, short data, extra
// data, a header announcing absurd sizes, a damaged gzip stream — ends in a DataError that names
// the file, what was expected and what was found. Nothing is allocated from header sizes alone
// beyond a bounded first chunk: data is read incrementally, so a lying header fails at EOF.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>

#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/files.h"
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
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_)
      throw DataError(concat(path, ": cannot open: ",
                             errno ? std::strerror(errno) : "zlib could not allocate its state"));
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
// images, most of a rank's start). The copy is named by the source's path, size and modification
// time, so a changed source is decoded again; a copy that does not read back whole is ignored.
constexpr char kCacheMagic[8] = {'E', 'D', 'P', 'I', 'D', 'X', 'C', '1'};

IdxImages read_idx_images_cached(const std::string& path) {
  const std::string dir = knobs::get_string("EDP_DATA_CACHE");
  struct stat st {};
  std::error_code ec;
  if (dir.empty() || path.size() < 3 || path.substr(path.size() - 3) != ".gz" || ::stat(path.c_str(), &st) != 0 ||
      !std::filesystem::is_directory(dir, ec))  // absent (e.g. on a host other than edprun's): no copy
    return read_idx_images(path);
  const std::string key = std::filesystem::weakly_canonical(path, ec).string() + "|" + std::to_string(st.st_size) + "|" +
                          std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : key) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char name[40];
  std::snprintf(name, sizeof name, "idx-%016llx.u8", static_cast<unsigned long long>(h));
  const std::string copy = dir + "/" + name;
  if (std::ifstream in{copy, std::ios::binary}) {  // the header, then the pixels straight into place
    char magic[8] = {};
    IdxImages img;
    in.read(magic, 8);
    in.read(reinterpret_cast<char*>(&img.count), 8);
    in.read(reinterpret_cast<char*>(&img.rows), 8);
    in.read(reinterpret_cast<char*>(&img.cols), 8);
    const auto bytes = std::filesystem::file_size(copy, ec);
    if (in && !ec && std::memcmp(magic, kCacheMagic, 8) == 0 && img.count >= 0 && img.rows > 0 && img.cols > 0 &&
        static_cast<int64_t>(bytes) - 32 == img.count * img.rows * img.cols) {
      img.pixels.resize(static_cast<size_t>(bytes - 32));
      in.read(reinterpret_cast<char*>(img.pixels.data()), static_cast<std::streamsize>(img.pixels.size()));
      if (in) return img;
    }
  }
  IdxImages img = read_idx_images(path);
  std::string out(32 + img.pixels.size(), '\0');
  std::memcpy(out.data(), kCacheMagic, 8);
  std::memcpy(out.data() + 8, &img.count, 8);
  std::memcpy(out.data() + 16, &img.rows, 8);
  std::memcpy(out.data() + 24, &img.cols, 8);
  if (!img.pixels.empty()) std::memcpy(out.data() + 32, img.pixels.data(), img.pixels.size());
  files::try_write_atomic(copy, out);  // a cache: a copy that cannot be written is simply not used
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
