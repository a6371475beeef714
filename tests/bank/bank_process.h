// Runs the tcc-bank binary as a child process for integration tests: waits
// for its "listening on HOST:PORT" line, gives gRPC stubs to its Participant
// and Bank services, and stops it (SIGTERM) or waits for it to die.
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
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
      if (s.rfind("metrics on ", 0) == 0) {
        metrics_port_ = std::stoi(s.substr(s.rfind(':') + 1));
        continue;
      }
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
  // The Prometheus port (with --metrics-listen), else 0.
  int metrics_port() const { return metrics_port_; }

  // GET /metrics from the process's exposer: the whole HTTP response.
  std::string ScrapeMetrics() {
    REQUIRE(metrics_port_ > 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(metrics_port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    REQUIRE(write(fd, req.data(), req.size()) ==
            static_cast<ssize_t>(req.size()));
    std::string resp;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) resp.append(buf, n);
    close(fd);
    return resp;
  }
  v1::Participant::Stub& participant() { return *participant_; }
  examples::bank::Bank::Stub& bank() { return *bank_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  FILE* out_ = nullptr;
  int port_ = 0;
  int metrics_port_ = 0;
  std::unique_ptr<v1::Participant::Stub> participant_;
  std::unique_ptr<examples::bank::Bank::Stub> bank_;
};

}  // namespace tcc::testing
