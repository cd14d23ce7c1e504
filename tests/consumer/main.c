#include <fluxcpp/fluxcpp.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_WORLD, NULL, &ctx);
  if (s == FLUXCPP_SUCCESS) s = fluxcpp_context_destroy(ctx);
  printf("consumer_c: %s %s\n", fluxcpp_status_string(s), fluxcpp_last_error());
  MPI_Finalize();
  return s == FLUXCPP_SUCCESS ? 0 : 1;
}
