#include "tcc/etcd/boot_clock.h"

#include <time.h>

namespace tcc::etcd {

int64_t SystemBootClock::NowMs() const {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

SystemBootClock& SystemBootClock::Default() {
  static SystemBootClock* clock = new SystemBootClock();
  return *clock;
}

}  // namespace tcc::etcd
