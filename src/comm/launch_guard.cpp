#include "comm/launch_guard.hpp"

#include <cstdlib>

#include "comm/config.hpp"
#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

// Launch guard. Processes started by a launcher that is not MPI's own (torchrun), or by one whose
// process manager this MPI does not speak (srun without --mpi, another MPI's mpirun), each see
// an MPI_COMM_WORLD of one rank. A context over it would run every rank alone at W = 1 and give
// silently wrong results, so it is refused with a hint. These variables each mean "the launcher
// started N processes of one job"; SLURM_NTASKS is not among them because a batch script sees
// the allocation's task count while it runs as one process.
void check_launch(MPI_Comm user_comm, int size) {
  if (size != 1) return;
  int cmp = MPI_UNEQUAL;
  check_mpi(MPI_Comm_compare(user_comm, MPI_COMM_WORLD, &cmp), "MPI_Comm_compare");
  if (cmp != MPI_IDENT && cmp != MPI_CONGRUENT) return;
  // MPI_COMM_SELF itself asks for a context of this process alone (a local GEMM context beside
  // a launcher's ranks): only the world, or a copy of it, is taken for the job.
  check_mpi(MPI_Comm_compare(user_comm, MPI_COMM_SELF, &cmp), "MPI_Comm_compare");
  if (cmp == MPI_IDENT) return;
  if (env_choice("FLUXCPP_LAUNCH_GUARD", {"on", "off"}) == 1) return;
  for (const char* var : {"WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                          "MV2_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n <= 1) continue;
    raise(Errc::kInvalidUsage,
          "context: MPI_COMM_WORLD has 1 rank but {}={}: the launcher started {} processes that "
          "each initialised MPI alone. Start them as one MPI job: mpirun -np {} <program>, or "
          "srun --mpi=pmix -n {} <program>; or leave MPI out and create the context from the "
          "launcher's store (Python: fluxcpp.Context.from_store() under torchrun; C: "
          "fluxcpp_context_create_from_store). A context of this process alone: MPI_COMM_SELF "
          "(Python: fluxcpp.Context.local()). "
          "FLUXCPP_LAUNCH_GUARD=off allows one-rank contexts in such a job on purpose",
          var, v, n, n, n);
  }
}

}  // namespace fluxcpp::comm
