/* fluxcpp_mpi.h: the entry points of the C ABI (fluxcpp/fluxcpp.h) that take MPI types: a
 * context made from an MPI communicator. fluxcpp.h includes this header unless FLUXCPP_NO_MPI is
 * defined before it, so existing callers need no change; this header includes fluxcpp.h itself,
 * so it can be included on its own. The contract is docs/api.md. */
#ifndef FLUXCPP_FLUXCPP_MPI_H_
#define FLUXCPP_FLUXCPP_MPI_H_

#include <mpi.h>

#include "fluxcpp/export.h"
#include "fluxcpp/fluxcpp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective. config NULL: defaults. A context spanning several hosts needs MPI initialised
 * with MPI_THREAD_MULTIPLE (else FLUXCPP_ERROR_INVALID_USAGE). Launch guard: a comm that is
 * MPI_COMM_WORLD of size 1 while the launcher's environment says it started more processes
 * (WORLD_SIZE, SLURM_STEP_NUM_TASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE) is
 * FLUXCPP_ERROR_INVALID_USAGE: the processes were not started as one MPI job. */
FLUXCPP_API fluxcpp_status_t fluxcpp_context_create(MPI_Comm comm,
                                                    const fluxcpp_context_config_t* config,
                                                    fluxcpp_context_t* ctx);

#ifdef __cplusplus
}
#endif

#endif /* FLUXCPP_FLUXCPP_MPI_H_ */
