// NumPy's .npy and .npz files (edp/data/arrays.h): the header parser, element conversion, the
// zip reader for .npz (stored and deflated entries, zip64 sizes) and write_npy.
//
// .npy layout: "\x93NUMPY", u8 major, u8 minor, header length (u16 in version 1, u32 in 2 and 3),
// then a Python dict literal {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), } padded
// with spaces and a newline, then the data.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/data/arrays.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

[[noreturn]] void bad(const std::string& name, int64_t offset, const std::string& what) {
  throw DataError(concat(name, ": at byte ", offset, ": ", what));
}

float half_to_float(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(frac, -24);
  else if (exp == 31)
    v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(frac + 1024, exp - 25);
  return static_cast<float>(sign ? -v : v);
}

// Element i of raw data of kind/size (swapped when big-endian), as a double.
template <typename T>
T load(const uint8_t* p, bool swap) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap)
    for (size_t k = 0; k < sizeof(T) / 2; ++k) std::swap(b[k], b[sizeof(T) - 1 - k]);
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

double element(const uint8_t* p, char kind, int item, bool swap) {
  switch (kind) {
    case 'b':
      return *p ? 1.0 : 0.0;
    case 'i':
      switch (item) {
        case 1: return static_cast<int8_t>(*p);
        case 2: return load<int16_t>(p, swap);
        case 4: return load<int32_t>(p, swap);
        default: return static_cast<double>(load<int64_t>(p, swap));
      }
    case 'u':
      switch (item) {
        case 1: return *p;
        case 2: return load<uint16_t>(p, swap);
        case 4: return load<uint32_t>(p, swap);
        default: return static_cast<double>(load<uint64_t>(p, swap));
      }
    default:
      switch (item) {
        case 2: return half_to_float(load<uint16_t>(p, swap));
        case 4: return load<float>(p, swap);
        default: return load<double>(p, swap);
      }
  }
}

// A cursor over the header dict, for messages with the file offset.
struct DictParser {
  const std::string& name;
  const std::string& s;
  size_t pos = 0;
  int64_t base = 0;  // file offset of s[0]

  [[noreturn]] void fail(const std::string& what) const { bad(name, base + static_cast<int64_t>(pos), what); }
  void ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\t')) ++pos;
  }
  void expect(char c, const char* what) {
    ws();
    if (pos >= s.size() || s[pos] != c) fail(concat("expected '", c, "' ", what, " in the .npy header dict"));
    ++pos;
  }
  std::string quoted() {
    ws();
    if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"')) fail("expected a quoted string in the .npy header dict");
    const char q = s[pos++];
    const size_t end = s.find(q, pos);
    if (end == std::string::npos) fail("unterminated string in the .npy header dict");
    std::string v = s.substr(pos, end - pos);
    pos = end + 1;
    return v;
  }
  bool boolean() {
    ws();
    if (s.compare(pos, 4, "True") == 0) return pos += 4, true;
    if (s.compare(pos, 5, "False") == 0) return pos += 5, false;
    fail("expected True or False for 'fortran_order'");
  }
  std::vector<int64_t> tuple() {
    expect('(', "to open 'shape'");
    std::vector<int64_t> dims;
    for (;;) {
      ws();
      if (pos < s.size() && s[pos] == ')') {
        ++pos;
        return dims;
      }
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(s.substr(pos, 20), &used);
      } catch (const std::exception&) {
        fail("expected a dimension (a non-negative integer) in 'shape'");
      }
      if (v < 0) fail("a negative dimension in 'shape'");
      if (pos + used < s.size() && s[pos + used] >= '0' && s[pos + used] <= '9')
        fail("a dimension of more than 19 digits in 'shape'");
      dims.push_back(v);
      pos += used;
      ws();
      if (pos < s.size() && s[pos] == ',') ++pos;
    }
  }
};

}  // namespace

int64_t Array::row_size() const {
  int64_t n = 1;
  for (int64_t d = 1; d < shape_.ndim(); ++d) n *= shape_[d];
  return n;
}

void Array::read_f32(int64_t row, int64_t n, float* out) const {
  const int64_t per = row_size(), count = n * per;
  if (count <= 0) return;  // no rows, or rows of no values: out may be null (memcpy may not take it)
  const uint8_t* p = data_ + static_cast<size_t>(row * per) * static_cast<size_t>(item_);
  if (kind_ == 'f' && item_ == 4 && !swap_) {
    std::memcpy(out, p, static_cast<size_t>(count) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < count; ++i, p += item_) out[i] = static_cast<float>(element(p, kind_, item_, swap_));
}

double Array::at(int64_t i) const { return element(data_ + static_cast<size_t>(i) * item_, kind_, item_, swap_); }

// The header of .npy bytes: both Array::open_npy and Array::parse_npy use it.
static void parse_header(const std::string& name, const uint8_t* b, size_t n, std::string& descr, char& kind,
                         int& item, bool& swap, Shape& shape, int64_t& data_offset) {
  if (n < 10 || std::memcmp(b, kMagic, 6) != 0)
    bad(name, 0, concat("expected the .npy magic \\x93NUMPY (", n, " bytes in all)"));
  const int major = b[6];
  if (major < 1 || major > 3) bad(name, 6, concat("format version ", major, ".", int(b[7]), ", expected 1, 2 or 3"));
  size_t hlen, hstart;
  if (major == 1) {
    hlen = b[8] | (size_t(b[9]) << 8);
    hstart = 10;
  } else {
    if (n < 12) bad(name, 8, "truncated: expected a 4-byte header length");
    hlen = b[8] | (size_t(b[9]) << 8) | (size_t(b[10]) << 16) | (size_t(b[11]) << 24);
    hstart = 12;
  }
  if (hlen > n - hstart)
    bad(name, static_cast<int64_t>(hstart), concat("the header announces ", hlen, " bytes, ", n - hstart, " remain"));
  const std::string h(reinterpret_cast<const char*>(b + hstart), hlen);
  DictParser p{name, h, 0, static_cast<int64_t>(hstart)};
  bool have_descr = false, have_shape = false, fortran = false;
  p.expect('{', "to open the header dict");
  for (;;) {
    p.ws();
    if (p.pos < h.size() && h[p.pos] == '}') break;
    const size_t key_at = p.pos;
    const std::string key = p.quoted();
    p.expect(':', "after a key");
    if (key == "descr") {
      p.ws();
      if (p.pos < h.size() && h[p.pos] == '[')
        p.fail("a structured dtype (record array): only plain numeric arrays are supported");
      descr = p.quoted();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean();
    } else if (key == "shape") {
      shape = Shape(p.tuple());
      have_shape = true;
    } else {
      p.pos = key_at;
      p.fail(concat("unexpected key '", key, "' in the .npy header dict"));
    }
    p.ws();
    if (p.pos < h.size() && h[p.pos] == ',') ++p.pos;
  }
  if (!have_descr || !have_shape) bad(name, static_cast<int64_t>(hstart), "the header dict lacks 'descr' or 'shape'");
  if (fortran)
    bad(name, static_cast<int64_t>(hstart),
        "a Fortran-order array: save it in C order (np.save(f, np.ascontiguousarray(a)))");
  // descr: byte order, kind, size ("<f8", "|u1", "|b1", ">i4").
  if (descr.size() < 3 || std::string("<>|=").find(descr[0]) == std::string::npos)
    bad(name, static_cast<int64_t>(hstart), concat("dtype '", descr, "' is not a plain numeric dtype"));
  kind = descr[1];
  item = std::atoi(descr.c_str() + 2);
  const bool ok = (kind == 'b' && item == 1) || ((kind == 'i' || kind == 'u') && (item == 1 || item == 2 || item == 4 || item == 8)) ||
                  (kind == 'f' && (item == 2 || item == 4 || item == 8));
  if (!ok)
    bad(name, static_cast<int64_t>(hstart),
        concat("dtype '", descr, "': expected bool, (u)int8..64 or float16/32/64 (complex, strings, objects "
               "and dates are not numbers a model trains on)"));
  swap = descr[0] == '>' && item > 1;
  data_offset = static_cast<int64_t>(hstart + hlen);
  const int64_t have = static_cast<int64_t>(n) - data_offset;
  // The size in bytes, refused before the product could overflow int64.
  int64_t want = item;
  for (int64_t d : shape.dims()) {
    if (d != 0 && want > std::numeric_limits<int64_t>::max() / d)
      bad(name, data_offset, concat("shape ", shape.str(), " of ", descr, " needs more than 2^63 data bytes, the file holds ",
                                    have));
    want *= d;
  }
  if (want != have)
    bad(name, data_offset,
        concat("shape ", shape.str(), " of ", descr, " needs ", want, " data bytes, the file holds ", have));
}

Array Array::open_npy(const std::string& path) {
  auto m = detail::map_file(path, "save it with numpy.save");
  Array a;
  a.name_ = path;
  parse_header(path, static_cast<const uint8_t*>(m->p), m->n, a.descr_, a.kind_, a.item_, a.swap_, a.shape_,
               a.data_offset_);
  a.data_ = static_cast<const uint8_t*>(m->p) + a.data_offset_;
  a.owner_ = std::move(m);
  return a;
}

Array Array::parse_npy(const std::string& name, std::shared_ptr<const std::vector<uint8_t>> bytes) {
  Array a;
  a.name_ = name;
  parse_header(name, bytes->data(), bytes->size(), a.descr_, a.kind_, a.item_, a.swap_, a.shape_, a.data_offset_);
  a.data_ = bytes->data() + a.data_offset_;
  a.owner_ = std::move(bytes);
  return a;
}

Array Array::from_tensor(const std::string& name, const Tensor& t) {
  EDP_CHECK(t.defined() && t.device().is_cpu(), "Array::from_tensor(", name, "): needs a CPU tensor");
  Array a;
  a.name_ = name;
  a.shape_ = t.shape();
  switch (t.dtype()) {
    case DType::F32: a.descr_ = "<f4", a.kind_ = 'f', a.item_ = 4; break;
    case DType::F64: a.descr_ = "<f8", a.kind_ = 'f', a.item_ = 8; break;
    case DType::I32: a.descr_ = "<i4", a.kind_ = 'i', a.item_ = 4; break;
    case DType::I64: a.descr_ = "<i8", a.kind_ = 'i', a.item_ = 8; break;
    default: throw Error(concat("Array::from_tensor(", name, "): ", t.str(), ": float32, float64, int32 or int64 only"));
  }
  a.data_ = static_cast<const uint8_t*>(t.raw());
  a.owner_ = std::make_shared<Tensor>(t);
  return a;
}

void write_npy(const std::string& path, const Tensor& t) {
  EDP_CHECK(t.defined() && t.device().is_cpu(), "write_npy(", path, "): needs a CPU tensor, got ",
            t.defined() ? t.str() : std::string("an undefined one"));
  const char* descr = nullptr;
  switch (t.dtype()) {
    case DType::F32: descr = "<f4"; break;
    case DType::F64: descr = "<f8"; break;
    case DType::I32: descr = "<i4"; break;
    case DType::I64: descr = "<i8"; break;
    default: throw Error(concat("write_npy(", path, "): ", t.str(), ": float32, float64, int32 or int64 only"));
  }
  std::string shape = "(";
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.ndim() > 1) shape.resize(shape.size() - 1);  // "(3, 4)"; one dimension keeps "(3,)"
  if (t.ndim() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string dict = concat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // The data starts at a multiple of 64 bytes (NumPy's alignment); the dict ends with '\n'.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  files::write_atomic(path, out);
}

// ---- .npz: a zip archive ------------------------------------------------------------------------

namespace {

uint32_t le32(const uint8_t* p) { return p[0] | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24); }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint64_t le64(const uint8_t* p) { return le32(p) | (uint64_t(le32(p + 4)) << 32); }

std::vector<uint8_t> inflate_raw(const std::string& name, const uint8_t* src, size_t n, uint64_t out_size, int64_t at) {
  // Deflate expands at most 1032:1 (a 258-byte match per 2 bits): a header announcing more than
  // that is refused before its buffer is allocated (a forged size must not cost gigabytes).
  if (out_size > static_cast<uint64_t>(n) * 1032 + 1024)
    bad(name, at, concat("the deflated entry announces ", out_size, " bytes, more than its ", n,
                         " compressed bytes can hold (deflate expands at most 1032:1)"));
  std::vector<uint8_t> out(out_size);
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) bad(name, at, "zlib cannot start inflating");
  size_t in_done = 0, out_done = 0;
  int rc = Z_OK;
  // zlib counts in uInt: feed it in chunks so that entries above 4 GiB inflate too.
  constexpr size_t kChunk = size_t{1} << 30;
  while (rc == Z_OK) {
    z.next_in = const_cast<uint8_t*>(src + in_done);
    z.avail_in = static_cast<uInt>(std::min(kChunk, n - in_done));
    z.next_out = out.data() + out_done;
    z.avail_out = static_cast<uInt>(std::min<uint64_t>(kChunk, out_size - out_done));
    const uInt in0 = z.avail_in, out0 = z.avail_out;
    rc = inflate(&z, Z_NO_FLUSH);
    in_done += in0 - z.avail_in;
    out_done += out0 - z.avail_out;
    if (rc == Z_OK && in0 == z.avail_in && out0 == z.avail_out) rc = Z_BUF_ERROR;
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END || out_done != out_size)
    bad(name, at, concat("the deflated entry does not inflate to the ", out_size, " bytes its header announces (",
                         z.msg ? z.msg : "zlib error", ")"));
  return out;
}

}  // namespace

std::map<std::string, Array> read_npz(const std::string& path) {
  auto m = detail::map_file(path, "save it with numpy.savez or numpy.savez_compressed");
  const auto* b = static_cast<const uint8_t*>(m->p);
  const size_t n = m->n;
  // The end-of-central-directory record: the last "PK\5\6" within 64 KiB + 22 bytes of the end.
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(n) - 22; i >= 0 && i >= static_cast<int64_t>(n) - 22 - 65535; --i)
    if (le32(b + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) bad(path, static_cast<int64_t>(n), "expected a zip archive (.npz): no end-of-central-directory record");
  uint64_t entries = le16(b + eocd + 10), cd_size = le32(b + eocd + 12), cd_off = le32(b + eocd + 16);
  if (entries == 0xFFFF || cd_off == 0xFFFFFFFF) {  // zip64: the locator sits just before
    const int64_t loc = eocd - 20;
    if (loc < 0 || le32(b + loc) != 0x07064b50) bad(path, eocd, "expected a zip64 end-of-central-directory locator");
    const uint64_t rec = le64(b + loc + 8);
    if (rec + 56 > n || le32(b + rec) != 0x06064b50)
      bad(path, static_cast<int64_t>(rec), "expected a zip64 end-of-central-directory record");
    entries = le64(b + rec + 32);
    cd_size = le64(b + rec + 40);
    cd_off = le64(b + rec + 48);
  }
  if (cd_off + cd_size > n) bad(path, eocd, concat("the central directory (", cd_size, " bytes at ", cd_off, ") lies past the end"));
  std::map<std::string, Array> out;
  uint64_t p = cd_off;
  for (uint64_t e = 0; e < entries; ++e) {
    if (p + 46 > cd_off + cd_size || le32(b + p) != 0x02014b50)
      bad(path, static_cast<int64_t>(p), "expected a central directory entry (PK\\1\\2)");
    const uint16_t method = le16(b + p + 10), name_len = le16(b + p + 28), extra_len = le16(b + p + 30),
                   comment_len = le16(b + p + 32);
    const uint32_t crc = le32(b + p + 16);
    uint64_t csize = le32(b + p + 20), usize = le32(b + p + 24), local = le32(b + p + 42);
    if (p + 46 + name_len + extra_len > cd_off + cd_size) bad(path, static_cast<int64_t>(p), "a truncated entry");
    const std::string entry(reinterpret_cast<const char*>(b + p + 46), name_len);
    // zip64 sizes: an extra field of id 1 holds those whose 32-bit field is 0xFFFFFFFF, in order.
    for (uint64_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = le16(b + x), len = le16(b + x + 2);
      if (id == 1) {
        uint64_t q = x + 4;
        if (usize == 0xFFFFFFFF && q + 8 <= x + 4 + len) usize = le64(b + q), q += 8;
        if (csize == 0xFFFFFFFF && q + 8 <= x + 4 + len) csize = le64(b + q), q += 8;
        if (local == 0xFFFFFFFF && q + 8 <= x + 4 + len) local = le64(b + q), q += 8;
      }
      x += 4u + len;
    }
    p += 46u + name_len + extra_len + comment_len;
    const std::string label = path + ":" + entry;
    if (local + 30 > n || le32(b + local) != 0x04034b50)
      bad(path, static_cast<int64_t>(local), concat("expected the local header (PK\\3\\4) of ", entry));
    const uint64_t data = local + 30 + le16(b + local + 26) + le16(b + local + 28);
    if (data + csize > n)
      bad(path, static_cast<int64_t>(data), concat(entry, ": ", csize, " bytes of data run past the end of the file"));
    std::shared_ptr<std::vector<uint8_t>> bytes;
    if (method == 0) {
      if (csize != usize) bad(path, static_cast<int64_t>(local), concat(entry, ": a stored entry whose sizes differ"));
      bytes = std::make_shared<std::vector<uint8_t>>(b + data, b + data + csize);
    } else if (method == 8) {
      bytes = std::make_shared<std::vector<uint8_t>>(inflate_raw(label, b + data, csize, usize, static_cast<int64_t>(data)));
    } else {
      bad(path, static_cast<int64_t>(local), concat(entry, ": compression method ", method, ", expected stored (0) or deflate (8)"));
    }
    uLong sum = crc32(0L, Z_NULL, 0);
    for (size_t done = 0; done < bytes->size();) {  // crc32 counts in uInt too
      const size_t k = std::min<size_t>(size_t{1} << 30, bytes->size() - done);
      sum = crc32(sum, bytes->data() + done, static_cast<uInt>(k));
      done += k;
    }
    if (sum != crc)
      bad(path, static_cast<int64_t>(data), concat(entry, ": crc32 ", sum, " of the data, the archive records ", crc,
                                                   ": the file is damaged"));
    std::string key = entry;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    out.emplace(key, Array::parse_npy(label, std::move(bytes)));
  }
  return out;
}

}  // namespace edp::data
