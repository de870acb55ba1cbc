// edprun: the launcher (see include/edp/launch/edprun.h and docs/launch.md).
#include "edp/launch/edprun.h"

int main(int argc, char** argv) { return edp::launch::edprun_main(argc, argv); }
