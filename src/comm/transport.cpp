// The channel selector: which network an op's transfers between hosts ride on, decided once per
// context by how it was made.
#include "comm/transport.hpp"

#include "comm/context_impl.hpp"
#include "comm/gloo_transport.hpp"
#include "comm/mpi_transport.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

std::unique_ptr<Transport> make_transport(detail::ContextImpl& ctx, const char* op,
                                          std::size_t chunk_bytes) {
  if (ctx.mpi_comm() != MPI_COMM_NULL) return std::make_unique<MpiTransport>(ctx, op, chunk_bytes);
  if (ctx.net()) return std::make_unique<GlooTransport>(ctx, op, chunk_bytes);
  raise(Errc::kInternal, "{}: ranks on {} hosts, but the context has no network channel", op,
        ctx.num_nodes());
}

}  // namespace fluxcpp::comm
