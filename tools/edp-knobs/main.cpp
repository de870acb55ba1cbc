// edp-knobs: the EDP_* environment variables edp reads (src/core/knobs.cpp's table).
//   edp-knobs             one line per knob: name, type, default, current value when set
//   edp-knobs --markdown  docs/knobs.md
#include <cstdio>
#include <cstring>
#include <string>

#include "edp/core/knobs.h"

namespace {
const char* kHeader =
    "# Knobs: edp's environment variables\n"
    "\n"
    "Every `EDP_*` environment variable edp reads, generated from the registry in\n"
    "`src/core/knobs.cpp` by `edp-knobs --markdown > docs/knobs.md` (the test `knobs_doc` fails when\n"
    "this file and the registry differ). A malformed value is an error naming the variable, never\n"
    "ignored. An empty default means the value depends on the context (the description says how).\n"
    "The command-line flags of the examples are also read from `EDP_<FLAG>` (see `--help`).\n";
}  // namespace

int main(int argc, char** argv) {
  using namespace edp::knobs;
  const bool md = argc > 1 && std::strcmp(argv[1], "--markdown") == 0;
  if (argc > 1 && !md) {
    std::fprintf(argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) ? stdout : stderr,
                 "usage: edp-knobs [--markdown]\nLists edp's EDP_* environment variables; --markdown prints "
                 "docs/knobs.md.\n");
    return std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ? 0 : 2;
  }
  if (md) {
    std::fputs(kHeader, stdout);
    std::fputs(markdown().c_str(), stdout);
    return 0;
  }
  for (const Knob& k : all()) {
    std::printf("%-34s %-7s %-8s %s\n", k.name, type_name(k.type), *k.def ? k.def : "-",
                is_set(k.name) ? ("= " + raw(k.name)).c_str() : "");
  }
  return 0;
}
