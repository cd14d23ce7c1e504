// Symmetric buffers: every rank of a host creates one segment of the same size and maps every
// peer's, so each rank sees local() and peer(i) at its own addresses.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

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
};

class SymmetricBuffer {
 public:
  SymmetricBuffer() = default;
  // Collective over `team`; every rank passes the same bytes. Bootstrap: each rank creates its
  // own segment, names are exchanged, peers map them, and once every rank has mapped every
  // segment all names are removed — from then on nothing can leak into /dev/shm, even if a rank
  // is killed. Any failure on any rank throws on every rank, with no name left behind.
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
