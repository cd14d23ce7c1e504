// The two ends of a per-peer channel in one call. An Outbox is where this rank writes what a peer
// will read, and publish(n) tells the peer (or the transport, which then ships it) that the
// first n bytes are written. An Inbox is where a peer's data for this rank is — a host peer's
// segment, or this rank's own segment when MPI brought it from another host — and wait(n) blocks
// until its first n bytes have arrived. Both count bytes on a signal whose value grows over the
// calls (base + bytes), so the expected values are tracked inside and never repeat: an op using
// them handles no epochs and no signal indices, and waits on and reads an Inbox the same way
// whichever host its peer is on. (The order of the peers is OpCore::peers()'s; an op still visits
// host peers and other hosts' ranks in separate passes where it treats them differently.)
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ops/core/op_core.hpp"
#include "shm/layout.hpp"

namespace fluxcpp::ops {

class Outbox {
 public:
  Outbox() = default;
  Outbox(char* data, std::size_t bytes, shm::Signal* signal, uint64_t base)
      : data_(data), bytes_(bytes), signal_(signal), base_(base) {}
  char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // The first n bytes are written (n only grows within a call).
  void publish(std::size_t n) const {
    if (signal_ != nullptr) shm::signal_max(*signal_, base_ + std::min(n, bytes_));
  }
  void publish_all() const { publish(bytes_); }
  // Writes src's first n bytes in steps of `step`, each published at once so that host peers and
  // the transport start on the first, calling between() after each (the op polls its transport).
  template <class Between>
  void write(const char* src, std::size_t n, std::size_t step, Between&& between) const {
    assert(step > 0 && n <= bytes_);
    for (std::size_t off = 0; off < n; off += step) {
      std::memcpy(data_ + off, src + off, std::min(step, n - off));
      publish(off + step);
      between();
    }
  }

 private:
  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  shm::Signal* signal_ = nullptr;
  uint64_t base_ = 0;
};

class Inbox {
 public:
  Inbox() = default;
  // `names`/`index`/`owner_host_rank` only name the signal in a timeout.
  Inbox(OpCore* core, int peer, const char* data, std::size_t bytes, const shm::Signal* signal,
        uint64_t base, const shm::SignalArray* names, int index, int owner_host_rank)
      : core_(core),
        peer_(peer),
        data_(data),
        bytes_(bytes),
        signal_(signal),
        base_(base),
        names_(names),
        index_(index),
        owner_(owner_host_rank) {}
  int peer() const { return peer_; }  // world rank the data comes from
  const char* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Bytes that have arrived so far.
  std::size_t available() const {
    const uint64_t v = shm::signal_load(*signal_);
    return v <= base_ ? 0 : static_cast<std::size_t>(std::min<uint64_t>(v - base_, bytes_));
  }
  // Blocks until at least min(n, bytes()) bytes have arrived; returns how many have.
  std::size_t wait(std::size_t n, const std::atomic<bool>* stop = nullptr) const {
    n = std::min(n, bytes_);
    if (n == 0) return available();
    core_->wait(*signal_, base_ + n, peer_,
                names_->label(index_) + " in the segment of local rank " + std::to_string(owner_),
                stop);
    return available();
  }
  std::size_t wait_all(const std::atomic<bool>* stop = nullptr) const { return wait(bytes_, stop); }
  // Copies bytes [from, to) to dst as they arrive.
  void drain(char* dst, std::size_t from, std::size_t to) const {
    assert(to <= bytes_);  // wait() never reports more than bytes()
    for (std::size_t done = from; done < to;) {
      const std::size_t have = std::min(wait(done + 1), to);
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
