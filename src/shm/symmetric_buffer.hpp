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
  // The name team rank `rank` gives its segment for `tag`, known to every rank in advance (the
  // creator's pid and a random token of the team): if a rank dies between creating its segment
  // and removing the name, its peers can remove it. Unguessable to other jobs.
  virtual std::string segment_name(int rank, const std::string& tag) const = 0;
  // This process's id in messages and in the fault hook (the world rank).
  virtual int id() const = 0;
};

// Removes the names of every team rank's segment for `tag` (those that exist): the clean-up of a
// bootstrap that failed on some rank, whichever step it reached. Best effort, never throws.
void unlink_team_segments(const HostTeam& team, const std::string& tag) noexcept;

// Removes fluxcpp segments whose creator (the pid in the name) is no longer alive: left behind by
// a process killed during a bootstrap with no peer on its host to clean up. Returns how many.
int remove_stale_segments() noexcept;

class SymmetricBuffer {
 public:
  SymmetricBuffer() = default;
  // Collective over `team`; every rank passes the same bytes. Bootstrap: each rank creates its
  // own segment under the name the team knows in advance (team.segment_name), peers map them,
  // and once every rank has mapped every segment all names are removed — from then on nothing
  // can leak into /dev/shm, even if a rank is killed. Any failure on any rank throws on every
  // rank (or times out there, if a rank died), and every rank that fails removes every team
  // rank's name for the tag: no name outlives the bootstrap by more than the timeout.
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
