// What every fuzz target shares: quiet logs, and the input as a file (a memfd named by its
// /proc/self/fd path) for the parsers that read a path — so that the whole reading path, safe
// open included, is what is fuzzed.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace edp_fuzz {

// The input written to one memfd, reused across inputs (rewritten and truncated each time).
inline std::string as_file(const uint8_t* data, size_t size) {
  static int fd = -1;
  if (fd < 0) fd = ::memfd_create("edp-fuzz-input", 0);
  if (fd < 0) std::abort();
  if (::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace edp_fuzz

// libFuzzer calls this once before the first input; the replay driver too.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("EDP_LOG_LEVEL", "off", 1);  // parsers warn about what they skip: not to the terminal here
  return 0;
}
