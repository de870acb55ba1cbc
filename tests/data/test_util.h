// Helpers for the data tests: a private temporary folder, writing crafted files (plain or
// gzip), and checking that a call throws a given exception type whose message holds pieces.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace edp_test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("edp_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << "cannot write " << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  v.push_back(static_cast<uint8_t>(x >> 24));
  v.push_back(static_cast<uint8_t>(x >> 16));
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}

// An IDX images file: header (magic, count, rows, cols) then the pixels given.
inline std::vector<uint8_t> idx_images(uint32_t count, uint32_t rows, uint32_t cols,
                                       const std::vector<uint8_t>& pixels,
                                       uint32_t magic = 0x00000803) {
  std::vector<uint8_t> v;
  put_be32(v, magic);
  put_be32(v, count);
  put_be32(v, rows);
  put_be32(v, cols);
  v.insert(v.end(), pixels.begin(), pixels.end());
  return v;
}

inline std::vector<uint8_t> idx_labels(uint32_t count, const std::vector<uint8_t>& labels,
                                       uint32_t magic = 0x00000801) {
  std::vector<uint8_t> v;
  put_be32(v, magic);
  put_be32(v, count);
  v.insert(v.end(), labels.begin(), labels.end());
  return v;
}

// Deterministic, varied bytes for crafted files.
inline std::vector<uint8_t> pattern(size_t n, unsigned salt = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + salt * 11 + (i >> 8)) & 0xff);
  return v;
}

}  // namespace edp_test

// Runs `stmt`, expects an exception of type `type`, and each of the strings in `...` to occur
// in its message (printed in full on failure).
#define EXPECT_THROW_WITH(stmt, type, ...)                                                 \
  do {                                                                                     \
    bool caught_ = false;                                                                  \
    try {                                                                                  \
      stmt;                                                                                \
    } catch (const type& e_) {                                                             \
      caught_ = true;                                                                      \
      const std::string msg_ = e_.what();                                                  \
      for (const std::string& want_ : std::vector<std::string>{__VA_ARGS__})               \
        EXPECT_NE(msg_.find(want_), std::string::npos)                                     \
            << "message lacks \"" << want_ << "\": " << msg_;                              \
    } catch (const std::exception& e_) {                                                   \
      ADD_FAILURE() << "expected " #type ", got another exception: " << e_.what();         \
    }                                                                                      \
    if (!caught_) ADD_FAILURE() << "expected " #type " from: " #stmt;                      \
  } while (0)
