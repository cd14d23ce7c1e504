// Packed weights (fluxcpp/packed_weight.hpp) in ag_gemm and gemm_rs against the unfused
// reference (MPI_Allgather / a sum over ranks of plain GEMMs), their snapshot semantics and
// errors; and the GEMM ops leaving the caller's OpenMP setting as they found it.
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

struct Case {
  DType in, out;
  bool transposed;
};
const Case kCases[] = {{DType::kFloat32, DType::kFloat32, false},
                       {DType::kBFloat16, DType::kBFloat16, false},
                       {DType::kBFloat16, DType::kFloat32, true},
                       {DType::kFloat32, DType::kFloat32, true}};

std::string name_of(const Case& c, int64_t m, int threads) {
  return std::string(dtype_name(c.in)) + "->" + dtype_name(c.out) +
         (c.transposed ? " weight[k,n]" : " weight[n,k]") + " m=" + std::to_string(m) +
         " threads=" + std::to_string(threads);
}

// This rank's weight (seeds of `call`), the bias (the same on every rank) and the weight packed.
struct Weights {
  Weights(const Context& ctx, const Problem& p, int call)
      : weight(random_tensor(p.in, p.n * p.k, seed_of(ctx.rank(), call, 2))),
        bias(random_tensor(p.out, p.n, seed_of(0, call, 3))),
        packed(ctx, p.in, weight.data(), p.n, p.k, p.transpose_weight) {}
  Bytes weight, bias;
  PackedWeight packed;
};

// fn(ctx, p, name) with 1 and 3 compute threads for every case, p of n and k; name describes
// the case at m rows.
template <typename F>
void for_threads_and_cases(int64_t n, int64_t k, F&& fn) {
  for (int threads : {1, 3}) {
    Context ctx(MPI_COMM_WORLD, threaded_options(threads));
    for (const Case& c : kCases)
      fn(ctx, Problem{c.in, c.out, n, k, c.transposed},
         [&c, threads](int64_t m) { return name_of(c, m, threads); });
  }
}

class PackedWeightTest : public MpiTest {};

// ag_gemm with a packed weight, at decode (2 rows per rank) and prefill sizes, with 1 and 3
// compute threads (column slabs on and off the packed layout's blocks).
TEST_F(PackedWeightTest, AgGemmMatchesAllgatherThenGemm) {
  for_threads_and_cases(200, 96, [](const Context& ctx, const Problem& p, const auto& name) {
    const int W = ctx.world_size(), r = ctx.rank();
    AgGemm op(ctx, gemm_op_options<AgGemmOptions>(p, 160 * W));
    const Weights w(ctx, p, 1);
    for (int64_t rows : {2, 160}) {
      const int64_t m = rows * W;
      const std::string what = "ag_gemm " + name(m);
      const Bytes input = random_tensor(p.in, rows * p.k, seed_of(r, static_cast<int>(rows), 1));
      Bytes out(m * p.n * dtype_size(p.out), kPoison);
      op.forward(input.data(), m, w.packed, w.bias.data(), out.data());
      const Bytes gathered = mpi_allgather(input, rows, p.k * dtype_size(p.in));
      expect_close(reference(p, m, gathered, w.weight, &w.bias), out, p.out, m, p.n, what);
    }
  });
}

// gemm_rs with a packed weight: rows of this rank's block of Σ_ranks input_r · weight_rᵀ + bias.
TEST_F(PackedWeightTest, GemmRsMatchesSumOfGemms) {
  for_threads_and_cases(130, 72, [](const Context& ctx, const Problem& p, const auto& name) {
    const int W = ctx.world_size(), r = ctx.rank();
    GemmRs op(ctx, gemm_op_options<GemmRsOptions>(p, 128 * W));
    const Weights w(ctx, p, 2);
    for (int64_t m : {int64_t{2} * W, int64_t{128} * W}) {
      const std::string what = "gemm_rs " + name(m);
      const Bytes input = random_tensor(p.in, m * p.k, seed_of(r, static_cast<int>(m), 1));
      const int64_t rows = m / W;
      Bytes out(rows * p.n * dtype_size(p.out), kPoison);
      op.forward(input.data(), m, w.packed, w.bias.data(), out.data());
      // The unfused reference: every rank's partial (bias on rank 0), summed over ranks.
      Reference part = reference(p, m, input, w.weight, r == 0 ? &w.bias : nullptr);
      MPI_Allreduce(MPI_IN_PLACE, part.value.data(), static_cast<int>(part.value.size()),
                    MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, part.tol.data(), static_cast<int>(part.tol.size()), MPI_DOUBLE,
                    MPI_SUM, MPI_COMM_WORLD);
      Reference mine;
      mine.value.assign(part.value.begin() + r * rows * p.n,
                        part.value.begin() + (r + 1) * rows * p.n);
      mine.tol.assign(part.tol.begin() + r * rows * p.n, part.tol.begin() + (r + 1) * rows * p.n);
      for (double& t : mine.tol) t *= 2;  // the fixed-order sum of W rounded partials
      expect_close(mine, out, p.out, rows, p.n, what, r * rows);
    }
  });
}

// A packed weight is a snapshot: writing the source does not change the result until update().
TEST_F(PackedWeightTest, SnapshotUntilUpdate) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  AgGemmOptions o;
  o.max_m = 4 * W;
  o.n = 70;
  o.k = 16;
  AgGemm op(ctx, o);
  std::vector<float> weight(o.n * o.k, 0.5f), input(4 * o.k, 1.0f), out(4 * W * o.n);
  PackedWeight packed(ctx, DType::kFloat32, weight.data(), o.n, o.k);
  std::fill(weight.begin(), weight.end(), 0.25f);
  op.forward(input.data(), 4 * W, packed, nullptr, out.data());
  for (float v : out) ASSERT_EQ(v, 0.5f * o.k) << "rank " << ctx.rank();
  packed.update(weight.data());
  op.forward(input.data(), 4 * W, packed, nullptr, out.data());
  for (float v : out) ASSERT_EQ(v, 0.25f * o.k) << "rank " << ctx.rank();
}

// A packed weight that does not fit the op fails the call on every rank (naming the mismatch
// where it was passed) and leaves the op usable.
TEST_F(PackedWeightTest, MismatchIsInvalidArgumentEverywhere) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  GemmRsOptions o;
  o.max_m = 2 * W;
  o.n = 64;
  o.k = 32;
  GemmRs op(ctx, o);
  std::vector<float> weight(o.n * o.k, 1.0f), input(2 * W * o.k, 1.0f), out(2 * o.n);
  PackedWeight good(ctx, DType::kFloat32, weight.data(), o.n, o.k);
  PackedWeight wrong(ctx, DType::kFloat32, weight.data(), o.k, o.n);  // n and k swapped
  const PackedWeight& mine = r == W - 1 ? wrong : good;
  expect_error([&] { op.forward(input.data(), 2 * W, mine, nullptr, out.data()); },
               Errc::kInvalidArgument, {"gemm_rs", "packed weight"}, "mismatched packed weight");
  op.forward(input.data(), 2 * W, good, nullptr, out.data());
  for (float v : out) ASSERT_EQ(v, static_cast<float>(o.k * W)) << "rank " << r;
  expect_error([&] { PackedWeight p(ctx, DType::kFloat64, nullptr, 4, 4); }, Errc::kInvalidArgument,
               {"f64"}, "an f64 packed weight");
}

// The ops run oneDNN on their own threads' settings and give the caller's OpenMP setting back
// (PyTorch shares the OpenMP runtime): a caller that set 3 threads sees 3 after every op.
TEST_F(PackedWeightTest, OpsLeaveTheCallersOpenMpSettingAlone) {
  Context ctx(MPI_COMM_WORLD, threaded_options(2));
  const int W = ctx.world_size();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  const int64_t n = 96, k = 64, m = 8 * W;
  std::vector<float> weight(n * k, 0.5f), input(m * k, 1.0f), out(m * n);
  const Problem p{DType::kFloat32, DType::kFloat32, n, k, false};
  AgGemm ag(ctx, gemm_op_options<AgGemmOptions>(p, m));
  ag.forward(input.data(), m, weight.data(), nullptr, out.data());
  EXPECT_EQ(omp_get_max_threads(), 3) << "after ag_gemm";
  GemmRs rs(ctx, gemm_op_options<GemmRsOptions>(p, m));
  rs.forward(input.data(), m, weight.data(), nullptr, out.data());
  EXPECT_EQ(omp_get_max_threads(), 3) << "after gemm_rs";
  PackedWeight packed(ctx, DType::kFloat32, weight.data(), n, k);
  EXPECT_EQ(omp_get_max_threads(), 3) << "after packing";
  rs.forward(input.data(), m, packed, nullptr, out.data());
  EXPECT_EQ(omp_get_max_threads(), 3) << "after gemm_rs with a packed weight";
  for (int64_t i = 0; i < m / W * n; ++i) ASSERT_EQ(out[i], 0.5f * k * W);
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace fluxcpp::test
