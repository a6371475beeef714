// tcc-bench: load generator for any tcc.v1.Coordinator (tccd, or the
// baseline relay). See load_generator.h for what is measured and how.
//
//   tcc-bench --target HOST:PORT[,HOST:PORT...] [--concurrency 64 | --rate 500]
//             [--duration-s 10] [--warmup-s 2] [--branches 2]
//             [--payload-bytes 100] [--participants bank-a,bank-b] ...
//
// With several targets (the nodes of a cluster) each gets --channels
// connections and the transactions go to them round-robin, as a load
// balancer in front of the nodes would send them.
// Prints a Markdown table, then one machine-readable line:
//   bench: tps=N p50_ms=N p99_ms=N p999_ms=N max_ms=N errors=N [more k=v]
// With --register N it only registers N transactions (wait_for ACCEPTED,
// --concurrency callers) and prints
//   register: n=N ok=N errors=N elapsed_s=N tps=N
// which recovery drills use to fill a coordinator that sends no Try.
// and one per measured process (--pids, then tcc-bench itself):
//   bench-cpu: pid=N name=S cpu_s=N cpu_s_per_1k=N   (-1: unreadable)
// Exit status: 0 for a good run (something completed, no error), 2 for a run
// with errors or nothing completed, 1 when it could not run.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "load_generator.h"
#include "tcc/v1/coordinator.grpc.pb.h"
#include "transfer_plan.h"

namespace {

namespace v1 = tcc::v1;
using tcc::bench::LoadOptions;
using tcc::bench::LoadResult;

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string RandomRunId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

void PrintReport(const std::string& target, const LoadOptions& o,
                 const tcc::bench::TransferShape& shape, const LoadResult& r) {
  std::string mode =
      o.rate_per_s > 0
          ? absl::StrFormat("open loop, %.1f tx/s %s", o.rate_per_s,
                            o.poisson ? "Poisson" : "evenly spaced")
          : absl::StrFormat("closed loop, %d callers", o.concurrency);
  std::vector<std::string> errors;
  for (const auto& [kind, n] : r.errors) {
    errors.push_back(absl::StrCat(kind, "=", n));
  }
  std::printf("| tcc-bench | value |\n|---|---|\n");
  std::printf("| target | %s |\n", target.c_str());
  std::printf("| mode | %s |\n", mode.c_str());
  std::printf(
      "| transaction | %d branches (%s), %zu-byte payloads, %lld "
      "accounts |\n",
      shape.branches, absl::StrJoin(shape.participants, ",").c_str(),
      o.payload_bytes, static_cast<long long>(shape.accounts));
  std::printf("| window | %.2f s after %.2f s warm-up (run %s) |\n", r.window_s,
              o.warmup_s, o.run_id.c_str());
  std::printf("| started / confirmed / cancelled | %llu / %llu / %llu |\n",
              static_cast<unsigned long long>(r.started),
              static_cast<unsigned long long>(r.confirmed),
              static_cast<unsigned long long>(r.cancelled));
  std::printf("| errors | %llu%s%s |\n",
              static_cast<unsigned long long>(r.error_count()),
              errors.empty() ? "" : " ", absl::StrJoin(errors, " ").c_str());
  if (r.warmup_errors > 0) {
    std::printf("| errors during warm-up (not counted) | %llu |\n",
                static_cast<unsigned long long>(r.warmup_errors));
  }
  std::printf("| throughput | %.1f tx/s |\n", r.tps());
  std::printf(
      "| latency p50 / p99 / p99.9 / max | %.3f / %.3f / %.3f / "
      "%.3f ms |\n",
      Ms(r.latency.p50_ns), Ms(r.latency.p99_ns), Ms(r.latency.p999_ns),
      Ms(r.latency.max_ns));
  std::printf("| latency mean | %.3f ms |\n", r.latency.mean_ns / 1e6);
  if (o.rate_per_s > 0) {
    std::printf("| latest send behind schedule | %.3f ms |\n",
                r.max_send_lag_ms);
  }
  const double thousands = static_cast<double>(r.completed()) / 1000.0;
  for (const auto& cpu : r.cpu) {
    if (cpu.seconds < 0) {
      std::printf("| CPU %s (%d) | unreadable |\n", cpu.name.c_str(),
                  static_cast<int>(cpu.pid));
    } else {
      std::printf("| CPU %s (%d) | %.2f s, %.4f s per 1,000 tx |\n",
                  cpu.name.c_str(), static_cast<int>(cpu.pid), cpu.seconds,
                  thousands > 0 ? cpu.seconds / thousands : 0.0);
    }
  }
  std::printf(
      "bench: tps=%.1f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f "
      "errors=%llu completed=%llu cancelled=%llu warmup_errors=%llu\n",
      r.tps(), Ms(r.latency.p50_ns), Ms(r.latency.p99_ns),
      Ms(r.latency.p999_ns), Ms(r.latency.max_ns),
      static_cast<unsigned long long>(r.error_count()),
      static_cast<unsigned long long>(r.completed()),
      static_cast<unsigned long long>(r.cancelled),
      static_cast<unsigned long long>(r.warmup_errors));
  for (const auto& cpu : r.cpu) {
    std::printf(
        "bench-cpu: pid=%d name=%s cpu_s=%.3f cpu_s_per_1k=%.4f\n",
        static_cast<int>(cpu.pid), cpu.name.c_str(), cpu.seconds,
        cpu.seconds >= 0 && thousands > 0 ? cpu.seconds / thousands : -1.0);
  }
  std::fflush(stdout);
}

// Registers `n` transactions, each answered once durably registered.
int Register(const std::vector<v1::Coordinator::Stub*>& stubs,
             const tcc::bench::TransferPlanner& planner,
             const tcc::bench::PayloadFormat& format, const LoadOptions& o,
             uint64_t n) {
  using SteadyClock = std::chrono::steady_clock;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> ok{0};
  std::mutex mu;
  std::map<std::string, uint64_t> errors;
  const auto start = SteadyClock::now();
  std::vector<std::thread> callers;
  for (int c = 0; c < o.concurrency; ++c) {
    callers.emplace_back([&, c] {
      while (true) {
        const uint64_t seq = next.fetch_add(1);
        if (seq >= n) return;
        v1::SubmitRequest req;
        req.set_gid(absl::StrCat("bench-", o.run_id, "-", seq));
        req.set_created_at_ms(
            std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count());
        req.set_revision(1);
        req.set_try_timeout_ms(o.try_timeout_ms);
        req.set_wait_for(v1::WAIT_FOR_ACCEPTED);
        const auto legs = planner.Plan(seq);
        for (size_t i = 0; i < legs.size(); ++i) {
          v1::BranchSpec* b = req.add_branches();
          b->set_branch_id(absl::StrCat("b", i));
          b->set_participant(legs[i].participant);
          b->set_action(legs[i].action);
          b->set_payload(format.Encode(legs[i], o.payload_bytes));
        }
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::milliseconds(o.call_timeout_ms));
        v1::SubmitResponse response;
        grpc::Status st =
            stubs[seq % stubs.size()]->Submit(&context, req, &response);
        if (st.ok()) {
          ok.fetch_add(1);
        } else {
          std::lock_guard<std::mutex> lock(mu);
          ++errors[absl::StrCat("code", static_cast<int>(st.error_code()))];
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  const double elapsed =
      std::chrono::duration<double>(SteadyClock::now() - start).count();
  uint64_t error_count = 0;
  std::vector<std::string> kinds;
  for (const auto& [kind, count] : errors) {
    error_count += count;
    kinds.push_back(absl::StrCat(kind, "=", count));
  }
  std::printf(
      "register: n=%llu ok=%llu errors=%llu elapsed_s=%.3f tps=%.1f%s%s\n",
      static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(ok.load()),
      static_cast<unsigned long long>(error_count), elapsed,
      elapsed > 0 ? static_cast<double>(ok.load()) / elapsed : 0.0,
      kinds.empty() ? "" : " ", absl::StrJoin(kinds, " ").c_str());
  std::fflush(stdout);
  return error_count == 0 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil in debug mode, where every absl::Mutex (gRPC's
  // included) keeps a lock graph for deadlock detection: a few percent of
  // the CPU in a profile of the relay. Off, as a release build has it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"tcc-bench: Submit load against a tcc.v1.Coordinator"};
  std::string target;
  LoadOptions o;
  tcc::bench::TransferShape shape;
  std::string participants = "bank-a,bank-b";
  std::string pids;
  std::string arrivals = "poisson";
  std::string payload_format = "json";
  int channels = 1;
  double connect_timeout_s = 10;
  uint64_t register_only = 0;
  o.run_id = RandomRunId();

  app.add_option("--target", target,
                 "coordinator HOST:PORT, or the nodes of a cluster "
                 "comma-separated (transactions sent round-robin)")
      ->required();
  app.add_option("--concurrency", o.concurrency,
                 "closed loop: concurrent callers")
      ->capture_default_str();
  app.add_option("--rate", o.rate_per_s,
                 "open loop: transactions per second (0: closed loop)")
      ->capture_default_str();
  app.add_option("--arrivals", arrivals, "open loop: poisson or fixed")
      ->check(CLI::IsMember({"poisson", "fixed"}))
      ->capture_default_str();
  app.add_option("--duration-s", o.duration_s, "measured seconds")
      ->capture_default_str();
  app.add_option("--warmup-s", o.warmup_s, "seconds run before measuring")
      ->capture_default_str();
  app.add_option("--branches", shape.branches, "branches per transaction")
      ->capture_default_str();
  app.add_option("--payload-bytes", o.payload_bytes, "bytes per payload")
      ->capture_default_str();
  app.add_option("--register", register_only,
                 "only register this many transactions (wait_for ACCEPTED), "
                 "then exit");
  app.add_option("--payload-format", payload_format,
                 "payload encoding: json or bank")
      ->capture_default_str();
  app.add_option("--participants", participants,
                 "participant names, comma-separated; branch i goes to "
                 "name i mod n")
      ->capture_default_str();
  app.add_option("--accounts", shape.accounts, "accounts per participant")
      ->capture_default_str();
  app.add_option("--seed", shape.seed, "seed of accounts and arrivals")
      ->capture_default_str();
  app.add_option("--run-id", o.run_id,
                 "gids are bench-<run-id>-<n> (default: random)");
  app.add_option("--timeout-ms", o.call_timeout_ms, "deadline of each Submit")
      ->capture_default_str();
  app.add_option("--try-timeout-ms", o.try_timeout_ms,
                 "SubmitRequest.try_timeout_ms (0: coordinator default)")
      ->capture_default_str();
  app.add_option("--max-in-flight", o.max_in_flight,
                 "open loop: most transactions in flight")
      ->capture_default_str();
  app.add_option("--channels", channels,
                 "connections to the target, used round-robin")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--connect-timeout-s", connect_timeout_s,
                 "how long to wait for the target to accept a connection")
      ->capture_default_str();
  app.add_option("--pids", pids,
                 "comma-separated pids whose CPU time is reported");
  CLI11_PARSE(app, argc, argv);

  o.poisson = arrivals == "poisson";
  o.seed = shape.seed;
  shape.participants =
      absl::StrSplit(participants, ',', absl::SkipWhitespace());
  for (absl::string_view p : absl::StrSplit(pids, ',', absl::SkipEmpty())) {
    int pid = 0;
    if (!absl::SimpleAtoi(p, &pid) || pid <= 0) {
      std::fprintf(stderr, "tcc-bench: bad pid '%s'\n", std::string(p).c_str());
      return 1;
    }
    o.cpu_pids.push_back(pid);
  }
  auto planner = tcc::bench::TransferPlanner::Create(shape);
  if (!planner.ok()) {
    std::fprintf(stderr, "tcc-bench: %s\n",
                 planner.status().ToString().c_str());
    return 1;
  }
  auto format = tcc::bench::MakePayloadFormat(payload_format);
  if (!format.ok()) {
    std::fprintf(stderr, "tcc-bench: %s\n", format.status().ToString().c_str());
    return 1;
  }

  const std::vector<std::string> targets =
      absl::StrSplit(target, ',', absl::SkipWhitespace());
  if (targets.empty()) {
    std::fprintf(stderr, "tcc-bench: no --target\n");
    return 1;
  }
  // Channel i of every target before channel i + 1 of any, so consecutive
  // transactions go to different targets.
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> owned;
  std::vector<v1::Coordinator::Stub*> stubs;
  for (int i = 0; i < channels; ++i) {
    for (const std::string& address : targets) {
      grpc::ChannelArguments args;
      // A channel of its own (its own connection) per --channels.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("tcc.bench.channel_index", i);
      auto channel = grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
      const auto deadline = gpr_time_add(
          gpr_now(GPR_CLOCK_MONOTONIC),
          gpr_time_from_millis(static_cast<int64_t>(connect_timeout_s * 1000),
                               GPR_TIMESPAN));
      if (!channel->WaitForConnected(deadline)) {
        std::fprintf(stderr, "tcc-bench: cannot connect to %s\n",
                     address.c_str());
        return 1;
      }
      owned.push_back(v1::Coordinator::NewStub(channel));
      stubs.push_back(owned.back().get());
    }
  }

  if (register_only > 0) {
    return Register(stubs, *planner, **format, o, register_only);
  }
  auto result = tcc::bench::RunLoad(stubs, *planner, **format, o);
  if (!result.ok()) {
    std::fprintf(stderr, "tcc-bench: %s\n", result.status().ToString().c_str());
    return 1;
  }
  PrintReport(target, o, shape, *result);
  return result->error_count() == 0 && result->completed() > 0 ? 0 : 2;
}
