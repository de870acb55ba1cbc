// Collectives among the ranks of one host through shared memory (host_shm.h says how and why).
#include "host_shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <new>

#include "edp/core/error.h"
#include "edp/core/knobs.h"

namespace edp::comm::detail {

namespace {

constexpr uint64_t kMagic = 0x6d68732d70646501ull;  // "\x01edp-shm"
constexpr size_t kLine = 64;

std::string errno_text(int e) { return std::strerror(e); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// How long a waiting member spins before it sleeps (EDP_HOST_SHM_SPIN_US, read once).
std::chrono::nanoseconds spin_time() {
  static const auto t = std::chrono::microseconds(knobs::get_int("EDP_HOST_SHM_SPIN_US"));
  return t;
}

template <typename T>
struct Sum {
  T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct Max {
  T operator()(T a, T b) const { return a < b ? b : a; }
};
template <typename T>
struct Min {
  T operator()(T a, T b) const { return b < a ? b : a; }
};

// out[from, to) = src[0] op src[1] op ... op src[n-1], left to right (the same bits on every
// member and every run).
template <typename T, typename Op>
void reduce_slice(char* out, char* const* src, int n, int64_t from, int64_t to, Op op) {
  T* o = reinterpret_cast<T*>(out);
  std::memcpy(o + from, reinterpret_cast<const T*>(src[0]) + from, static_cast<size_t>(to - from) * sizeof(T));
  for (int j = 1; j < n; ++j) {
    const T* s = reinterpret_cast<const T*>(src[j]);
    for (int64_t k = from; k < to; ++k) o[k] = op(o[k], s[k]);
  }
}

template <typename T>
void reduce_typed(ReduceOp op, char* out, char* const* src, int n, int64_t from, int64_t to) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: reduce_slice<T>(out, src, n, from, to, Sum<T>{}); return;
    case ReduceOp::Max: reduce_slice<T>(out, src, n, from, to, Max<T>{}); return;
    case ReduceOp::Min: reduce_slice<T>(out, src, n, from, to, Min<T>{}); return;
  }
}

void reduce(DType dtype, ReduceOp op, char* out, char* const* src, int n, int64_t from, int64_t to) {
  switch (dtype) {
    case DType::F32: return reduce_typed<float>(op, out, src, n, from, to);
    case DType::F64: return reduce_typed<double>(op, out, src, n, from, to);
    case DType::I32: return reduce_typed<int32_t>(op, out, src, n, from, to);
    case DType::I64: return reduce_typed<int64_t>(op, out, src, n, from, to);
    case DType::U8: return reduce_typed<uint8_t>(op, out, src, n, from, to);
    case DType::BF16: break;
  }
  throw Error("comm: shared-memory reductions of bfloat16 are not supported (reduce float32)");
}

}  // namespace

// The segment's first bytes. Every field sits on a cache line of its own: the counters are
// written by one member each and read by all.
struct HostShm::Header {
  alignas(kLine) uint64_t magic;
  uint64_t nonce;
  int64_t members;
  int64_t slot_bytes;
  alignas(kLine) std::atomic<uint32_t> word;  // bumped by every arrival; the futex sleepers wait on it
  alignas(kLine) std::atomic<uint32_t> waiters;
  struct alignas(kLine) Counter {
    std::atomic<uint64_t> phase;
  };
  Counter counters[1];  // `members` of them
};

int64_t HostShm::slot_bytes_for(int max_members) {
  // About 16 MiB per buffer set at most, 64 KiB to 1 MiB a slot, a multiple of 64 KiB.
  const int64_t unit = int64_t{64} << 10;
  const int64_t share = (int64_t{16} << 20) / (std::max(1, max_members) + 1);
  return std::clamp<int64_t>(share / unit * unit, unit, kMaxSlotBytes);
}

size_t HostShm::header_bytes(int size) {
  const size_t raw = offsetof(Header, counters) + sizeof(Header::Counter) * static_cast<size_t>(size);
  return (raw + 4095) / 4096 * 4096;
}

size_t HostShm::segment_bytes(int size, int64_t slot_bytes) {
  return header_bytes(size) + 2 * static_cast<size_t>(size + 1) * static_cast<size_t>(slot_bytes);
}

HostShm::HostShm(std::string name, void* base, size_t bytes, int rank, int size, int64_t slot_bytes)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      hdr_(static_cast<Header*>(base)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes) {}

std::unique_ptr<HostShm> HostShm::create(int size, int64_t slot_bytes, uint64_t nonce) {
  EDP_CHECK(size >= 2 && size <= kMaxMembers, "comm: a host group of ", size, " ranks (2 to ", kMaxMembers,
            " share memory)");
  uint64_t r[2] = {0, 0};
  EDP_CHECK(getrandom(r, sizeof r, 0) == static_cast<ssize_t>(sizeof r), "comm: getrandom failed: ",
            errno_text(errno));
  char name[64];
  std::snprintf(name, sizeof name, "/edp-host-%016llx%016llx", static_cast<unsigned long long>(r[0]),
                static_cast<unsigned long long>(r[1]));
  // O_EXCL: a new object, never one planted under the name (shm_open adds O_NOFOLLOW).
  const int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  EDP_CHECK(fd >= 0, "comm: cannot create the shared-memory segment /dev/shm", name, ": ", errno_text(errno));
  const size_t bytes = segment_bytes(size, slot_bytes);
  // Reserve every page now: a /dev/shm too small fails here, not with SIGBUS in a collective.
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base = rc == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int e = rc != 0 ? rc : errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name);
    throw Error(::edp::detail::concat("comm: cannot reserve ", bytes >> 20, " MiB of shared memory in /dev/shm for the ",
                                      size, " ranks of this host: ", errno_text(e)));
  }
  auto* h = new (base) Header;
  h->nonce = nonce;
  h->members = size;
  h->slot_bytes = slot_bytes;
  new (&h->word) std::atomic<uint32_t>(0);
  new (&h->waiters) std::atomic<uint32_t>(0);
  for (int i = 0; i < size; ++i) new (&h->counters[i].phase) std::atomic<uint64_t>(0);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->magic = kMagic;
  return std::unique_ptr<HostShm>(new HostShm(name, base, bytes, 0, size, slot_bytes));
}

std::unique_ptr<HostShm> HostShm::attach(const std::string& name, int rank, int size, int64_t slot_bytes,
                                         uint64_t nonce) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  EDP_CHECK(fd >= 0, "comm: cannot open the shared-memory segment /dev/shm", name, " that the host's first rank made: ",
            errno_text(errno), " (is /dev/shm this host's, shared by its ranks?)");
  const size_t bytes = segment_bytes(size, slot_bytes);
  struct stat st {};
  const bool whole = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                     static_cast<size_t>(st.st_size) == bytes;
  void* base = whole ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int e = errno;
  close(fd);
  EDP_CHECK(whole, "comm: the shared-memory segment /dev/shm", name, " is not the one the host's first rank made");
  EDP_CHECK(base != MAP_FAILED, "comm: cannot map the shared-memory segment /dev/shm", name, ": ", errno_text(e));
  const auto* h = static_cast<const Header*>(base);
  if (h->magic != kMagic || h->nonce != nonce || h->members != size || h->slot_bytes != slot_bytes) {
    munmap(base, bytes);
    throw Error("comm: the shared-memory segment /dev/shm" + name +
                " does not carry this communicator's stamp (another host's /dev/shm?)");
  }
  return std::unique_ptr<HostShm>(new HostShm(name, base, bytes, rank, size, slot_bytes));
}

HostShm::~HostShm() {
  if (rank_ == 0 && !unlinked_) shm_unlink(name_.c_str());
  if (base_) munmap(base_, bytes_);
}

void HostShm::unlink_name() {
  if (!unlinked_) shm_unlink(name_.c_str());
  unlinked_ = true;
}

char* HostShm::slot(int set, int member) const {
  return static_cast<char*>(base_) + header_bytes(size_) +
         (static_cast<size_t>(set) * static_cast<size_t>(size_ + 1) + static_cast<size_t>(member)) *
             static_cast<size_t>(slot_bytes_);
}
char* HostShm::result(int set) const { return slot(set, size_); }

bool HostShm::reached(uint64_t phase, int member) const {
  if (member >= 0) return hdr_->counters[member].phase.load(std::memory_order_acquire) >= phase;
  for (int i = 0; i < size_; ++i)
    if (hdr_->counters[i].phase.load(std::memory_order_acquire) < phase) return false;
  return true;
}

void HostShm::arrive() {
  ++phase_;
  hdr_->counters[rank_].phase.store(phase_, std::memory_order_seq_cst);
  hdr_->word.fetch_add(1, std::memory_order_seq_cst);
  if (hdr_->waiters.load(std::memory_order_seq_cst) > 0) futex(&hdr_->word, FUTEX_WAKE, INT_MAX, nullptr);
}

void HostShm::wait_for(uint64_t phase, int member) {
  if (reached(phase, member)) return;
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + spin_time();
  for (int i = 1;; ++i) {
    cpu_relax();
    if (reached(phase, member)) return;
    if ((i & 63) == 0 && Clock::now() >= until) break;
  }
  // Asleep until an arrival bumps the word. The waiter count is raised before the word is read
  // and the condition checked again, so an arrival either sees the waiter and wakes it, or its
  // counter is seen by that check (both sides use sequentially consistent operations).
  const timespec slice{0, 50'000'000};  // wakes now and then regardless: nothing is lost if a wake is
  for (;;) {
    hdr_->waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = hdr_->word.load(std::memory_order_seq_cst);
    if (reached(phase, member)) {
      hdr_->waiters.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    futex(&hdr_->word, FUTEX_WAIT, seen, &slice);
    hdr_->waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(phase, member)) return;
  }
}

void HostShm::claim(int set) { wait_for(set_free_[set]); }

void HostShm::allreduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                        const std::function<void(void*, int64_t)>& cross) {
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int64_t chunk = slot_bytes_ / es;
  // Each member reduces a slice of the chunk: whole cache lines, so no two members write one.
  const int64_t align = std::max<int64_t>(1, static_cast<int64_t>(kLine) / es);
  char* out = static_cast<char*>(buf);
  char* src[kMaxMembers];
  for (int64_t off = 0; off < count; off += chunk) {
    const int64_t n = std::min(chunk, count - off);
    const size_t bytes = static_cast<size_t>(n * es);
    const int set = next_set_;
    next_set_ ^= 1;
    claim(set);
    std::memcpy(slot(set, rank_), out + off * es, bytes);
    arrive();
    wait_for(phase_);
    if (!cross && static_cast<int64_t>(bytes) <= kWholeBytes) {
      // Small: every member reduces the whole chunk itself (the same bits on each), which saves a
      // round of waiting.
      for (int j = 0; j < size_; ++j) src[j] = slot(set, j);
      reduce(dtype, op, out + off * es, src, size_, 0, n);
      arrive();
      set_free_[set] = phase_;
      continue;
    }
    const int64_t per = (n + size_ * align - 1) / (size_ * align) * align;
    const int64_t from = std::min(n, per * rank_), to = std::min(n, per * (rank_ + 1));
    for (int j = 0; j < size_; ++j) src[j] = slot(set, j);
    if (from < to) reduce(dtype, op, result(set), src, size_, from, to);
    arrive();
    wait_for(phase_);
    if (cross) {
      if (rank_ == 0) cross(result(set), n);
      arrive();
      if (rank_ != 0) wait_for(phase_, 0);
    }
    std::memcpy(out + off * es, result(set), bytes);
    arrive();
    set_free_[set] = phase_;
  }
}

void HostShm::reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) {
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = std::max<int64_t>(1, slot_bytes_ / es / size_);  // of each block per chunk
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  char* slots[kMaxMembers];
  for (int64_t off = 0; off < count; off += piece) {
    const int64_t n = std::min(piece, count - off);
    const int set = next_set_;
    next_set_ ^= 1;
    claim(set);
    char* mine = slot(set, rank_);  // piece j of this chunk at mine + j * n * es
    for (int j = 0; j < size_; ++j)
      std::memcpy(mine + j * n * es, src + (j * count + off) * es, static_cast<size_t>(n * es));
    arrive();
    wait_for(phase_);
    for (int j = 0; j < size_; ++j) slots[j] = slot(set, j) + rank_ * n * es;
    reduce(dtype, op, dst + off * es, slots, size_, 0, n);
    arrive();
    set_free_[set] = phase_;
  }
}

void HostShm::broadcast(void* buf, int64_t bytes, int root) {
  char* p = static_cast<char*>(buf);
  for (int64_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t n = static_cast<size_t>(std::min(slot_bytes_, bytes - off));
    const int set = next_set_;
    next_set_ ^= 1;
    if (rank_ == root) {
      claim(set);
      std::memcpy(result(set), p + off, n);
    }
    arrive();
    if (rank_ != root) {
      wait_for(phase_, root);
      std::memcpy(p + off, result(set), n);
    }
    arrive();
    set_free_[set] = phase_;
  }
}

void HostShm::barrier() {
  arrive();
  wait_for(phase_);
}

}  // namespace edp::comm::detail
