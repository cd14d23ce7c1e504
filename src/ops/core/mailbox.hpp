// The two ends of a per-peer channel in one call. An Outbox is where this rank writes what a peer
// will read, and publish(n) tells the peer (or the transport, which then ships it) that the first n
// bytes are written. An Inbox is where a peer's data for this rank is — a host peer's segment, or
// this rank's own segment when the network brought it from another host — and wait(n) blocks until
// its first n bytes have arrived. Both count bytes on a signal whose value grows over the calls
// (base + bytes), so the expected values are tracked inside and never repeat: an op using them
// handles no epochs and no signal indices, and waits on and reads an Inbox the same way whichever
// host its peer is on. Two more kinds of Inbox have nothing to wait for: one whose data is already
// there (landed(): a local path reading what the buffers hold, or a block written before the call),
// and one read by drain() straight from the peer's address space (a single copy, process_vm_readv;
// data() is null).
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/stream_copy.hpp"
#include "ops/core/op_core.hpp"
#include "shm/cma.hpp"
#include "shm/layout.hpp"

namespace fluxcpp::ops {

class Outbox {
 public:
  Outbox() = default;
  // `core`: the call's core, whose transport each publish drives (null: nothing to drive).
  Outbox(OpCore* core, char* data, std::size_t bytes, shm::Signal* signal, uint64_t base)
      : core_(core), data_(data), bytes_(bytes), signal_(signal), base_(base) {}
  char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // The first n bytes are written (n only grows within a call).
  void publish(std::size_t n) const {
    if (signal_ != nullptr) shm::signal_max(*signal_, base_ + std::min(n, bytes_));
    if (core_ != nullptr) core_->poll();
  }
  void publish_all() const { publish(bytes_); }
  // Writes src's first n bytes in steps of `step`, each published at once so that host peers and
  // the transport start on the first.
  void write(const char* src, std::size_t n, std::size_t step) const {
    assert(step > 0 && n <= bytes_);
    for (std::size_t off = 0; off < n; off += step) {
      std::memcpy(data_ + off, src + off, std::min(step, n - off));
      publish(off + step);
    }
  }

 private:
  OpCore* core_ = nullptr;
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  shm::Signal* signal_ = nullptr;
  uint64_t base_ = 0;
};

class Inbox {
 public:
  Inbox() = default;
  // `names`/`index`/`owner_local` (the local rank whose segment holds the signal) only name the
  // signal in a timeout.
  Inbox(OpCore* core, int peer, const char* data, std::size_t bytes, const shm::Signal* signal,
        uint64_t base, const shm::SignalArray* names, int index, int owner_local)
      : core_(core),
        peer_(peer),
        data_(data),
        bytes_(bytes),
        signal_(signal),
        base_(base),
        names_(names),
        index_(index),
        owner_(owner_local) {}
  // All `bytes` of `data` are there: nothing to wait for.
  static Inbox landed(int peer, const char* data, std::size_t bytes) {
    return Inbox(nullptr, peer, data, bytes, nullptr, 0, nullptr, 0, 0);
  }
  // Read by drain() from address `at` of process `pid`, a host peer (a single copy).
  static Inbox in_process(int peer, pid_t pid, uint64_t at, std::size_t bytes) {
    Inbox in = landed(peer, nullptr, bytes);
    in.pid_ = pid;
    in.at_ = at;
    return in;
  }
  int peer() const { return peer_; }  // world rank the data comes from
  const char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Bytes that have arrived so far.
  std::size_t available() const {
    if (signal_ == nullptr) return bytes_;
    const uint64_t v = shm::signal_load(*signal_);
    return v <= base_ ? 0 : static_cast<std::size_t>(std::min<uint64_t>(v - base_, bytes_));
  }
  // Blocks until at least min(n, bytes()) bytes have arrived; returns how many have.
  std::size_t wait(std::size_t n, const std::atomic<bool>* stop = nullptr) const {
    n = std::min(n, bytes_);
    if (n == 0 || signal_ == nullptr) return available();
    core_->wait(*signal_, base_ + n, peer_,
                names_->label(index_) + " in the segment of local rank " + std::to_string(owner_),
                stop);
    return available();
  }
  std::size_t wait_all(const std::atomic<bool>* stop = nullptr) const { return wait(bytes_, stop); }
  // Whole rows of `row` bytes that have arrived so far, at most `rows`, without waiting.
  int64_t rows_landed(std::size_t row, int64_t rows) const {
    return row == 0 ? 0 : std::min(rows, static_cast<int64_t>(available() / row));
  }
  // Calls f(i0, i1) for each run of whole rows [i0, i1) of `row` bytes as they arrive, from row
  // `from` until the first `rows` have (a host peer's block arrives at once: one run). `rows`
  // beyond bytes() are never coming: it stops at the last whole row there is.
  template <class F>
  void for_rows(std::size_t row, int64_t from, int64_t rows, F&& f,
                const std::atomic<bool>* stop = nullptr) const {
    if (row == 0) return;
    rows = std::min(rows, static_cast<int64_t>(bytes_ / row));
    for (int64_t done = from; done < rows;) {
      const auto have =
          static_cast<int64_t>(wait(static_cast<std::size_t>(done + 1) * row, stop) / row);
      f(done, have);
      done = have;
    }
  }
  template <class F>
  void for_rows(std::size_t row, int64_t rows, F&& f,
                const std::atomic<bool>* stop = nullptr) const {
    for_rows(row, 0, rows, std::forward<F>(f), stop);
  }
  // Copies bytes [from, to) to dst as they arrive; `stream`: with kernels::stream_copy (dst is
  // not read again soon). Data landing at dst itself (A2aExchange::Direct) is only waited for.
  void drain(char* dst, std::size_t from, std::size_t to, bool stream = false) const {
    assert(to <= bytes_);  // wait() never reports more than bytes()
    if (data_ != nullptr && dst == data_ + from) {
      wait(to);
      return;
    }
    if (pid_ != 0) {
      if (to > from) shm::cma_read(pid_, at_ + from, dst, to - from);
      return;
    }
    for (std::size_t done = from; done < to;) {
      const std::size_t have = std::min(wait(done + 1), to);
      if (stream)
        kernels::stream_copy(dst + (done - from), data_ + done, have - done);
      else
        std::memcpy(dst + (done - from), data_ + done, have - done);
      done = have;
    }
  }

 private:
  OpCore* core_ = nullptr;
  int peer_ = -1;
  const char* data_ = nullptr;
  std::size_t bytes_ = 0;
  const shm::Signal* signal_ = nullptr;
  uint64_t base_ = 0;
  const shm::SignalArray* names_ = nullptr;
  int index_ = 0, owner_ = 0;
  pid_t pid_ = 0;  // a single copy: read from address at_ of process pid_
  uint64_t at_ = 0;
};

// A byte counter that grows over the calls: begin(bytes) returns this call's base.
class Tally {
 public:
  uint64_t begin(std::size_t bytes) {
    const uint64_t base = next_;
    next_ += bytes;
    return base;
  }

 private:
  uint64_t next_ = 0;
};

}  // namespace fluxcpp::ops
