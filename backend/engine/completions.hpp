// Where the backend runs what follows a call's completion (a Future's callbacks): never on the
// thread that runs the group's calls, and never stuck behind a callback that blocks. A callback
// may issue another call and wait for it (DDP's PowerSGD hook does): a fixed pool, or the
// group's own thread, would then wait for a completion queued behind itself. This pool starts
// another thread whenever every thread it has is busy; idle threads beyond one exit after a
// second.
#pragma once

#include <functional>

namespace fluxcpp::backend {

// Runs fn on a pool thread, soon; process-wide, thread-safe.
void post_completion(std::function<void()> fn);

}  // namespace fluxcpp::backend
