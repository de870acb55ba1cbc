// The loaders of users' files (edp/data/arrays.h): .npy of every numeric dtype, .npz (stored and
// deflated entries), CSV, and their errors, which must name the file and the byte offset. Files are
// crafted byte by byte here, as NumPy writes them (format 1.0, 64-byte aligned headers), so the
// tests need no NumPy. Every value written is exactly representable in float32: checks are exact.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "edp/data/arrays.h"
#include "edp/data/distributed_loader.h"
#include "edp/data/loader.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;
using edp_test::TempDir;

namespace {

// A .npy file's bytes: header for (descr, shape), then `data` as given (already in the byte order
// descr names).
std::vector<uint8_t> npy(const std::string& descr, const std::string& shape, const std::vector<uint8_t>& data,
                         bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<uint8_t> v = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(dict.size() & 0xff),
                            static_cast<uint8_t>(dict.size() >> 8)};
  v.insert(v.end(), dict.begin(), dict.end());
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& xs, bool big_endian = false) {
  std::vector<uint8_t> v(xs.size() * sizeof(T));
  std::memcpy(v.data(), xs.data(), v.size());
  if (big_endian)
    for (size_t i = 0; i < xs.size(); ++i) std::reverse(v.begin() + i * sizeof(T), v.begin() + (i + 1) * sizeof(T));
  return v;
}

void put16(std::vector<uint8_t>& v, uint32_t x) {
  v.push_back(x & 0xff);
  v.push_back((x >> 8) & 0xff);
}
void put32(std::vector<uint8_t>& v, uint32_t x) {
  put16(v, x & 0xffff);
  put16(v, x >> 16);
}

// A zip archive of (name, contents) entries, stored (method 0) or deflated (method 8), as Python's
// zipfile writes them.
std::vector<uint8_t> zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries, bool compressed) {
  std::vector<uint8_t> out, cd;
  for (const auto& [name, data] : entries) {
    std::vector<uint8_t> body = data;
    if (compressed) {
      z_stream z{};
      EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
      body.resize(deflateBound(&z, data.size()));
      z.next_in = const_cast<uint8_t*>(data.data());
      z.avail_in = static_cast<uInt>(data.size());
      z.next_out = body.data();
      z.avail_out = static_cast<uInt>(body.size());
      EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
      body.resize(z.total_out);
      deflateEnd(&z);
    }
    const uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
    const uint32_t local = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, 0), put16(out, compressed ? 8 : 0), put16(out, 0), put16(out, 0);
    put32(out, crc), put32(out, static_cast<uint32_t>(body.size())), put32(out, static_cast<uint32_t>(data.size()));
    put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), body.begin(), body.end());
    put32(cd, 0x02014b50);
    put16(cd, 20), put16(cd, 20), put16(cd, 0), put16(cd, compressed ? 8 : 0), put16(cd, 0), put16(cd, 0);
    put32(cd, crc), put32(cd, static_cast<uint32_t>(body.size())), put32(cd, static_cast<uint32_t>(data.size()));
    put16(cd, static_cast<uint32_t>(name.size())), put16(cd, 0), put16(cd, 0), put16(cd, 0), put16(cd, 0);
    put32(cd, 0), put32(cd, local);
    cd.insert(cd.end(), name.begin(), name.end());
  }
  const uint32_t cd_off = static_cast<uint32_t>(out.size());
  out.insert(out.end(), cd.begin(), cd.end());
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0), put16(out, static_cast<uint32_t>(entries.size())),
      put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(cd.size())), put32(out, cd_off), put16(out, 0);
  return out;
}

void write_text(const std::string& path, const std::string& s) {
  edp_test::write_plain(path, std::vector<uint8_t>(s.begin(), s.end()));
}

}  // namespace

TEST(Npy, Float64FeaturesInt64LabelsAreAClassificationSet) {
  // The case of a user's NumPy data: X float64 [4, 2], y int64 [4] with 3 classes.
  TempDir d;
  edp_test::write_plain(d.file("X.npy"), npy("<f8", "(4, 2)", bytes_of<double>({0.5, -1, 2, 3, 4.25, 5, -6, 7})));
  edp_test::write_plain(d.file("y.npy"), npy("<i8", "(4,)", bytes_of<int64_t>({0, 2, 1, 2})));
  auto ds = load_npy(d.file("X.npy"), d.file("y.npy"));
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->sample_shape(), (Shape{2}));
  EXPECT_EQ(ds->num_classes(), 3);
  EXPECT_EQ(ds->label_dtype(), DType::I32);
  float x[2];
  EXPECT_EQ(ds->get(2, x), 1);
  EXPECT_EQ(x[0], 4.25f);
  EXPECT_EQ(x[1], 5.0f);
  DataLoader loader(ds, std::make_shared<SequentialSampler>(4), {.batch_size = 3, .workers = 0});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.x.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.y.dtype(), DType::I32);
  EXPECT_EQ(b.y.item(1), 2.0);
  EXPECT_EQ(b.x.item(1), -1.0);
}

TEST(Npy, FloatTargetsAreValuesOfAnyShape) {
  TempDir d;
  edp_test::write_plain(d.file("X.npy"), npy("<f4", "(3,)", bytes_of<float>({1, 2, 3})));
  edp_test::write_plain(d.file("y.npy"), npy("<f8", "(3, 2)", bytes_of<double>({0.5, 1, 1.5, 2, 2.5, 3})));
  auto ds = load_npy(d.file("X.npy"), d.file("y.npy"));
  EXPECT_EQ(ds->num_classes(), 0);
  EXPECT_EQ(ds->label_dtype(), DType::F32);
  EXPECT_EQ(ds->label_shape(), (Shape{2}));
  EXPECT_EQ(ds->sample_shape(), (Shape{1}));  // a 1-D features array: one feature per sample
  DataLoader loader(ds, std::make_shared<SequentialSampler>(3), {.batch_size = 2, .workers = 1});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_TRUE(loader.next(b));  // the last, partial batch
  EXPECT_EQ(b.y.dtype(), DType::F32);
  EXPECT_EQ(b.y.shape(), (Shape{1, 2}));
  EXPECT_EQ(b.y.item(0), 2.5);
  EXPECT_EQ(b.y.item(1), 3.0);
  EXPECT_EQ(b.x.item(0), 3.0);
  // Integer targets can be values too, when asked.
  edp_test::write_plain(d.file("yi.npy"), npy("<i4", "(3,)", bytes_of<int32_t>({7, -2, 5})));
  auto r = load_npy(d.file("X.npy"), d.file("yi.npy"), {.targets = Targets::values});
  float x, y;
  r->read_sample(1, &x, &y);
  EXPECT_EQ(y, -2.0f);
  EXPECT_THROW(r->get(1, &x), Error);  // value targets: read_sample only
}

TEST(Npy, EveryNumericDtypeConverts) {
  TempDir d;
  struct Case {
    std::string descr;
    std::vector<uint8_t> data;
  };
  // Each holds the values {-3, 0, 5} (bool and unsigned: {1, 0, 1} and {3, 0, 5}).
  const std::vector<Case> cases = {
      {"|i1", bytes_of<int8_t>({-3, 0, 5})},       {"<i2", bytes_of<int16_t>({-3, 0, 5})},
      {">i4", bytes_of<int32_t>({-3, 0, 5}, true)}, {"<i8", bytes_of<int64_t>({-3, 0, 5})},
      {">f8", bytes_of<double>({-3, 0, 5}, true)},  {"<f4", bytes_of<float>({-3, 0, 5})},
      // float16: -3 = 0xC200, 0 = 0x0000, 5 = 0x4500
      {"<f2", bytes_of<uint16_t>({0xC200, 0x0000, 0x4500})},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.descr);
    edp_test::write_plain(d.file("a.npy"), npy(c.descr, "(3,)", c.data));
    Array a = Array::open_npy(d.file("a.npy"));
    float out[3];
    a.read_f32(0, 3, out);
    EXPECT_EQ(out[0], -3.0f);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_EQ(out[2], 5.0f);
  }
  edp_test::write_plain(d.file("b.npy"), npy("|b1", "(3,)", {1, 0, 1}));
  edp_test::write_plain(d.file("u.npy"), npy("<u2", "(3,)", bytes_of<uint16_t>({3, 0, 65535})));
  float out[3];
  Array::open_npy(d.file("b.npy")).read_f32(0, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  Array::open_npy(d.file("u.npy")).read_f32(0, 3, out);
  EXPECT_EQ(out[2], 65535.0f);
}

TEST(Npy, WriteNpyReadsBack) {
  TempDir d;
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6.5f});
  write_npy(d.file("t.npy"), t);
  const auto raw = edp_test::read_all(d.file("t.npy"));
  EXPECT_EQ(raw.size() % 64, 24u);  // header padded to a multiple of 64 bytes (as NumPy does), then 24 data bytes
  Array a = Array::open_npy(d.file("t.npy"));
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.descr(), "<f4");
  EXPECT_EQ(a.at(5), 6.5);
  write_npy(d.file("i.npy"), Tensor::from_vector<int32_t>({3}, {4, 5, 6}));
  Array b = Array::open_npy(d.file("i.npy"));
  EXPECT_EQ(b.shape(), (Shape{3}));
  EXPECT_EQ(b.at(2), 6.0);
}

TEST(Npy, MalformedFilesNameTheFileAndOffset) {
  TempDir d;
  const std::string p = d.file("bad.npy");
  edp_test::write_plain(p, {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, p, "at byte 0", "magic");
  // Data shorter than the shape needs: named at the data's offset (the header, 10 bytes of
  // preamble and the dict, padded to 128 as NumPy pads it).
  auto full = npy("<f4", "(4,)", bytes_of<float>({1, 2, 3}));
  edp_test::write_plain(p, full);
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, p, "at byte 128", "needs 16 data bytes", "holds 12");
  edp_test::write_plain(p, npy("<f4", "(1,)", bytes_of<float>({1}), /*fortran=*/true));
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, "Fortran");
  edp_test::write_plain(p, npy("<c8", "(1,)", bytes_of<float>({1, 2})));
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, "'<c8'", "expected bool");
  edp_test::write_plain(p, npy("<i4", "(2, -1)", {}));
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, "negative dimension");
  // Dimensions whose product overflows int64 (the fuzzer's input: 5534023221 x 3709551615 x 2 x 3
  // floats) and a dimension longer than int64's 19 digits: refused, not multiplied.
  edp_test::write_plain(p, npy("<f4", "(3, 5534023221, 3709551615, 2)", bytes_of<float>({1, 2})));
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, "needs more than 2^63 data bytes, the file holds 8");
  edp_test::write_plain(p, npy("<f4", "(000000000018446744073709551615,)", bytes_of<float>({1})));
  EXPECT_THROW_WITH(Array::open_npy(p), DataError, "more than 19 digits");
  EXPECT_THROW_WITH(Array::open_npy(d.file("missing.npy")), DataError, "missing.npy", "not found");
  // A label that is no class: the byte offset of that element (128 + 2 * 8).
  edp_test::write_plain(d.file("X.npy"), npy("<f4", "(3,)", bytes_of<float>({1, 2, 3})));
  edp_test::write_plain(d.file("y.npy"), npy("<i8", "(3,)", bytes_of<int64_t>({0, 1, -4})));
  EXPECT_THROW_WITH(load_npy(d.file("X.npy"), d.file("y.npy")), DataError, "y.npy", "at byte 144", "-4",
                    "class label");
  edp_test::write_plain(d.file("y2.npy"), npy("<i8", "(2,)", bytes_of<int64_t>({0, 1})));
  EXPECT_THROW_WITH(load_npy(d.file("X.npy"), d.file("y2.npy")), DataError, "y2.npy", "3 samples");
  edp_test::write_plain(d.file("y3.npy"), npy("<i8", "(3,)", bytes_of<int64_t>({0, 1, 4})));
  EXPECT_THROW_WITH(load_npy(d.file("X.npy"), d.file("y3.npy"), {.num_classes = 3}), DataError, "y3.npy",
                    "at byte 144", "below num_classes = 3");
}

TEST(Npz, StoredAndDeflatedArchives) {
  TempDir d;
  const auto x = npy("<f8", "(3, 2)", bytes_of<double>({1, 2, 3, 4, 5, 6}));
  const auto y = npy("<f4", "(3,)", bytes_of<float>({0.5, 1.5, 2.5}));
  for (bool deflate : {false, true}) {
    SCOPED_TRACE(deflate);
    const std::string p = d.file(deflate ? "c.npz" : "s.npz");
    edp_test::write_plain(p, zip({{"x.npy", x}, {"y.npy", y}}, deflate));
    auto ds = load_npz(p);
    EXPECT_EQ(ds->size(), 3);
    EXPECT_EQ(ds->label_dtype(), DType::F32);
    float f[2], t;
    ds->read_sample(2, f, &t);
    EXPECT_EQ(f[0], 5.0f);
    EXPECT_EQ(f[1], 6.0f);
    EXPECT_EQ(t, 2.5f);
    EXPECT_THROW_WITH(load_npz(p, {.features = "X"}), DataError, "no array 'X'", "x [3, 2]", "y [3]");
  }
  // Damage: a flipped data byte fails the crc32; a file that is no zip has no directory.
  auto bytes = zip({{"x.npy", x}, {"y.npy", y}}, false);
  bytes[30 + 5 + 70] ^= 0x40;  // inside x.npy (local header 30 + name 5, then its byte 70)
  edp_test::write_plain(d.file("bad.npz"), bytes);
  EXPECT_THROW_WITH(read_npz(d.file("bad.npz")), DataError, "bad.npz", "x.npy", "crc32", "at byte 35");
  edp_test::write_plain(d.file("no.npz"), x);
  EXPECT_THROW_WITH(read_npz(d.file("no.npz")), DataError, "no.npz", "zip archive");
  // A deflated entry whose headers announce 3 GiB (a fuzzer's finding): refused before a buffer of
  // that size is allocated, since deflate expands at most 1032:1.
  auto forged = zip({{"x.npy", x}}, true);
  const uint32_t huge = 3u << 30;
  auto set32 = [&](size_t at) {
    for (int k = 0; k < 4; ++k) forged[at + static_cast<size_t>(k)] = static_cast<uint8_t>(huge >> (8 * k));
  };
  set32(22);  // the local header's uncompressed size
  for (size_t i = 0; i + 4 <= forged.size(); ++i)
    if (forged[i] == 'P' && forged[i + 1] == 'K' && forged[i + 2] == 1 && forged[i + 3] == 2) set32(i + 24);  // the directory's
  edp_test::write_plain(d.file("forged.npz"), forged);
  EXPECT_THROW_WITH(read_npz(d.file("forged.npz")), DataError, "forged.npz", "announces 3221225472 bytes",
                    "1032:1");
}

TEST(Csv, HeaderColumnsAndClassNames) {
  TempDir d;
  write_text(d.file("iris.csv"),
             "sepal,petal,\"note, with comma\",species\n"
             "1.5,2,x,setosa\n"
             "\n"
             "3,4.25,y,virginica\r\n"
             "5,6,z,setosa\n");
  auto ds = load_csv(d.file("iris.csv"), {.targets = {"species"}, .features = {"petal", "sepal"}});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->num_classes(), 2);
  EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"setosa", "virginica"}));
  float x[2];
  EXPECT_EQ(ds->get(1, x), 1);
  EXPECT_EQ(x[0], 4.25f);  // the column order asked for: petal, sepal
  EXPECT_EQ(x[1], 3.0f);
  // Numbers as targets: values (regression); no header: columns by index.
  write_text(d.file("r.csv"), "1,2,0.5\n3,4,1.5\n");
  auto r = load_csv(d.file("r.csv"), {.targets = {"2"}, .header = false});
  EXPECT_EQ(r->label_dtype(), DType::F32);
  EXPECT_EQ(r->sample_shape(), (Shape{2}));
  float y;
  r->read_sample(1, x, &y);
  EXPECT_EQ(y, 1.5f);
  EXPECT_EQ(x[0], 3.0f);
  auto c = load_csv(d.file("r.csv"), {.targets = {"0"}, .header = false, .kind = Targets::classes});
  EXPECT_EQ(c->num_classes(), 4);
}

TEST(Csv, MalformedFieldsNameLineColumnAndOffset) {
  TempDir d;
  const std::string p = d.file("bad.csv");
  write_text(p, "a,b,t\n1,2,0\n3,oops,1\n");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"t"}}), DataError, p, "at byte 14", "line 3", "column 'b'",
                    "expected a number", "'oops'");
  write_text(p, "a,b,t\n1,2,0\n3,1\n");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"t"}}), DataError, "line 3", "2 fields, expected 3");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"target"}}), DataError, "no column 'target'", "a, b, t");
  write_text(p, "a,t\n1,0.5\n");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"t"}, .kind = Targets::classes}), DataError, "at byte 6",
                    "class label");
  write_text(p, "a,t\n1,\"0\n");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"t"}}), DataError, "at byte 6", "not closed");
  // Blanks around a number are allowed; a number beyond double's range is none.
  write_text(p, "a,t\n 2.5\t, 1\n");
  float x, y;
  load_csv(p, {.targets = {"t"}})->read_sample(0, &x, &y);
  EXPECT_EQ(x, 2.5f);
  EXPECT_EQ(y, 1.0f);
  write_text(p, "a,t\n1e999,1\n");
  EXPECT_THROW_WITH(load_csv(p, {.targets = {"t"}}), DataError, "line 2", "expected a number", "'1e999'");
}

TEST(Arrays, DistributedLoaderShardsAndResumesThem) {
  // Value targets through the job's loader: 2 ranks, 7 samples (not a multiple of the global
  // batch 4): every sample once per epoch, targets travel with their samples, and a state saved
  // after one step resumes at another world size with the rest of the epoch.
  TempDir d;
  std::vector<float> xs, ys;
  for (int i = 0; i < 7; ++i) xs.push_back(static_cast<float>(i)), ys.push_back(10.0f * static_cast<float>(i));
  write_npy(d.file("X.npy"), Tensor::from_vector<float>({7, 1}, xs));
  write_npy(d.file("y.npy"), Tensor::from_vector<float>({7}, ys));
  auto ds = load_npy(d.file("X.npy"), d.file("y.npy"));
  std::multiset<int> seen;
  SamplerState after_one;
  for (int rank = 0; rank < 2; ++rank) {
    DistributedLoader l(ds, 5, 2, rank, 2);
    l.start_epoch(0);
    DistributedLoader::Step s;
    int step = 0;
    while (l.next(s)) {
      for (int64_t r = 0; r < s.local; ++r) {
        EXPECT_EQ(s.batch.y.item(r), 10.0 * s.batch.x.item(r));
        seen.insert(static_cast<int>(s.batch.x.item(r)));
      }
      if (++step == 1 && rank == 0) after_one = l.sampler().state();
    }
  }
  EXPECT_EQ(seen, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6}));
  DistributedLoader one(ds, 5, 1, 0, 3);
  one.load_state(after_one);
  one.start_epoch(0);
  DistributedLoader::Step s;
  int64_t rest = 0;
  while (one.next(s)) rest += s.local;
  EXPECT_EQ(rest, 3);  // 7 - the first global batch of 4
}
