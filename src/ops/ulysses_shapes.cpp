#include "ops/ulysses_shapes.hpp"

#include "error_util.hpp"
#include "ops/core/op_checks.hpp"

namespace fluxcpp::ops {

UlyssesDims ulysses_dims(int W, int64_t bs, int64_t seq, int64_t nheads, int64_t head_dim) {
  const int64_t s_loc = seq / W, heads_loc = nheads / W;
  return {bs, seq, s_loc, bs * s_loc, heads_loc, head_dim, heads_loc * head_dim};
}

void ulysses_check_create(const comm::Parts& c, const char* op, int64_t max_bs, int64_t max_seq,
                          int64_t nheads, int64_t head_dim, DType in, DType out,
                          std::pair<const char*, int64_t> own, bool own_is_k,
                          const std::string& local_error) {
  if (c.life().closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", op);
  comm::Group& comm = c.control();
  comm::agree_value(comm, op, own.first, own.second);
  comm::agree_value(comm, op, "nheads", nheads);
  comm::agree_value(comm, op, "head_dim", head_dim);
  comm::agree_value(comm, op, "max_bs", max_bs);
  comm::agree_value(comm, op, "max_seq", max_seq);
  const int W = c.topo().world_size();
  std::string err = local_error;
  constexpr int64_t kLarge = int64_t{1} << 31;
  // Every factor is bounded before any product is formed (no overflow on any input).
  if (!err.empty()) {
  } else if (nheads < 1 || head_dim < 1 || own.second < 1) {
    err = fmt::format("nheads={}, head_dim={} and {}={} must be >= 1", nheads, head_dim, own.first,
                      own.second);
  } else if (nheads % W != 0) {
    err = fmt::format("nheads={} is not divisible by the world size {}", nheads, W);
  } else if (max_bs < 0 || max_seq < 0) {
    err = fmt::format("max_bs={} and max_seq={} must be >= 0", max_bs, max_seq);
  } else if (max_bs >= kLarge || max_seq >= kLarge || nheads >= kLarge || head_dim >= kLarge ||
             nheads * head_dim >= kLarge || max_bs * (max_seq / W) >= kLarge) {
    err = fmt::format("max_bs={}, max_seq={}, nheads={}, head_dim={} are too large", max_bs,
                      max_seq, nheads, head_dim);
  }
  const bool sane = err.empty();
  const int64_t hd = sane ? nheads * head_dim : 1, ow = sane ? own.second : 1;
  check_gemm_create(
      c, op,
      {sane ? max_bs * (max_seq / W) : 0, own_is_k ? hd : ow, own_is_k ? ow : hd, in, out, false},
      err);
}

std::string ulysses_check_forward(
    const comm::Parts& c, const char* op, int64_t bs, int64_t seq, int64_t max_bs, int64_t max_seq,
    std::initializer_list<std::pair<const char*, const void*>> required) {
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  if (bs < 0 || bs > max_bs)
    return fmt::format("{}: bs={} must be in [0, max_bs={}] (rank {})", op, bs, max_bs, r);
  if (seq < 0 || seq > max_seq)
    return fmt::format("{}: seq={} must be in [0, max_seq={}] (rank {})", op, seq, max_seq, r);
  if (seq % W != 0)
    return fmt::format("{}: seq={} is not divisible by the world size {} (rank {})", op, seq, W, r);
  if (bs > 0 && seq > 0)
    for (const auto& [name, ptr] : required)
      if (ptr == nullptr)
        return fmt::format("{}: {} is NULL with bs={}, seq={} (rank {})", op, name, bs, seq, r);
  return {};
}

}  // namespace fluxcpp::ops
