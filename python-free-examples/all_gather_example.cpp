// Gathers every rank's rows with fluxcpp::AllGather and checks them.
//   mpirun -np 2 build/python-free-examples/fluxcpp_example_all_gather
#include <fluxcpp/fluxcpp.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

// --help prints this; it is handled before MPI starts, so it also works without mpirun.
const char kUsage[] =
    "usage: mpirun -np N fluxcpp_example_all_gather [--help]\n"
    "Gathers every rank's rows with fluxcpp::AllGather (f32, 4 rows of 8 per rank) and checks\n"
    "them; rank 0 prints ok or WRONG. Any number of ranks.\n"
    "Exit status 0 when the result is right, nonzero otherwise.\n";

int main(int argc, char** argv) {
  if (argc > 1) {  // the only argument is --help
    const bool help = !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h");
    if (!help) std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[1]);
    std::fputs(kUsage, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  try {
    fluxcpp::Context ctx(MPI_COMM_WORLD);  // collective
    const int W = ctx.world_size();
    const int64_t rows = 4, k = 8, m = rows * W;
    fluxcpp::AllGather ag(ctx, {/*max_m=*/m, k, fluxcpp::DType::kFloat32});
    std::vector<float> mine(rows * k, static_cast<float>(ctx.rank())), all(m * k);
    ag.forward(mine.data(), m, all.data());  // collective, blocking
    for (int64_t i = 0; i < m * k; ++i)
      if (all[i] != static_cast<float>(i / (rows * k))) rc = 1;
    if (ctx.rank() == 0)
      std::printf("all_gather example on %d ranks: %s\n", W, rc == 0 ? "ok" : "WRONG");
    ctx.close();
  } catch (const fluxcpp::Error& e) {
    std::fprintf(stderr, "fluxcpp error (%s): %s\n", fluxcpp::errc_name(e.code()), e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
