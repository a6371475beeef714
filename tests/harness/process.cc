#include "process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tcc::harness {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(
    ProcessOptions options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("empty argv");
  }
  if (options.name.empty()) options.name = options.argv[0];
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::unique_ptr<Process> p(new Process(std::move(options)));
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (p->options_.env.count(key) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : p->options_.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : p->options_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // A child started from the main thread dies with the test process, even
  // one killed before its destructors ran (kill -9, or SIGPIPE when its
  // output is piped into `head`), instead of running on. Not for children
  // started from other threads: PR_SET_PDEATHSIG fires when the thread that
  // forked ends, and drills start nodes again from worker threads that end
  // before the node should.
  const pid_t parent = getpid();
  const bool die_with_parent = gettid() == parent;
  pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    if (die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // it died before the prctl
    }
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    setpgid(0, 0);
    execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pipe_fds[1]);
  p->pid_ = pid;
  p->reader_ =
      std::thread([raw = p.get(), fd = pipe_fds[0]] { raw->ReadLoop(fd); });
  return p;
}

Process::~Process() {
  Kill();
  if (reader_.joinable()) reader_.join();
}

void Process::ReadLoop(int fd) {
  FILE* log = nullptr;
  if (!options_.log_path.empty())
    log = std::fopen(options_.log_path.c_str(), "a");
  char buf[4096];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log != nullptr) {
      std::fwrite(buf, 1, n, log);
      std::fflush(log);
    }
    std::lock_guard<std::mutex> lock(mu_);
    output_.append(buf, n);
    cv_.notify_all();
  }
  if (log != nullptr) std::fclose(log);
  close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  eof_ = true;
  cv_.notify_all();
}

absl::StatusOr<std::string> Process::WaitForLine(const std::string& pattern,
                                                 int64_t timeout_ms) {
  const std::regex re(pattern);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  size_t scanned = 0;
  while (true) {
    // Scan complete lines not yet scanned.
    size_t nl;
    while ((nl = output_.find('\n', scanned)) != std::string::npos) {
      std::string line = output_.substr(scanned, nl - scanned);
      scanned = nl + 1;
      std::smatch m;
      if (std::regex_search(line, m, re)) {
        return m.size() > 1 ? m[1].str() : line;
      }
    }
    if (eof_) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.name, " ended before printing /", pattern,
                       "/; output:\n", output_));
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat(options_.name, " did not print /", pattern, "/ within ",
                       timeout_ms, " ms; output:\n", output_));
    }
  }
}

absl::StatusOr<int> Process::WaitForListening(int64_t timeout_ms) {
  auto port = WaitForLine(R"(^listening on [^ ]*:(\d+)\s*$)", timeout_ms);
  if (!port.ok()) return port.status();
  int p = 0;
  if (!absl::SimpleAtoi(*port, &p)) {
    return absl::InternalError(absl::StrCat("bad port ", *port));
  }
  return p;
}

void Process::Signal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid_ > 0 && !wait_status_) kill(pid_, sig);
}

absl::StatusOr<int> Process::Wait(int64_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wait_status_) return *wait_status_;
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        wait_status_ = status;
        // Everything it printed is in Output() and the log before this
        // returns (bounded: a child it left behind may hold the pipe).
        cv_.wait_for(lock, std::chrono::seconds(2), [this] { return eof_; });
        return status;
      }
      if (r < 0) return absl::InternalError(strerror(errno));
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          options_.name, " still running after ", timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Process::Kill() {
  Signal(SIGKILL);
  Signal(SIGCONT);
  (void)Wait(30000);
}

bool Process::Running() {
  std::lock_guard<std::mutex> lock(mu_);
  if (wait_status_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    wait_status_ = status;
    return false;
  }
  return true;
}

std::string Process::Output() const {
  std::lock_guard<std::mutex> lock(mu_);
  return output_;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace tcc::harness
