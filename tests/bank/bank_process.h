// Runs the tcc-bank binary as a child process for integration tests: waits
// for its "listening on HOST:PORT" line, gives gRPC stubs to its Participant
// and Bank services, and stops it (SIGTERM) or waits for it to die.
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bank.grpc.pb.h"
#include "tcc/v1/participant.grpc.pb.h"

extern char** environ;

namespace tcc::testing {

class BankProcess {
 public:
  // Starts `TCC_BANK_BIN args...`; TCC_FAILPOINTS is set to `failpoints`
  // (and removed from the environment when empty).
  BankProcess(const std::vector<std::string>& args,
              const std::string& failpoints = "") {
    std::vector<std::string> argv_s = {TCC_BANK_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "TCC_FAILPOINTS=", 15) != 0) env_s.push_back(*e);
    }
    if (!failpoints.empty()) env_s.push_back("TCC_FAILPOINTS=" + failpoints);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);

    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
    REQUIRE(out_ != nullptr);
    char line[256];
    while (std::fgets(line, sizeof line, out_) != nullptr) {
      std::string s(line);
      const std::string prefix = "listening on ";
      if (s.rfind(prefix, 0) == 0) {
        port_ = std::stoi(s.substr(s.rfind(':') + 1));
        break;
      }
    }
    REQUIRE(port_ > 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                       grpc::InsecureChannelCredentials());
    participant_ = v1::Participant::NewStub(channel);
    bank_ = examples::bank::Bank::NewStub(channel);
  }

  ~BankProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      int ignored;
      waitpid(pid_, &ignored, 0);
    }
    if (out_ != nullptr) std::fclose(out_);
  }

  // Waits for the process to end; returns its wait status.
  int WaitExit() {
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    exited_ = true;
    return status;
  }
  // SIGTERM, then waits; returns the wait status.
  int Terminate() {
    REQUIRE(kill(pid_, SIGTERM) == 0);
    return WaitExit();
  }

  int port() const { return port_; }
  v1::Participant::Stub& participant() { return *participant_; }
  examples::bank::Bank::Stub& bank() { return *bank_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  FILE* out_ = nullptr;
  int port_ = 0;
  std::unique_ptr<v1::Participant::Stub> participant_;
  std::unique_ptr<examples::bank::Bank::Stub> bank_;
};

}  // namespace tcc::testing
