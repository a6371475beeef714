#include "server/service_notify.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstring>

namespace tcc::server {
namespace {

void Notify(const std::string& state) {
  // 0: NOTIFY_SOCKET is not set (not under a Type=notify unit).
  const int r = sd_notify(/*unset_environment=*/0, state.c_str());
  if (r < 0) spdlog::warn("sd_notify: {}", std::strerror(-r));
}

}  // namespace

void NotifyReady(const std::string& status) {
  Notify("READY=1\nSTATUS=" + status);
}

void NotifyStopping(const std::string& status) {
  Notify("STOPPING=1\nSTATUS=" + status);
}

}  // namespace tcc::server
