// Errors: every failure is an edp::Error (a std::runtime_error) whose message carries the
// context a user can act on (file, offset, tensor name, shapes, what to try).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace edp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input data (malformed files, wrong sizes): the message names the file and what was
// expected versus found.
class DataError : public Error {
 public:
  using Error::Error;
};

// Shapes or dtypes that do not fit together.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// An error every rank of a communicator raises alike because the ranks decided it together (a
// collective verdict: the divergence guard, settings the ranks disagree on, a checkpoint
// directory in use). comm::run_main reports it once, rank 0's message, instead of once per rank.
// rank and size: this rank's place in the communicator that decided (the job's, which after an
// elastic rescale is not MPI's world).
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, int rank, int size) : Error(what), rank_(rank), size_(size) {}
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_, size_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace edp

// EDP_CHECK(cond, msg...) throws edp::Error with file:line and the streamed message.
#define EDP_CHECK(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw ::edp::Error(::edp::detail::concat(__FILE__, ":", __LINE__, ": ",         \
                                               __VA_ARGS__));                         \
  } while (0)

#define EDP_CHECK_SHAPE(cond, ...)                                                    \
  do {                                                                                \
    if (!(cond)) throw ::edp::ShapeError(::edp::detail::concat(__VA_ARGS__));         \
  } while (0)
