#include <chrono>

#include "tcc/clock/clock.h"

namespace tcc::clock {

int64_t SystemClock::NowUnixMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SystemClock& SystemClock::Default() {
  static SystemClock* clock = new SystemClock();
  return *clock;
}

}  // namespace tcc::clock
