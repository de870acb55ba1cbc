// MPI_CHECK(call): turns a failed MPI call into an edp::Error naming the call, the world rank,
// MPI's own error string and file:line. Communicators made by edp use MPI_ERRORS_RETURN so
// that errors reach this macro instead of MPI's default abort. Internal to src/comm/.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <string>

#include "edp/core/error.h"

namespace edp::comm::detail {

[[noreturn]] inline void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) std::snprintf(msg, sizeof msg, "error %d", rc);
  int rank = -1, inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw Error(::edp::detail::concat(file, ":", line, ": ", call, " failed on rank ", rank, ": ", msg));
}

}  // namespace edp::comm::detail

#define MPI_CHECK(call)                                                                  \
  do {                                                                                   \
    const int edp_mpi_rc_ = (call);                                                      \
    if (edp_mpi_rc_ != MPI_SUCCESS)                                                      \
      ::edp::comm::detail::throw_mpi_error(edp_mpi_rc_, #call, __FILE__, __LINE__);      \
  } while (0)
