// A small CSV reader for the trace and profile files: header by name, typed fields, and errors
// that name the file, the line and the column (1-based) so a malformed row can be fixed by hand.
// Internal to src/autoscale.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace edp::autoscale::detail {

class CsvFile {
 public:
  // Reads the whole file; throws edp::DataError if it cannot be opened or has no header.
  explicit CsvFile(const std::string& path);

  const std::string& path() const { return path_; }
  size_t rows() const { return rows_.size(); }
  bool has_column(const std::string& name) const { return col_.count(name) != 0; }
  // Throws DataError naming the file and the columns that are present.
  size_t column(const std::string& name) const;

  const std::string& str(size_t row, size_t col) const;
  double num(size_t row, size_t col) const;       // finite number
  int64_t integer(size_t row, size_t col) const;  // integer (no fraction)
  [[noreturn]] void fail(size_t row, size_t col, const std::string& what) const;

 private:
  struct Row {
    int line;
    std::vector<std::string> fields;
    std::vector<int> columns;  // 1-based character column where each field starts
  };
  std::string path_;
  std::vector<std::string> header_;
  std::unordered_map<std::string, size_t> col_;
  std::vector<Row> rows_;
};

}  // namespace edp::autoscale::detail
