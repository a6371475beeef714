#include "serve_until_signalled.h"

#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tcc::bench {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

absl::Status ServeUntilSignalled(const std::string& listen,
                                 const std::vector<grpc::Service*>& services) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen wants HOST:PORT, got '", listen, "'"));
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  std::printf("listening on %s:%d\n", listen.substr(0, colon).c_str(), port);
  std::fflush(stdout);

  sigset_t set = TerminationSignals();
  int sig = 0;
  sigwait(&set, &sig);
  server->Shutdown(gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(500, GPR_TIMESPAN)));
  server->Wait();
  return absl::OkStatus();
}

}  // namespace tcc::bench
