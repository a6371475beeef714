// Tells the service manager (systemd, Type=notify units) where tccd is:
// READY=1 once it serves, STOPPING=1 when it begins to stop, with a STATUS=
// line for `systemctl status`. Outside systemd (no NOTIFY_SOCKET) every call
// does nothing. The protocol is sd_notify(3), from Debian's libsystemd.
#pragma once

#include <string>

namespace tcc::server {

// Listening, recovery under way or done: clients may connect.
void NotifyReady(const std::string& status);
// A graceful stop (SIGTERM) or a fail-stop has begun.
void NotifyStopping(const std::string& status);

}  // namespace tcc::server
