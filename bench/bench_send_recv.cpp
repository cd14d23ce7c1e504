// AsyncSendRecv between ranks 0 and 1 against MPI_Send / MPI_Recv of the same bytes, 4 KiB to
// 64 MiB: per-message time of a stream of messages (rank 0 sends, rank 1 receives, num_slots in
// flight; a window of 64 messages (8 from 4 MiB) per timed iteration closed by an empty
// acknowledgement, as osu_bw does) and the one-way latency of a ping-pong (half its round trip).
// Other ranks stay idle.
#include <cstring>
#include <vector>

#include "bench.hpp"

#include <fmt/format.h>
#include "fluxcpp/async_send_recv.hpp"

namespace fluxcpp::bench {

namespace {
// The end of a stream window, as osu_bw does it: the receiver acknowledges with an empty message,
// so the sender's time covers the delivery of the whole window (a sender whose sends return
// before delivery, MPI's eager path or our free slots, would otherwise time only its copies,
// and the receiver's timer may start after most of the window has already landed).
void window_ack(int r) {
  if (r == 0) MPI_Recv(nullptr, 0, MPI_BYTE, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (r == 1) MPI_Send(nullptr, 0, MPI_BYTE, 0, 9, MPI_COMM_WORLD);
}
}  // namespace

void bench_send_recv(Env& env) {
  const int W = env.world(), r = env.rank();
  if (W < 2) {
    if (r == 0) std::printf("# send_recv: needs two ranks, skipped at W = 1\n");
    return;
  }
  const int64_t n = 256;  // f32 rows of 1 KiB
  const int slots = 2;
  std::vector<std::size_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                    1 << 20, 4 << 20,  16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  const std::size_t max_bytes = sizes.back();
  const int64_t max_m = static_cast<int64_t>(max_bytes / (n * 4));
  std::vector<int> peers;
  if (r == 0) peers = {1};
  if (r == 1) peers = {0};
  AsyncSendRecvOptions o;
  o.max_m = max_m;
  o.n = n;
  o.num_slots = slots;
  o.peers = peers;
  AsyncSendRecv op(env.ctx(), o);
  std::vector<unsigned char> buf(max_bytes), out(max_bytes), ref(max_bytes);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + r * 7);
  const bool same_host = env.ctx().num_hosts() == 1 || env.ctx().host_size() > 1;
  env.section(fmt::format("send_recv: fluxcpp AsyncSendRecv vs MPI_Send/MPI_Recv, rank 0 -> 1 "
                          "({}), f32 rows of {} elements, num_slots {}",
                          same_host ? "one host" : "two hosts", n, slots),
              {"bytes", "stream", "MPI stream", "speedup", "latency", "MPI latency", "lat. x",
               "GB/s", "#wrong"});
  for (std::size_t bytes : sizes) {
    const int64_t m = static_cast<int64_t>(bytes / (n * 4));
    const int count = static_cast<int>(bytes);
    // Messages per timed iteration of the stream: osu_bw's window of 64, 8 from 4 MiB up.
    const int kWindow = bytes < (4u << 20) ? 64 : 8;
    const std::vector<Stats> t = env.time_all({
        [&] {
          for (int w = 0; w < kWindow; ++w) {
            if (r == 0) op.send(1, buf.data(), m);
            if (r == 1) op.recv(0, out.data(), max_m);
          }
          window_ack(r);
        },
        [&] {
          for (int w = 0; w < kWindow; ++w) {
            if (r == 0) MPI_Send(buf.data(), count, MPI_BYTE, 1, 5, MPI_COMM_WORLD);
            if (r == 1)
              MPI_Recv(ref.data(), count, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          }
          window_ack(r);
        },
        [&] {
          if (r == 0) {
            op.send(1, buf.data(), m);
            op.recv(1, out.data(), max_m);
          }
          if (r == 1) {
            op.recv(0, out.data(), max_m);
            op.send(0, out.data(), m);
          }
        },
        [&] {
          if (r == 0) {
            MPI_Send(buf.data(), count, MPI_BYTE, 1, 6, MPI_COMM_WORLD);
            MPI_Recv(ref.data(), count, MPI_BYTE, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          }
          if (r == 1) {
            MPI_Recv(ref.data(), count, MPI_BYTE, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(ref.data(), count, MPI_BYTE, 0, 6, MPI_COMM_WORLD);
          }
        },
    });
    // One more message each way, checked against MPI's copy of the same bytes.
    long wrong = 0;
    if (r == 0) op.send(1, buf.data(), m);
    if (r == 1) {
      std::memset(out.data(), 0, bytes);
      wrong += op.recv(0, out.data(), max_m) != m;
      MPI_Recv(ref.data(), count, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (std::size_t i = 0; i < bytes; ++i) wrong += out[i] != ref[i];
    }
    if (r == 0) MPI_Send(buf.data(), count, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double lat = t[2].median_ms / 2, mpi_lat = t[3].median_ms / 2;
    const double one = t[0].median_ms / kWindow, mpi_one = t[1].median_ms / kWindow;
    env.row({fmt_bytes(static_cast<double>(bytes)), fmt_ms(one), fmt_ms(mpi_one),
             fmt::format("{:.2f}", mpi_one / one), fmt_ms(lat), fmt_ms(mpi_lat),
             fmt::format("{:.2f}", mpi_lat / lat),
             fmt::format("{:.2f}", static_cast<double>(bytes) / (one * 1e6)),
             std::to_string(wrong)});
    env.json({{"op", jstr("send_recv")},
              {"bytes", jnum(static_cast<double>(bytes))},
              {"slots", jnum(slots)},
              {"same_host", same_host ? "true" : "false"},
              {"stream_ms", jnum(t[0].median_ms)},
              {"mpi_stream_ms", jnum(t[1].median_ms)},
              {"latency_ms", jnum(lat)},
              {"mpi_latency_ms", jnum(mpi_lat)},
              {"wrong", jnum(static_cast<double>(wrong))}});
  }
  op.close();
}

}  // namespace fluxcpp::bench
