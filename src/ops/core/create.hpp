// The collective create of an op, written once. Every op's create(ctx, local_error) runs inside
// create_op (called for every op by OpBase, op_base.hpp; async_send_recv calls it itself), which:
//  * refuses a closed or broken context, and a context in use by another thread (kInvalidUsage);
//  * bounds every collective of the body by the timeout (comm::DeadlineScope);
//  * starts with a check-in on the context's control group (comm::Parts::control(): an MpiGroup,
//    GlooGroup or ShmGroup, comm/group.hpp), so a rank that
//    does not take part (a NULL context, an early return, a dead process) is named in the
//    others' kTimeout;
//  * on a failure the ranks did not agree on (a timeout, a network or system error midway), breaks
//    the context — its communicator may hold an unmatched collective — and sweeps /dev/shm
//    (shm::remove_stale_segments: the segment of a host peer that died before removing its
//    name, its liveness lock gone with it); a timeout names the host peers
//    whose process has exited or is stopped. Agreed errors (bad arguments
//    every rank reported alike, a full /dev/shm) break nothing.
#pragma once

#include <exception>

#include "comm/deadline_scope.hpp"
#include "comm/orphan_progress.hpp"
#include "comm/parts.hpp"
#include "error_util.hpp"
#include "fault.hpp"
#include "ops/core/op_core.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::ops {

template <class Body>
void create_op(const comm::Parts& c, const char* op, Body&& body) {
  c.life().check_usable(op);
  ContextEntry entry(c, op);
  const uint64_t serial = c.life().begin_op_create(op);
  comm::DeadlineScope scope(c.runtime().deadline(), fmt::format("{} create", op));
  comm::progress_orphans();  // collectives earlier creates abandoned: completed ones released
  try {
    c.control().check_in(serial, "the op's check-in");
    fault_point("create", c.topo().world_rank());
    body();
  } catch (const AgreedError&) {
    throw;
  } catch (const std::exception& e) {
    shm::remove_stale_segments();
    // A collective that timed out cannot say who is missing; the host's process table can.
    const Error* err = dynamic_cast<const Error*>(&e);
    const std::string gone = err != nullptr && err->code() == Errc::kTimeout
                                 ? c.life().gone_host_peers(c.topo())
                                 : std::string();
    if (gone.empty()) {
      c.life().mark_broken(fmt::format("{} create failed: {}", op, e.what()));
      throw;
    }
    const std::string what = fmt::format("{} (on this host: {})", e.what(), gone);
    c.life().mark_broken(fmt::format("{} create failed: {}", op, what));
    throw Error(Errc::kTimeout, what);
  }
}

}  // namespace fluxcpp::ops
