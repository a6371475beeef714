#include "etcd_fault_proxy.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server_builder.h"

namespace tcc::etcd::testing {
namespace {

namespace pb = etcdserverpb;

// Copies the caller's deadline and metadata (the auth token) upstream.
void Forward(grpc::ServerContext* in, grpc::ClientContext& out) {
  out.set_deadline(in->deadline());
  for (const auto& [k, v] : in->client_metadata()) {
    const std::string key(k.data(), k.size());
    if (key == "token") out.AddMetadata(key, std::string(v.data(), v.size()));
  }
}

// Waits for the call's deadline (a member that does not answer).
grpc::Status Hang(grpc::ServerContext* ctx) {
  while (!ctx->IsCancelled() &&
         std::chrono::system_clock::now() < ctx->deadline()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "blackholed");
}

// Whether `txn` puts or deletes anything (in either branch, nested too).
bool Writes(const pb::TxnRequest& txn) {
  for (const auto* ops : {&txn.success(), &txn.failure()}) {
    for (const pb::RequestOp& op : *ops) {
      if (op.has_request_put() || op.has_request_delete_range()) return true;
      if (op.has_request_txn() && Writes(op.request_txn())) return true;
    }
  }
  return false;
}

// Takes one of `n`'s remaining faults, if any.
bool Take(std::atomic<int>& n) { return n.load() > 0 && n.fetch_sub(1) > 0; }

}  // namespace

class EtcdFaultProxy::Services {
 public:
  Services(EtcdFaultProxy& proxy, const std::string& upstream)
      : kv(proxy), lease(proxy), maintenance(proxy) {
    auto channel =
        grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials());
    kv.stub = pb::KV::NewStub(channel);
    lease.stub = pb::Lease::NewStub(channel);
    maintenance.stub = pb::Maintenance::NewStub(channel);
  }

  class Kv final : public pb::KV::Service {
   public:
    explicit Kv(EtcdFaultProxy& p) : p_(p) {}
    grpc::Status Range(grpc::ServerContext* ctx, const pb::RangeRequest* req,
                       pb::RangeResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      if (p_.lose_ranges_.load() > 0 && p_.lose_ranges_.fetch_sub(1) > 0) {
        return Hang(ctx);
      }
      if (Take(p_.compact_ranges_)) {
        return grpc::Status(
            grpc::StatusCode::OUT_OF_RANGE,
            "etcdserver: mvcc: required revision has been compacted");
      }
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->Range(&c, *req, resp);
    }
    grpc::Status Put(grpc::ServerContext* ctx, const pb::PutRequest* req,
                     pb::PutResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->Put(&c, *req, resp);
    }
    grpc::Status DeleteRange(grpc::ServerContext* ctx,
                             const pb::DeleteRangeRequest* req,
                             pb::DeleteRangeResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->DeleteRange(&c, *req, resp);
    }
    grpc::Status Txn(grpc::ServerContext* ctx, const pb::TxnRequest* req,
                     pb::TxnResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      if (p_.drop_requests_.load() > 0 && p_.drop_requests_.fetch_sub(1) > 0) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "fault proxy: request dropped");
      }
      if (p_.lose_requests_.load() > 0 && p_.lose_requests_.fetch_sub(1) > 0) {
        return Hang(ctx);
      }
      const bool writes = Writes(*req);
      if (writes && p_.drop_replies_.load() <= 0 && Take(p_.refuse_writes_)) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "etcdserver: too many requests");
      }
      grpc::ClientContext c;
      Forward(ctx, c);
      p_.txns_forwarded_.fetch_add(1);
      grpc::Status s = stub->Txn(&c, *req, resp);
      if (s.ok() && writes && Take(p_.apply_then_no_space_)) {
        resp->Clear();
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "etcdserver: mvcc: database space exceeded");
      }
      if (p_.drop_replies_.load() > 0 && p_.drop_replies_.fetch_sub(1) > 0) {
        resp->Clear();
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "fault proxy: reply dropped");
      }
      return s;
    }
    std::unique_ptr<pb::KV::Stub> stub;

   private:
    EtcdFaultProxy& p_;
  };

  class Lease final : public pb::Lease::Service {
   public:
    explicit Lease(EtcdFaultProxy& p) : p_(p) {}
    grpc::Status LeaseGrant(grpc::ServerContext* ctx,
                            const pb::LeaseGrantRequest* req,
                            pb::LeaseGrantResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      if (p_.lose_grants_.load() > 0 && p_.lose_grants_.fetch_sub(1) > 0) {
        return Hang(ctx);
      }
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->LeaseGrant(&c, *req, resp);
    }
    grpc::Status LeaseRevoke(grpc::ServerContext* ctx,
                             const pb::LeaseRevokeRequest* req,
                             pb::LeaseRevokeResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->LeaseRevoke(&c, *req, resp);
    }
    grpc::Status LeaseTimeToLive(grpc::ServerContext* ctx,
                                 const pb::LeaseTimeToLiveRequest* req,
                                 pb::LeaseTimeToLiveResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->LeaseTimeToLive(&c, *req, resp);
    }
    grpc::Status LeaseKeepAlive(
        grpc::ServerContext* ctx,
        grpc::ServerReaderWriter<pb::LeaseKeepAliveResponse,
                                 pb::LeaseKeepAliveRequest>* stream) override {
      grpc::ClientContext c;
      for (const auto& [k, v] : ctx->client_metadata()) {
        const std::string key(k.data(), k.size());
        if (key == "token") c.AddMetadata(key, std::string(v.data(), v.size()));
      }
      auto up = stub->LeaseKeepAlive(&c);
      pb::LeaseKeepAliveRequest req;
      while (stream->Read(&req)) {
        if (p_.blackhole_) continue;  // never answered
        if (!up->Write(req)) break;
        pb::LeaseKeepAliveResponse resp;
        if (!up->Read(&resp)) break;
        const int64_t delay = p_.keepalive_delay_ms_.load();
        if (delay > 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        }
        if (!stream->Write(resp)) break;
      }
      c.TryCancel();
      return up->Finish();
    }
    std::unique_ptr<pb::Lease::Stub> stub;

   private:
    EtcdFaultProxy& p_;
  };

  class Maintenance final : public pb::Maintenance::Service {
   public:
    explicit Maintenance(EtcdFaultProxy& p) : p_(p) {}
    grpc::Status Status(grpc::ServerContext* ctx, const pb::StatusRequest* req,
                        pb::StatusResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->Status(&c, *req, resp);
    }
    grpc::Status Alarm(grpc::ServerContext* ctx, const pb::AlarmRequest* req,
                       pb::AlarmResponse* resp) override {
      if (p_.blackhole_) return Hang(ctx);
      grpc::ClientContext c;
      Forward(ctx, c);
      return stub->Alarm(&c, *req, resp);
    }
    std::unique_ptr<pb::Maintenance::Stub> stub;

   private:
    EtcdFaultProxy& p_;
  };

  Kv kv;
  Lease lease;
  Maintenance maintenance;
};

EtcdFaultProxy::EtcdFaultProxy(const std::string& upstream)
    : services_(std::make_unique<Services>(*this, upstream)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port_);
  builder.RegisterService(&services_->kv);
  builder.RegisterService(&services_->lease);
  builder.RegisterService(&services_->maintenance);
  server_ = builder.BuildAndStart();
}

EtcdFaultProxy::~EtcdFaultProxy() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

std::string EtcdFaultProxy::endpoint() const {
  return absl::StrCat("127.0.0.1:", port_);
}

}  // namespace tcc::etcd::testing
