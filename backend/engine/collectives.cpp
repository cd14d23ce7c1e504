// Collectives on raw buffers, each one of the library's ops (or two: a gather, then a reduction
// in rank order). Data that is not whole 2-byte units moves through padded staging blocks.
#include "collectives.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace fluxcpp::backend {
namespace {

enum Kind { kAllReduce, kReduceScatter, kAllGather, kAllToAll };
constexpr int64_t kMinCapacity = int64_t{1} << 15;  // elements or 2-byte units
constexpr int64_t kUnit = 2;                          // AllGather / AllToAllSingle move bf16 units
// From this size a broadcast to more than one peer goes down a tree (see broadcast_tree).
constexpr int64_t kTreeBroadcastBytes = int64_t{256} << 10;

bool native_sum(Scalar s, Reduce r) {
  return r == Reduce::kSum && (s == Scalar::kF32 || s == Scalar::kBF16 || s == Scalar::kF64);
}

fluxcpp_dtype_t dtype_of(Scalar s) {
  return s == Scalar::kF64 ? FLUXCPP_FLOAT64 : s == Scalar::kBF16 ? FLUXCPP_BFLOAT16
                                                                   : FLUXCPP_FLOAT32;
}

int64_t grown(int64_t old, int64_t need) {
  return std::max({need, 2 * old, kMinCapacity});
}

int64_t padded(int64_t bytes) { return bytes + (bytes & 1); }

}  // namespace

Collectives::Collectives(fluxcpp_context_t ctx, int rank, int size)
    : ctx_(ctx), rank_(rank), size_(size), calls_(std::make_unique<CallCheck>(ctx, rank, size)) {
  check(fluxcpp_context_info(ctx, nullptr, nullptr, nullptr, &host_size_), "context info");
}

std::vector<int> Collectives::reduce_scatter_order(Scalar s, Reduce r) const {
  std::vector<int> order;
  if (!rank_order(s, r)) return order;
  const bool ring = native_sum(s, r) && host_size_ == size_ && size_ > 1;
  for (int i = 0; i < size_; ++i) order.push_back(ring ? (rank_ - 1 - i + 2 * size_) % size_ : i);
  return order;
}

bool Collectives::rank_order(Scalar s, Reduce r) const {
  return !native_sum(s, r) || host_size_ == 1 || host_size_ == size_;
}

Collectives::~Collectives() {
  calls_.reset();
  for (auto& [key, op] : ops_) drop(key.first, op);
  fluxcpp_context_destroy(ctx_);
}

void Collectives::drop(int kind, Op& op) {
  switch (kind) {
    case kAllReduce: fluxcpp_all_reduce_destroy(static_cast<fluxcpp_all_reduce_t>(op.handle)); break;
    case kReduceScatter:
      fluxcpp_reduce_scatter_destroy(static_cast<fluxcpp_reduce_scatter_t>(op.handle));
      break;
    case kAllGather: fluxcpp_all_gather_destroy(static_cast<fluxcpp_all_gather_t>(op.handle)); break;
    case kAllToAll:
      fluxcpp_all_to_all_single_destroy(static_cast<fluxcpp_all_to_all_single_t>(op.handle));
      break;
  }
  op = Op{};
}

char* Collectives::scratch(std::size_t bytes, int which) {
  auto& v = scratch_[which];
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

void* Collectives::all_reduce_op(Scalar s, int64_t count) {
  Op& op = ops_[{kAllReduce, static_cast<int>(s)}];
  if (op.capacity >= count) return op.handle;
  const int64_t cap = grown(op.capacity, count);
  drop(kAllReduce, op);
  fluxcpp_all_reduce_t h = nullptr;
  check(fluxcpp_all_reduce_create(ctx_, cap, dtype_of(s), &h), "all_reduce create");
  op = {h, cap};
  return h;
}

void* Collectives::reduce_scatter_op(Scalar s, int64_t count) {
  Op& op = ops_[{kReduceScatter, static_cast<int>(s)}];
  if (op.capacity >= count) return op.handle;
  const int64_t cap = grown(op.capacity, count);
  drop(kReduceScatter, op);
  fluxcpp_reduce_scatter_t h = nullptr;
  check(fluxcpp_reduce_scatter_create(ctx_, cap * size_, 1, dtype_of(s), &h),
        "reduce_scatter create");
  op = {h, cap};
  return h;
}

void* Collectives::all_gather_op(int64_t units) {
  Op& op = ops_[{kAllGather, 0}];
  if (op.capacity >= units) return op.handle;
  const int64_t cap = grown(op.capacity, units);
  drop(kAllGather, op);
  fluxcpp_all_gather_t h = nullptr;
  check(fluxcpp_all_gather_create(ctx_, cap * size_, 1, FLUXCPP_BFLOAT16, &h), "all_gather create");
  op = {h, cap};
  return h;
}

void* Collectives::all_to_all_op(int64_t units) {
  Op& op = ops_[{kAllToAll, 0}];
  if (op.capacity >= units) return op.handle;
  const int64_t cap = grown(op.capacity, units);
  drop(kAllToAll, op);
  fluxcpp_all_to_all_single_t h = nullptr;
  check(fluxcpp_all_to_all_single_create(ctx_, cap, 1, FLUXCPP_BFLOAT16, &h), "all_to_all create");
  op = {h, cap};
  return h;
}

void Collectives::all_reduce(Scalar s, Reduce r, const void* in, void* out, int64_t count) {
  if (count == 0) return;
  const std::size_t es = scalar_size(s);
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, count * es);
    if (r == Reduce::kAvg) reduce_blocks(s, r, &out, 1, count, out, 1);
    return;
  }
  if (native_sum(s, r)) {
    auto* op = static_cast<fluxcpp_all_reduce_t>(all_reduce_op(s, count));
    check(fluxcpp_all_reduce_forward(op, in, count, out), "all_reduce");
    return;
  }
  char* all = scratch(static_cast<std::size_t>(size_) * count * es, 1);
  all_gather(in, static_cast<int64_t>(count * es), all);
  std::vector<const void*> blocks(size_);
  for (int t = 0; t < size_; ++t) blocks[t] = all + static_cast<std::size_t>(t) * count * es;
  reduce_blocks(s, r, blocks.data(), size_, count, out, size_);
}

void Collectives::reduce_scatter(Scalar s, Reduce r, const void* in, void* out, int64_t count) {
  if (count == 0) return;
  const std::size_t es = scalar_size(s);
  if (size_ == 1) return all_reduce(s, r, in, out, count);
  if (native_sum(s, r)) {
    auto* op = static_cast<fluxcpp_reduce_scatter_t>(reduce_scatter_op(s, count));
    check(fluxcpp_reduce_scatter_forward(op, in, count * size_, out), "reduce_scatter");
    return;
  }
  const int64_t block = static_cast<int64_t>(count * es);
  std::vector<int64_t> sizes(size_, block);
  char* mine = scratch(static_cast<std::size_t>(size_) * block, 1);
  all_to_all(in, sizes.data(), mine, sizes.data(), size_ * block);
  std::vector<const void*> blocks(size_);
  for (int t = 0; t < size_; ++t) blocks[t] = mine + static_cast<std::size_t>(t) * block;
  reduce_blocks(s, r, blocks.data(), size_, count, out, size_);
}

void Collectives::all_gather(const void* in, int64_t bytes, void* out) {
  if (bytes == 0) return;
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, bytes);
    return;
  }
  const int64_t p = padded(bytes);
  auto* op = static_cast<fluxcpp_all_gather_t>(all_gather_op(p / kUnit));
  if (p == bytes) {
    check(fluxcpp_all_gather_forward(op, in, size_ * (p / kUnit), out), "all_gather");
    return;
  }
  char* staged_in = scratch(p, 0);
  std::memcpy(staged_in, in, bytes);
  char* staged_out = scratch(static_cast<std::size_t>(size_) * p, 2);
  check(fluxcpp_all_gather_forward(op, staged_in, size_ * (p / kUnit), staged_out), "all_gather");
  for (int t = 0; t < size_; ++t)
    std::memcpy(static_cast<char*>(out) + static_cast<int64_t>(t) * bytes,
                staged_out + static_cast<int64_t>(t) * p, bytes);
}

void Collectives::all_to_all(const void* in, const int64_t* send, void* out, const int64_t* recv,
                             int64_t bound) {
  if (size_ == 1) {
    if (send[0] != recv[0])
      throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT,
                    "fluxcpp backend: all_to_all: rank 0 sends itself " + std::to_string(send[0]) +
                        " bytes but expects " + std::to_string(recv[0]));
    if (send[0] > 0 && in != out) std::memmove(out, in, send[0]);
    return;
  }
  const bool even = std::all_of(send, send + size_, [](int64_t b) { return b % 2 == 0; }) &&
                    std::all_of(recv, recv + size_, [](int64_t b) { return b % 2 == 0; });
  std::vector<int64_t> su(size_), ru(size_);
  for (int t = 0; t < size_; ++t) su[t] = padded(send[t]) / kUnit, ru[t] = padded(recv[t]) / kUnit;
  const int64_t sent = std::accumulate(su.begin(), su.end(), int64_t{0});
  const int64_t got = std::accumulate(ru.begin(), ru.end(), int64_t{0});
  // One forward on `op`; odd sizes staged through 2-byte units.
  auto run = [&](void* h) {
    auto* op = static_cast<fluxcpp_all_to_all_single_t>(h);
    if (even) {
      check(fluxcpp_all_to_all_single_forward(op, sent ? in : nullptr, su.data(),
                                              got ? out : nullptr, ru.data()),
            "all_to_all");
      return;
    }
    char* staged_in = scratch(sent * kUnit, 0);
    const char* src = static_cast<const char*>(in);
    int64_t off = 0;
    for (int t = 0; t < size_; off += su[t] * kUnit, src += send[t], ++t)
      std::memcpy(staged_in + off, src, send[t]);
    char* staged_out = scratch(got * kUnit, 2);
    check(fluxcpp_all_to_all_single_forward(op, sent ? staged_in : nullptr, su.data(),
                                            got ? staged_out : nullptr, ru.data()),
          "all_to_all");
    char* dst = static_cast<char*>(out);
    off = 0;
    for (int t = 0; t < size_; off += ru[t] * kUnit, dst += recv[t], ++t)
      std::memcpy(dst, staged_out + off, recv[t]);
  };
  int64_t units = bound >= 0 ? padded(bound) / kUnit + size_ : -1;  // + size_: each block's pad
  if (units < 0) {
    // Sizes not known alike: every rank first calls the op it has (the same on every rank). A
    // rank whose message exceeds it makes the call fail on every rank (INVALID_ARGUMENT, before
    // a byte moves); then they agree on the largest need and grow. One exchange, not two, while
    // the op is large enough.
    const Op& have = ops_[{kAllToAll, 0}];
    if (have.handle != nullptr) {
      try {
        run(have.handle);
        return;
      } catch (const Failure& f) {
        if (f.status() != FLUXCPP_ERROR_INVALID_ARGUMENT) throw;
      }
    }
    std::vector<int64_t> all(size_);
    const int64_t need = std::max(sent, got);
    all_gather(&need, sizeof need, all.data());
    units = *std::max_element(all.begin(), all.end());
  }
  if (units == 0) return;
  run(all_to_all_op(units));
}

void Collectives::broadcast(void* data, int64_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return;
  if (size_ > 2 && bytes >= kTreeBroadcastBytes) return broadcast_tree(data, bytes, root);
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  if (rank_ != root) {
    recv[root] = bytes;
    return all_to_all(nullptr, send.data(), data, recv.data(), (size_ - 1) * bytes);
  }
  for (int t = 0; t < size_; ++t) send[t] = t == root ? 0 : bytes;
  const int64_t p = padded(bytes);
  if (size_ == 2 || p != bytes) {
    // One peer: the root's data is the whole input, which the peer may read straight from the
    // root's memory (the op's single copy). Odd sizes are staged by all_to_all.
    char* copies = static_cast<char*>(data);
    if (size_ > 2) {
      copies = scratch(static_cast<std::size_t>(size_ - 1) * bytes, 1);
      for (int t = 0; t < size_ - 1; ++t) std::memcpy(copies + t * bytes, data, bytes);
    }
    return all_to_all(copies, send.data(), nullptr, recv.data(), (size_ - 1) * bytes);
  }
  // Several peers: the W - 1 copies go straight into the op's input slot.
  auto* op = static_cast<fluxcpp_all_to_all_single_t>(
      all_to_all_op((size_ - 1) * p / kUnit + size_));
  void* slot = nullptr;
  check(fluxcpp_all_to_all_single_input_buffer(op, &slot), "broadcast input buffer");
  for (int t = 0; t < size_ - 1; ++t) std::memcpy(static_cast<char*>(slot) + t * bytes, data, bytes);
  std::vector<int64_t> su(size_, 0), ru(size_, 0);
  for (int t = 0; t < size_; ++t) su[t] = send[t] / kUnit;
  check(fluxcpp_all_to_all_single_forward(op, slot, su.data(), nullptr, ru.data()), "broadcast");
}

void Collectives::broadcast_tree(void* data, int64_t bytes, int root) {
  // Binomial tree over relative ranks: at step k the 2^k ranks that have the data each send it
  // to the rank 2^k further on, every sender reading its own buffer (the op's single copy when
  // the block is large): ceil(log2 W) calls of one copy each, none at the root alone.
  const int rel = (rank_ - root + size_) % size_;
  for (int mask = 1; mask < size_; mask <<= 1) {
    std::vector<int64_t> send(size_, 0), recv(size_, 0);
    if (rel < mask && rel + mask < size_) send[(rank_ + mask) % size_] = bytes;
    if (rel >= mask && rel < 2 * mask) recv[(rank_ - mask + size_) % size_] = bytes;
    const bool sends = rel < mask && rel + mask < size_;
    const bool gets = rel >= mask && rel < 2 * mask;
    all_to_all(sends ? data : nullptr, send.data(), gets ? data : nullptr, recv.data(), bytes);
  }
}

void Collectives::gather(const void* in, int64_t bytes, void* out, int root) {
  if (bytes == 0) return;
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  send[root] = bytes;
  if (rank_ == root) std::fill(recv.begin(), recv.end(), bytes);
  all_to_all(in, send.data(), out, recv.data(), size_ * bytes);
}

void Collectives::scatter(const void* in, int64_t bytes, void* out, int root) {
  if (bytes == 0) return;
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  recv[root] = bytes;
  if (rank_ == root) std::fill(send.begin(), send.end(), bytes);
  all_to_all(in, send.data(), out, recv.data(), size_ * bytes);
}

void Collectives::barrier() {
  float one = 1.0f, sum = 0.0f;
  all_reduce(Scalar::kF32, Reduce::kSum, &one, &sum, 1);
}

}  // namespace fluxcpp::backend
