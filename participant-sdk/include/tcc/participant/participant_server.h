// ParticipantServer: serves a Participant as tcc.v1.Participant over gRPC.
//
// The service may register its own gRPC services to be served on the same
// port (the bank demo exposes balances that way). Listening on port 0 lets
// the OS choose; port() tells which after Start().
//
// With a store that group-commits (BarrierStore::groups_commits), every
// reply waits until what its call read or wrote is durable
// (BarrierStore::WhenDurable), and calls run on gRPC's callback threads.
//
// Between the barrier's durable local commit and the reply, the server
// evaluates the failpoint "participant.after_commit" (tcc/failpoint), so a
// crash test can kill the process exactly there: the work is committed, the
// caller never hears of it, and the re-sent call must be answered from the
// barrier (replayed).
//
// Thread-safety: RegisterService and Start once, from one thread, in that
// order; Shutdown from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tcc/participant/participant.h"

namespace grpc {
class Server;
class ServerCredentials;
class Service;
}  // namespace grpc

namespace tcc::participant {

inline constexpr char kAfterCommitFailpoint[] = "participant.after_commit";

struct ParticipantServerOptions {
  // host:port; port 0 picks a free port.
  std::string listen_address = "127.0.0.1:0";
  // TLS: this server's PEM certificate chain and private key. Both empty:
  // plaintext (logged as a warning). Read (and checked to match) at Start().
  std::string tls_cert_file;
  std::string tls_key_file;
  // Mutual TLS (needs the two above): every caller must present a
  // certificate chaining to this PEM CA, so only tccd (holding such a
  // certificate) can call the participant. Everyone else fails the handshake.
  std::string tls_client_ca_file;
};

class ParticipantServer {
 public:
  // `participant` must outlive the server.
  ParticipantServer(Participant& participant,
                    ParticipantServerOptions options = {});
  ~ParticipantServer();

  // Serves `service` (not owned; must outlive the server) on the same port.
  // Before Start().
  void RegisterService(grpc::Service* service);

  // Binds and starts serving. UNAVAILABLE when the address cannot be bound;
  // INVALID_ARGUMENT naming the option when a TLS file is missing or bad.
  [[nodiscard]] absl::Status Start();
  // The bound port (after Start()).
  int port() const { return port_; }

  // Stops accepting calls, lets the calls in progress finish for up to
  // `grace` (by the participant's clock), then cancels what remains (their
  // callers see an unknown outcome and re-send).
  void Shutdown(
      std::chrono::milliseconds grace = std::chrono::milliseconds(1000));
  // Blocks until the server has shut down.
  void Wait();

 private:
  class Service;
  class GroupCommitService;

  // TLS or mutual TLS per the options, else plaintext (with a warning).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials()
      const;

  Participant& participant_;
  ParticipantServerOptions options_;
  // One of the two: the synchronous service, or (for a store that
  // group-commits) the callback service that replies once durable.
  std::unique_ptr<Service> service_;
  std::unique_ptr<GroupCommitService> group_commit_service_;
  std::vector<grpc::Service*> extra_services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tcc::participant
