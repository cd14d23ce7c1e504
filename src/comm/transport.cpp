// The channel selector: which network an op's traffic between hosts rides on (transfers and
// point-to-point pairs), decided once per context by how it was made.
#include "comm/transport.hpp"

#include "comm/context_impl.hpp"
#include "comm/gloo_p2p_net.hpp"
#include "comm/gloo_transport.hpp"
#include "comm/mpi_p2p_net.hpp"
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

std::unique_ptr<P2pNet> make_p2p_net(detail::ContextImpl& c, const char* op,
                                     std::size_t slot_bytes, int num_slots,
                                     const std::vector<int>& peers) {
  if (c.mpi_comm() != MPI_COMM_NULL)
    return std::make_unique<MpiP2pNet>(c, op, slot_bytes, num_slots, peers);
  if (c.net()) return std::make_unique<GlooP2pNet>(c, op, slot_bytes, num_slots, peers);
  raise(Errc::kInternal, "{}: ranks on {} hosts, but the context has no network channel", op,
        c.num_nodes());
}

}  // namespace fluxcpp::comm
