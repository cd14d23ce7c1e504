// The single-host context's network (comm/network.hpp), and the ops' way to their network.
#include "comm/network.hpp"

#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

class NoNetwork final : public Network {
 public:
  const char* name() const override { return "none"; }
  std::unique_ptr<Transport> transport(const Parts& ctx, const char* op,
                                       std::size_t) override {
    missing(ctx, op);
  }
  std::unique_ptr<P2pNet> p2p(const Parts& ctx, const char* op, std::size_t, int,
                              const std::vector<int>&) override {
    missing(ctx, op);
  }
  std::unique_ptr<RecordSwap> rail_swap(const Parts& ctx, std::string what) override {
    missing(ctx, what.c_str());
  }
  void check_hosts(int) const override {}
  bool usable() const override { return true; }

 private:
  [[noreturn]] static void missing(const Parts& ctx, const char* op) {
    raise(Errc::kInternal, "{}: ranks on {} hosts, but the context has no network channel", op,
          ctx.topo().num_hosts());
  }
};

}  // namespace

Network& no_network() {
  static NoNetwork* const none = new NoNetwork;  // never freed: contexts may outlive statics
  return *none;
}

std::unique_ptr<Transport> make_transport(const Parts& ctx, const char* op,
                                          std::size_t chunk_bytes) {
  return ctx.network().transport(ctx, op, chunk_bytes);
}

std::unique_ptr<P2pNet> make_p2p_net(const Parts& c, const char* op, std::size_t slot_bytes,
                                     int num_slots, const std::vector<int>& peers) {
  return c.network().p2p(c, op, slot_bytes, num_slots, peers);
}

}  // namespace fluxcpp::comm
