// Deadlines from timeouts, saturating: a timeout too large for a steady_clock time point (+inf,
// 1e10 s) becomes time_point::max(), which every wait treats as "never". Plain `now() + d`
// would overflow into the past and make every wait time out at once.
#pragma once

#include <chrono>

namespace fluxcpp {

using SteadyTime = std::chrono::steady_clock::time_point;

// `t + d`, or time_point::max() when that is not representable. d >= 0.
inline SteadyTime deadline_add(SteadyTime t, std::chrono::steady_clock::duration d) noexcept {
  return t > SteadyTime::max() - d ? SteadyTime::max() : t + d;
}

// now() + seconds; +inf, NaN, or anything beyond what a time point can hold: time_point::max().
inline SteadyTime deadline_after(double seconds) noexcept {
  using Clock = std::chrono::steady_clock;
  const SteadyTime now = Clock::now();
  // One second of margin absorbs the rounding of the double conversions below (a double holds
  // the ~9.2e18 ticks of the remaining range to within a few thousand ticks).
  const double room_s = std::chrono::duration<double>(SteadyTime::max() - now).count() - 1.0;
  if (!(seconds < room_s)) return SteadyTime::max();
  if (seconds <= 0) return now;
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace fluxcpp
