// Symmetric buffers: every rank of a host creates one segment of the same size and maps every
// peer's, so each rank sees local() and peer(i) at its own addresses.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "shm/liveness.hpp"
#include "shm/segment.hpp"

namespace fluxcpp::shm {

// What the bootstrap needs from the ranks of one host; comm implements it over MPI, keeping
// MPI out of this layer.
class HostTeam {
 public:
  virtual ~HostTeam() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank contributes one string and receives all of them, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Collective: runs fn; if it throws on any rank, every rank throws the first failing rank's
  // error (same code and message). Doubles as a barrier.
  virtual void agree(const std::function<void()>& fn) = 0;
  // This process's id in messages and in the fault hook (the world rank).
  virtual int id() const = 0;
};

class SymmetricBuffer {
 public:
  SymmetricBuffer() = default;
  // Collective over `team`; every rank passes the same bytes and tag. Bootstrap: each rank
  // creates its own segment under a fresh random name (Segment::create, holding its liveness
  // lock), the team allgathers the names, each rank maps its peers' segments, and once every rank
  // has mapped every segment (an agreement, so a barrier) each rank removes its own name — from
  // then on nothing can leak into /dev/shm, even if a rank is killed. Any failure on any rank
  // throws on every rank (or times out there, if a rank died); every rank that fails removes its
  // own name and then sweeps /dev/shm (remove_stale_segments), which removes the segment of a
  // rank that died in between, its lock gone with it. A rank stopped (SIGSTOP) in that window
  // still holds its lock: its segment stays until it dies and a later sweep (the next context
  // create on the host, or the next failed create) removes it.
  SymmetricBuffer(HostTeam& team, std::size_t bytes, const std::string& tag);

  void* local() const { return segments_.empty() ? nullptr : segments_[rank_].data(); }
  void* peer(int i) const { return segments_[i].data(); }
  std::size_t bytes() const { return bytes_; }
  int size() const { return static_cast<int>(segments_.size()); }

 private:
  std::vector<Segment> segments_;  // index = rank in the team; own one at rank_
  std::size_t bytes_ = 0;
  int rank_ = 0;
};

}  // namespace fluxcpp::shm
