// Expert-parallel MoE: moe_dispatch and moe_combine against the MPI_Alltoallv path a framework
// writes without them (layout, pack, MPI_Alltoall of the counts, MPI_Alltoallv of the rows,
// reorder into expert-major order; combine: reorder back, MPI_Alltoallv, the same k-ordered
// sum). Uniform top-k routing; bytes/rank = T·hidden·element size (the rank's tokens).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/moe_combine.hpp"
#include "fluxcpp/moe_dispatch.hpp"
#include "fluxcpp/moe_layout.hpp"
#include "kernels/moe_combine_kernel.hpp"

namespace fluxcpp::bench {

namespace {

using Bytes = std::vector<unsigned char>;

struct Shape {
  int64_t T, hidden, E, K;
  DType dtype;
};

// The unfused reference: everything an MPI user does, with the library's layout kernel and the
// same summation kernel (so the comparison is about moving data).
class MpiMoe {
 public:
  MpiMoe(const Shape& s, int W, int r, const int32_t* ids)
      : s_(s),
        W_(W),
        r_(r),
        L_(s.E / W),
        row_(static_cast<std::size_t>(s.hidden) * dtype_size(s.dtype)) {
    lay_ = moe_layout(ids, s.T, s.K, s.E, W);
    ids_ = ids;
    send_counts_.assign(static_cast<std::size_t>(s.E), 0);
    recv_counts_.assign(static_cast<std::size_t>(W * L_), 0);
    std::copy(lay_.expert_counts.begin(), lay_.expert_counts.end(), send_counts_.begin());
    MPI_Alltoall(send_counts_.data(), static_cast<int>(L_), MPI_INT64_T, recv_counts_.data(),
                 static_cast<int>(L_), MPI_INT64_T, MPI_COMM_WORLD);
    for (int q = 0; q < W; ++q) {
      sc_.push_back(static_cast<int>(lay_.rank_rows[q] * static_cast<int64_t>(row_)));
      int64_t n = 0;
      for (int64_t l = 0; l < L_; ++l) n += recv_counts_[q * L_ + l];
      rc_.push_back(static_cast<int>(n * static_cast<int64_t>(row_)));
    }
    sd_.assign(W, 0);
    rd_.assign(W, 0);
    for (int q = 1; q < W; ++q) sd_[q] = sd_[q - 1] + sc_[q - 1], rd_[q] = rd_[q - 1] + rc_[q - 1];
    rows_ = (rd_[W - 1] + rc_[W - 1]) / static_cast<int64_t>(row_);
    packed_.resize(static_cast<std::size_t>(s.T * s.K) * row_);
    arrived_.resize(static_cast<std::size_t>(rows_) * row_);
    slot_rows_.resize(static_cast<std::size_t>(s.T * s.K));
  }
  int64_t rows() const { return rows_; }

  void dispatch(const unsigned char* input, unsigned char* recv) {
    // Every call: the layout of this call's table and the count exchange.
    lay_ = moe_layout(ids_, s_.T, s_.K, s_.E, W_);
    std::vector<int64_t> rc(recv_counts_.size());
    MPI_Alltoall(lay_.expert_counts.data(), static_cast<int>(L_), MPI_INT64_T, rc.data(),
                 static_cast<int>(L_), MPI_INT64_T, MPI_COMM_WORLD);
    int64_t M = 0;
    for (int64_t n : lay_.rank_rows) M += n;
    for (int64_t j = 0; j < M; ++j)
      std::memcpy(packed_.data() + j * row_, input + lay_.gather_index[j] * row_, row_);
    MPI_Alltoallv(packed_.data(), sc_.data(), sd_.data(), MPI_BYTE, arrived_.data(), rc_.data(),
                  rd_.data(), MPI_BYTE, MPI_COMM_WORLD);
    walk([&](std::size_t from, std::size_t to, std::size_t n) {
      std::memcpy(recv + to, arrived_.data() + from, n);
    });
  }

  void combine(const unsigned char* y, unsigned char* out, DType out_t) {
    walk([&](std::size_t from, std::size_t to, std::size_t n) {
      std::memcpy(arrived_.data() + from, y + to, n);
    });
    MPI_Alltoallv(arrived_.data(), rc_.data(), rd_.data(), MPI_BYTE, packed_.data(), sc_.data(),
                  sd_.data(), MPI_BYTE, MPI_COMM_WORLD);
    lay_ = moe_layout(ids_, s_.T, s_.K, s_.E, W_);
    for (int64_t i = 0; i < s_.T * s_.K; ++i)
      slot_rows_[i] =
          lay_.scatter_index[i] < 0 ? nullptr : packed_.data() + lay_.scatter_index[i] * row_;
    kernels::moe_combine_rows(slot_rows_.data(), nullptr, 0, s_.T, s_.K, s_.hidden, s_.dtype, out_t,
                              out);
  }

 private:
  // (byte offset in the MPI receive order (s, l), byte offset in expert-major order (l, s), bytes)
  template <class F>
  void walk(F&& f) {
    std::size_t to = 0;
    for (int64_t l = 0; l < L_; ++l)
      for (int s = 0; s < W_; ++s) {
        std::size_t from = static_cast<std::size_t>(rd_[s]);
        for (int64_t l2 = 0; l2 < l; ++l2) from += recv_counts_[s * L_ + l2] * row_;
        const std::size_t n = recv_counts_[s * L_ + l] * row_;
        if (n > 0) f(from, to, n);
        to += n;
      }
  }

  Shape s_;
  int W_, r_;
  int64_t L_;
  std::size_t row_;
  MoeLayout lay_;
  const int32_t* ids_;
  std::vector<int64_t> send_counts_, recv_counts_;
  std::vector<int> sc_, sd_, rc_, rd_;
  int64_t rows_ = 0;
  Bytes packed_, arrived_;
  std::vector<const void*> slot_rows_;
};

std::vector<Shape> shapes(const Env& env) {
  if (env.settings().link)
    return {{512, 1024, 8, 2, DType::kFloat32}, {512, 4096, 8, 2, DType::kBFloat16}};
  if (!env.settings().full)
    return {{512, 1024, 8, 2, DType::kFloat32},
            {512, 4096, 64, 6, DType::kBFloat16},
            {4096, 1024, 8, 2, DType::kFloat32}};
  std::vector<Shape> v;
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (int64_t T : {512, 4096})
      for (int64_t h : {1024, 4096})
        for (int64_t E : {8, 64})
          for (int64_t K : {2, 6}) v.push_back({T, h, E, K, d});
  return v;
}

}  // namespace

void bench_moe(Env& env) {
  const int W = env.world(), r = env.rank();
  env.section(fmt::format("moe: dispatch / combine vs the MPI_Alltoallv path, {} ranks on {} "
                          "host(s), uniform top-k routing; bytes = T·hidden per rank",
                          W, env.ctx().num_hosts()),
              {"op", "dtype", "T", "hidden", "E", "topk", "bytes/rank", "fluxcpp", "MPI", "speedup",
               "#wrong"});
  for (const Shape& s : shapes(env)) {
    if (s.E % W != 0) continue;
    const std::size_t row = static_cast<std::size_t>(s.hidden) * dtype_size(s.dtype);
    // Keep a rank's buffers within reach of a small machine (--full's largest shapes).
    if (static_cast<double>(s.T * s.K) * row > 512.0 * (1 << 20)) continue;
    std::vector<int32_t> ids(static_cast<std::size_t>(s.T * s.K));
    uint64_t x = 0x9E3779B97F4A7C15ull * (r + 1);
    for (auto& e : ids) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      e = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(s.E));
    }
    MpiMoe ref(s, W, r, ids.data());
    int64_t cap = ref.rows();
    MPI_Allreduce(MPI_IN_PLACE, &cap, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    MoeDispatch dispatch(env.ctx(), {s.T, s.hidden, s.K, s.E, cap, s.dtype});
    MoeCombine combine(env.ctx(), {s.T, s.hidden, s.K, s.E, cap, s.dtype, s.dtype});
    const Bytes input = random_values(s.dtype, static_cast<std::size_t>(s.T * s.hidden), 7 + r);
    Bytes recv(static_cast<std::size_t>(cap) * row), recv_ref(recv.size());
    std::vector<int64_t> counts(static_cast<std::size_t>(s.E / W));
    Bytes out(static_cast<std::size_t>(s.T) * row), out_ref(out.size());
    const std::vector<Stats> td = env.time_all({
        [&] {
          dispatch.forward({input.data(), s.T, ids.data(), nullptr},
                           {recv.data(), nullptr, nullptr, counts.data()});
        },
        [&] { ref.dispatch(input.data(), recv_ref.data()); },
    });
    long wrong_d = std::memcmp(recv.data(), recv_ref.data(), ref.rows() * row) != 0;
    const std::vector<Stats> tc = env.time_all({
        [&] {
          combine.forward({recv.data(), ref.rows(), s.T, ids.data(), nullptr}, out.data());
        },
        [&] { ref.combine(recv.data(), out_ref.data(), s.dtype); },
    });
    long wrong_c = std::memcmp(out.data(), out_ref.data(), out.size()) != 0;
    MPI_Allreduce(MPI_IN_PLACE, &wrong_d, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong_c, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double bytes = static_cast<double>(s.T) * static_cast<double>(row);
    const char* ops[2] = {"moe_dispatch", "moe_combine"};
    const std::vector<Stats>* ts[2] = {&td, &tc};
    const long wrong[2] = {wrong_d, wrong_c};
    for (int i = 0; i < 2; ++i) {
      const Stats& ours = (*ts[i])[0];
      const Stats& mpi = (*ts[i])[1];
      env.row({ops[i], dtype_name(s.dtype), std::to_string(s.T), std::to_string(s.hidden),
               std::to_string(s.E), std::to_string(s.K), fmt_bytes(bytes), fmt_ms(ours.median_ms),
               fmt_ms(mpi.median_ms), fmt::format("{:.2f}x", mpi.median_ms / ours.median_ms),
               std::to_string(wrong[i])});
      env.json({{"op", jstr(ops[i])},
                {"dtype", jstr(dtype_name(s.dtype))},
                {"world", jnum(W)},
                {"hosts", jnum(env.ctx().num_hosts())},
                {"tokens", jnum(static_cast<double>(s.T))},
                {"hidden", jnum(static_cast<double>(s.hidden))},
                {"experts", jnum(static_cast<double>(s.E))},
                {"topk", jnum(static_cast<double>(s.K))},
                {"bytes_per_rank", jnum(bytes)},
                {"t_fused_ms", jnum(ours.median_ms)},
                {"t_unfused_ms", jnum(mpi.median_ms)},
                {"speedup", jnum(mpi.median_ms / ours.median_ms)},
                {"wrong", jnum(static_cast<double>(wrong[i]))}});
    }
  }
}

}  // namespace fluxcpp::bench
