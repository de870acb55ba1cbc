// CSV reading with file:line:column errors (see csv.h). Quoted fields ("a,b", "" for a quote)
// are accepted because spreadsheet tools write them, though our data files do not use them.
#include "csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "edp/core/error.h"
#include "edp/core/files.h"

namespace edp::autoscale::detail {
namespace {

void split(const std::string& line, const std::string& path, int lineno, std::vector<std::string>& fields,
           std::vector<int>& cols) {
  fields.clear();
  cols.clear();
  std::string cur;
  bool quoted = false;
  int start = 1;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += ch;
      }
    } else if (ch == '"' && cur.empty()) {
      quoted = true;
    } else if (ch == ',') {
      fields.push_back(cur);
      cols.push_back(start);
      cur.clear();
      start = static_cast<int>(i) + 2;
    } else {
      cur += ch;
    }
  }
  if (quoted)
    throw DataError(path + ":" + std::to_string(lineno) + ":" + std::to_string(start) + ": unterminated quoted field");
  fields.push_back(cur);
  cols.push_back(start);
}

}  // namespace

CsvFile::CsvFile(const std::string& path) : path_(path) {
  // A regular file only (a FIFO would block), at most files::kRequestLimit bytes.
  std::istringstream in(files::read_file(path, files::kRequestLimit));
  std::string line;
  int lineno = 0;
  std::vector<std::string> fields;
  std::vector<int> cols;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    split(line, path, lineno, fields, cols);
    if (header_.empty()) {
      header_ = fields;
      for (size_t i = 0; i < header_.size(); ++i) col_[header_[i]] = i;
      continue;
    }
    if (fields.size() != header_.size())
      throw DataError(path + ":" + std::to_string(lineno) + ":" + std::to_string(cols.back()) + ": expected " +
                      std::to_string(header_.size()) + " fields (as in the header), found " +
                      std::to_string(fields.size()));
    rows_.push_back(Row{lineno, fields, cols});
  }
  if (header_.empty()) throw DataError(path + ":1:1: empty file, expected a CSV header line");
}

size_t CsvFile::column(const std::string& name) const {
  auto it = col_.find(name);
  if (it == col_.end()) {
    std::string have;
    for (const auto& h : header_) have += (have.empty() ? "" : ",") + h;
    throw DataError(path_ + ":1:1: missing column '" + name + "' (header has: " + have + ")");
  }
  return it->second;
}

const std::string& CsvFile::str(size_t row, size_t col) const { return rows_[row].fields[col]; }

void CsvFile::fail(size_t row, size_t col, const std::string& what) const {
  const Row& r = rows_[row];
  throw DataError(path_ + ":" + std::to_string(r.line) + ":" + std::to_string(r.columns[col]) + ": column '" +
                  header_[col] + "': " + what);
}

double CsvFile::num(size_t row, size_t col) const {
  const std::string& s = str(row, col);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
    fail(row, col, "expected a finite number, got '" + s + "'");
  return v;
}

int64_t CsvFile::integer(size_t row, size_t col) const {
  const std::string& s = str(row, col);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    fail(row, col, "expected an integer, got '" + s + "'");
  return v;
}

}  // namespace edp::autoscale::detail
