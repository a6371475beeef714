// The router sends each call to the transport of its participant's
// protocol: configured HTTP participants to the HTTP transport, every other
// name (gRPC participants, direct host:port targets) to gRPC; without an
// HTTP transport everything goes to gRPC.
#include "rpc/participant_router.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace tcc::testing {
namespace {

// Records which participants it was asked to call and answers at once.
class Recording final : public runtime::ParticipantTransport {
 public:
  void Call(const runtime::BranchCall& call, int64_t,
            runtime::BranchDone done) override {
    seen.push_back(call.spec->participant);
    done(runtime::BranchAnswer{});
  }
  void Query(const runtime::QueryCall& query, int64_t,
             runtime::QueryDone done) override {
    seen.push_back("query:" + query.participant);
    done(runtime::QueryAnswer{});
  }
  std::vector<std::string> seen;
};

void CallTo(runtime::ParticipantTransport& t, const std::string& name) {
  wal::BranchSpec spec;
  spec.participant = name;
  runtime::BranchCall call;
  call.spec = &spec;
  t.Call(call, 100, [](absl::StatusOr<runtime::BranchAnswer>) {});
  t.Query({"g", 1, "b", name}, 100,
          [](absl::StatusOr<runtime::QueryAnswer>) {});
}

TEST_CASE("each call goes to its participant's transport") {
  Recording grpc, http;
  rpc::ParticipantRouter router(grpc, &http, {"py-bank"});
  CallTo(router, "py-bank");
  CallTo(router, "bank-a");
  CallTo(router, "127.0.0.1:7000");
  CHECK(http.seen == std::vector<std::string>{"py-bank", "query:py-bank"});
  CHECK(grpc.seen == std::vector<std::string>{"bank-a", "query:bank-a",
                                              "127.0.0.1:7000",
                                              "query:127.0.0.1:7000"});
  Recording only;
  rpc::ParticipantRouter grpc_only(only, nullptr, {"py-bank"});
  CallTo(grpc_only, "py-bank");
  CHECK(only.seen.size() == 2);
}

}  // namespace
}  // namespace tcc::testing
