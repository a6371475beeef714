// Runs the tcc-bank binary as a child process for integration tests: waits
// for its "listening on HOST:PORT" line, gives gRPC stubs to its Participant
// and Bank services, and stops it (SIGTERM) or waits for it to die.
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "bank.grpc.pb.h"
#include "harness/http_get.h"
#include "harness/process.h"
#include "tcc/v1/participant.grpc.pb.h"

namespace tcc::testing {

class BankProcess {
 public:
  // Starts `TCC_BANK_BIN args...` (tests/harness/process.h does the process
  // work); TCC_FAILPOINTS is set to `failpoints` (empty: none enabled).
  BankProcess(const std::vector<std::string>& args,
              const std::string& failpoints = "") {
    std::vector<std::string> argv = {TCC_BANK_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    auto process = harness::Process::Start(harness::ProcessOptions{
        argv, {{"TCC_FAILPOINTS", failpoints}}, "", "tcc-bank"});
    REQUIRE(process.ok());
    process_ = std::move(*process);
    auto port = process_->WaitForListening(30000);
    INFO(port.status().ToString());
    REQUIRE(port.ok());
    port_ = *port;
    // Printed before "listening on" when --metrics-listen is given.
    const std::string output = process_->Output();
    if (const size_t at = output.find("metrics on "); at != std::string::npos) {
      const size_t eol = output.find('\n', at);
      const std::string line = output.substr(at, eol - at);
      metrics_port_ = std::stoi(line.substr(line.rfind(':') + 1));
    }
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                       grpc::InsecureChannelCredentials());
    participant_ = v1::Participant::NewStub(channel);
    bank_ = examples::bank::Bank::NewStub(channel);
  }

  // Waits for the process to end; returns its wait status.
  int WaitExit() {
    auto status = process_->Wait(60000);
    REQUIRE(status.ok());
    return *status;
  }
  // SIGTERM, then waits; returns the wait status.
  int Terminate() {
    process_->Signal(SIGTERM);
    return WaitExit();
  }

  int port() const { return port_; }
  // The Prometheus port (with --metrics-listen), else 0.
  int metrics_port() const { return metrics_port_; }

  // GET /metrics from the process's exposer: the page (status 200).
  std::string ScrapeMetrics() {
    REQUIRE(metrics_port_ > 0);
    auto page = HttpGet(LoopbackUrl(metrics_port_, "/metrics"), 10000);
    REQUIRE(page.ok());
    return *page;
  }
  v1::Participant::Stub& participant() { return *participant_; }
  examples::bank::Bank::Stub& bank() { return *bank_; }

 private:
  std::unique_ptr<harness::Process> process_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::unique_ptr<v1::Participant::Stub> participant_;
  std::unique_ptr<examples::bank::Bank::Stub> bank_;
};

}  // namespace tcc::testing
