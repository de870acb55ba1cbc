// ArrayDataset and the loaders over it: .npy pairs, .npz archives and CSV text
// (edp/data/arrays.h). Features are converted to float32 as each sample is read; class targets
// are converted and checked once, at load, so a bad label names its file and byte offset before
// any training starts.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include "edp/core/error.h"
#include "edp/data/arrays.h"
#include "core/text.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

namespace {

Shape tail_shape(const Shape& s) {
  const auto& d = s.dims();
  return d.size() <= 1 ? Shape{} : Shape(std::vector<int64_t>(d.begin() + 1, d.end()));
}

}  // namespace

ArrayDataset::ArrayDataset(Array features, Array targets, ArrayOptions options) : features_(std::move(features)) {
  check_rows(targets);
  label_shape_ = tail_shape(targets.shape());
  Targets kind = options.targets;
  if (kind == Targets::automatic) kind = targets.kind() == 'f' ? Targets::values : Targets::classes;
  if (kind == Targets::values) {
    values_.push_back(std::move(targets));
    return;
  }
  const int64_t n = targets.shape().numel();
  labels_.resize(static_cast<size_t>(n));
  double top = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double v = targets.at(i);
    if (!(v >= 0) || v != std::floor(v) || v > std::numeric_limits<int32_t>::max())
      throw DataError(concat(targets.name(), ": at byte ", targets.offset_of(i), ": target ", i, " is ", v,
                             ", expected a class label (an integer >= 0); for regression targets pass "
                             "Targets::values"));
    labels_[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    top = std::max(top, v);
  }
  label_per_row_ = std::max<int64_t>(1, targets.row_size());
  classes_ = options.num_classes > 0 ? options.num_classes : static_cast<int>(top) + 1;
  if (classes_ < 1) classes_ = 1;  // no samples
  if (top >= classes_) {
    const auto at = std::find(labels_.begin(), labels_.end(), static_cast<int32_t>(top)) - labels_.begin();
    throw DataError(concat(targets.name(), ": at byte ", targets.offset_of(at), ": target ", at, " is class ", top,
                           ", expected below num_classes = ", classes_));
  }
}

ArrayDataset::ArrayDataset(Array features, std::vector<int32_t> labels, int num_classes)
    : features_(std::move(features)), labels_(std::move(labels)), classes_(num_classes) {
  EDP_CHECK(static_cast<int64_t>(labels_.size()) == features_.rows(), "ArrayDataset: ", labels_.size(),
            " labels for ", features_.rows(), " samples");
  EDP_CHECK(classes_ >= 1, "ArrayDataset: num_classes must be >= 1");
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] < 0 || labels_[i] >= classes_)
      throw DataError(concat(features_.name(), ": label ", labels_[i], " of sample ", i, " is outside [0, ", classes_, ")"));
}

ArrayDataset::ArrayDataset(Array features, Array values, Targets kind, int num_classes)
    : ArrayDataset(std::move(features), std::move(values), ArrayOptions{kind, num_classes}) {}

void ArrayDataset::check_rows(const Array& targets) const {
  if (features_.shape().ndim() < 1)
    throw DataError(concat(features_.name(), ": a scalar, expected features with a leading sample dimension [N, ...]"));
  if (targets.shape().ndim() < 1 || targets.rows() != features_.rows())
    throw DataError(concat(targets.name(), ": targets ", targets.shape().str(), " do not match the ", features_.rows(),
                           " samples of ", features_.name(), " ", features_.shape().str(),
                           ": expected a leading dimension of ", features_.rows()));
}

Shape ArrayDataset::sample_shape() const {
  // [N] features: one value per sample, [1] (a Linear layer maps the last dimension).
  return features_.shape().ndim() == 1 ? Shape{1} : tail_shape(features_.shape());
}

Shape ArrayDataset::label_shape() const { return label_shape_; }

int32_t ArrayDataset::get(int64_t i, float* out) const {
  if (classes_ == 0 || label_per_row_ != 1)
    throw Error(concat("ArrayDataset::get: ", features_.name(),
                       " has value targets or several per sample: read it with read_sample() or a DataLoader"));
  if (i < 0 || i >= size()) throw Error(concat("ArrayDataset::get(", i, "): index out of range for ", size(), " samples"));
  features_.read_f32(i, 1, out);
  return labels_[static_cast<size_t>(i)];
}

void ArrayDataset::read_sample(int64_t i, void* x, void* y) const {
  if (i < 0 || i >= size())
    throw Error(concat("ArrayDataset::read_sample(", i, "): index out of range for ", size(), " samples"));
  features_.read_f32(i, 1, static_cast<float*>(x));
  if (!values_.empty())
    values_[0].read_f32(i, 1, static_cast<float*>(y));
  else
    std::memcpy(y, labels_.data() + i * label_per_row_, static_cast<size_t>(label_per_row_) * sizeof(int32_t));
}

std::shared_ptr<ArrayDataset> load_npy(const std::string& features, const std::string& targets, ArrayOptions options) {
  return std::make_shared<ArrayDataset>(Array::open_npy(features), Array::open_npy(targets), options);
}

std::shared_ptr<ArrayDataset> load_npz(const std::string& path, NpzOptions options) {
  std::map<std::string, Array> arrays = read_npz(path);
  auto take = [&](const std::string& key, const char* what) {
    auto it = arrays.find(key);
    if (it == arrays.end()) {
      std::string have;
      for (const auto& [k, a] : arrays) have += (have.empty() ? "" : ", ") + k + " " + a.shape().str();
      throw DataError(concat(path, ": no array '", key, "' for the ", what, " (NpzOptions::", what, "); it holds: ",
                             have.empty() ? std::string("nothing") : have));
    }
    return it->second;
  };
  return std::make_shared<ArrayDataset>(take(options.features, "features"), take(options.targets, "targets"),
                                        ArrayOptions{options.kind, options.num_classes});
}

// ---- CSV -------------------------------------------------------------------------------------------

namespace {

struct Field {
  std::string text;
  int64_t offset;  // byte offset of the field in the file
};

// Splits the text into lines of fields; quoted fields may hold the delimiter and newlines.
std::vector<std::vector<Field>> split_csv(const std::string& path, const char* s, size_t n, char delim) {
  std::vector<std::vector<Field>> rows;
  std::vector<Field> row;
  size_t i = 0;
  while (i < n) {
    Field f{"", static_cast<int64_t>(i)};
    if (s[i] == '"') {
      ++i;
      for (;;) {
        if (i >= n) throw DataError(concat(path, ": at byte ", f.offset, ": a quoted field is not closed"));
        if (s[i] == '"') {
          if (i + 1 < n && s[i + 1] == '"') {
            f.text += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        f.text += s[i++];
      }
    } else {
      while (i < n && s[i] != delim && s[i] != '\n' && s[i] != '\r') f.text += s[i++];
    }
    row.push_back(std::move(f));
    if (i < n && s[i] == delim) {
      ++i;
      continue;
    }
    if (i < n && s[i] != '\n' && s[i] != '\r')
      throw DataError(concat(path, ": at byte ", i, ": expected the delimiter or the end of the line after a field"));
    if (i < n && s[i] == '\r') ++i;
    if (i < n && s[i] == '\n') ++i;
    // A blank line (one empty field) is skipped.
    if (!(row.size() == 1 && row[0].text.empty())) rows.push_back(std::move(row));
    row.clear();
  }
  if (!row.empty() && !(row.size() == 1 && row[0].text.empty())) rows.push_back(std::move(row));
  return rows;
}

// A field that is a number, blanks around it allowed; out of double's range is not one.
bool parse_number(const std::string& t, double& v) {
  errno = 0;
  return text::parse_double(text::trim(t, " \t"), v) && errno != ERANGE;
}

}  // namespace

std::shared_ptr<ArrayDataset> load_csv(const std::string& path, CsvOptions o) {
  if (o.targets.empty())
    throw Error(concat("load_csv(", path, "): name the target column(s) (CsvOptions::targets)"));
  auto m = detail::map_file(path, "");
  const auto rows = split_csv(path, static_cast<const char*>(m->p), m->n, o.delimiter);
  if (rows.empty() || (o.header && rows.size() < 2))
    throw DataError(concat(path, ": at byte 0: expected ", o.header ? "a header line and " : "", "at least one row"));
  const size_t width = rows[0].size();
  std::vector<std::string> names;
  for (size_t c = 0; c < width; ++c) names.push_back(o.header ? rows[0][c].text : std::to_string(c));
  auto column = [&](const std::string& name) -> size_t {
    for (size_t c = 0; c < width; ++c)
      if (names[c] == name) return c;
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    throw DataError(concat(path, ": no column '", name, "' (", o.header ? "the header names: " : "without a header, columns are ",
                           all, ")"));
  };
  std::vector<size_t> tcols, fcols;
  for (const auto& t : o.targets) tcols.push_back(column(t));
  if (o.features.empty()) {
    for (size_t c = 0; c < width; ++c)
      if (std::find(tcols.begin(), tcols.end(), c) == tcols.end()) fcols.push_back(c);
  } else {
    for (const auto& f : o.features) fcols.push_back(column(f));
  }
  if (fcols.empty()) throw DataError(concat(path, ": no feature column left besides the targets"));
  const size_t first = o.header ? 1 : 0;
  const int64_t n = static_cast<int64_t>(rows.size() - first);
  Tensor x(Shape{n, static_cast<int64_t>(fcols.size())}, DType::F32);
  float* xp = x.data<float>();
  // The line number of each row is counted from the offsets (quoted newlines included).
  const char* text = static_cast<const char*>(m->p);
  auto line_of = [&](int64_t offset) { return 1 + std::count(text, text + offset, '\n'); };
  auto need_number = [&](const Field& f, size_t c, double& v) {
    if (!parse_number(f.text, v))
      throw DataError(concat(path, ": at byte ", f.offset, " (line ", line_of(f.offset), ", column '", names[c],
                             "'): expected a number, found '", f.text, "'"));
  };
  for (int64_t r = 0; r < n; ++r) {
    const auto& row = rows[first + static_cast<size_t>(r)];
    if (row.size() != width)
      throw DataError(concat(path, ": at byte ", row[0].offset, " (line ", line_of(row[0].offset), "): ", row.size(),
                             " fields, expected ", width, " like the first line"));
    for (size_t k = 0; k < fcols.size(); ++k) {
      double v;
      need_number(row[fcols[k]], fcols[k], v);
      xp[r * static_cast<int64_t>(fcols.size()) + static_cast<int64_t>(k)] = static_cast<float>(v);
    }
  }
  Array features = Array::from_tensor(path, x);
  // Targets: numbers, unless a field is not one (then names of classes, one target column only).
  bool numeric = true;
  for (int64_t r = 0; r < n && numeric; ++r)
    for (size_t c : tcols) {
      double v;
      if (!parse_number(rows[first + static_cast<size_t>(r)][c].text, v)) numeric = false;
    }
  Targets kind = o.kind;
  if (kind == Targets::automatic) kind = numeric ? Targets::values : Targets::classes;
  if (!numeric) {
    if (kind == Targets::values) {
      for (int64_t r = 0; r < n; ++r)
        for (size_t c : tcols) {
          double v;
          need_number(rows[first + static_cast<size_t>(r)][c], c, v);
        }
    }
    if (tcols.size() != 1)
      throw DataError(concat(path, ": class names in several target columns: give one target column of names"));
    std::set<std::string> uniq;
    for (int64_t r = 0; r < n; ++r) uniq.insert(rows[first + static_cast<size_t>(r)][tcols[0]].text);
    std::vector<std::string> classes(uniq.begin(), uniq.end());
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      labels[static_cast<size_t>(r)] = static_cast<int32_t>(
          std::lower_bound(classes.begin(), classes.end(), rows[first + static_cast<size_t>(r)][tcols[0]].text) -
          classes.begin());
    const int nc = std::max(o.num_classes, static_cast<int>(classes.size()));
    auto ds = std::make_shared<ArrayDataset>(std::move(features), std::move(labels), nc);
    ds->set_class_names(std::move(classes));
    return ds;
  }
  const bool one = tcols.size() == 1;
  Tensor y(one ? Shape{n} : Shape{n, static_cast<int64_t>(tcols.size())}, DType::F64);
  double* yp = y.data<double>();
  for (int64_t r = 0; r < n; ++r)
    for (size_t k = 0; k < tcols.size(); ++k) {
      double v;
      const Field& f = rows[first + static_cast<size_t>(r)][tcols[k]];
      need_number(f, tcols[k], v);
      if (kind == Targets::classes && (!(v >= 0) || v != std::floor(v)))
        throw DataError(concat(path, ": at byte ", f.offset, " (line ", line_of(f.offset), ", column '",
                               names[tcols[k]], "'): expected a class label (an integer >= 0), found '", f.text, "'"));
      yp[r * static_cast<int64_t>(tcols.size()) + static_cast<int64_t>(k)] = v;
    }
  return std::make_shared<ArrayDataset>(std::move(features), Array::from_tensor(path, y),
                                        ArrayOptions{kind, o.num_classes});
}

}  // namespace edp::data
