// The training programs' command lines: edp::cli::Options (edp/core/cli.h), under the name the
// examples have always used. --some-knob is also read from EDP_SOME_KNOB.
#pragma once
#include "edp/core/cli.h"

namespace edp::train {
using Options = cli::Options;
}  // namespace edp::train
