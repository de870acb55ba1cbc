// Configure-time probe for a GCC 12 x86 code-generation bug (docs/architecture.md, "Portable
// builds"): with AVX-512 enabled, -O2's SLP vectorizer stores the 256-bit constant {1, 1, 0, 0}
// as a broadcast of its first element, so this program reads back 1 1 1 1. Exits 0 when the
// compiler and flags under test produce the right bytes.
#include <cstdio>
#include <cstring>

typedef unsigned long long u64;

__attribute__((noinline)) static int check(const u64* p) {
  if (p[0] == 1 && p[1] == 1 && p[2] == 0 && p[3] == 0) return 0;
  std::printf("%llu %llu %llu %llu", p[0], p[1], p[2], p[3]);
  return 1;
}

int main() {
  u64* p = new u64[4];
  const u64 init[4] = {1, 1, 0, 0};
  std::memcpy(p, init, sizeof init);
  const int bad = check(p);
  delete[] p;
  return bad;
}
