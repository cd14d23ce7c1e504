#include <fluxcpp/fluxcpp.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int bad = 0;
  {
    fluxcpp::Context ctx(MPI_COMM_WORLD);
    const int W = ctx.world_size();
    fluxcpp::AllGather ag(ctx, {2 * W, 4, fluxcpp::DType::kFloat32});
    std::vector<float> in(8, static_cast<float>(ctx.rank())), out(8 * W);
    ag.forward(in.data(), 2 * W, out.data());
    for (int i = 0; i < 8 * W; ++i) bad += out[i] != static_cast<float>(i / 8);
    ctx.close();
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  std::printf("consumer_cpp: %s\n", bad == 0 ? "ok" : "WRONG");
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
