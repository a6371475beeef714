#include "fault_injection_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

namespace tcc::wal::testing {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class TrackedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(FaultInjectionFs* fs, std::string fname,
              std::unique_ptr<rocksdb::FSWritableFile> base)
      : FSWritableFileOwnerWrapper(std::move(base)),
        fs_(fs),
        fname_(std::move(fname)) {}

  IOStatus Append(const Slice& data, const IOOptions& options,
                  IODebugContext* dbg) override {
    if (IOStatus s = fs_->OnAppend(fname_, data.size()); !s.ok()) return s;
    return target()->Append(data, options, dbg);
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    if (IOStatus s = fs_->OnAppend(fname_, data.size()); !s.ok()) return s;
    return target()->Append(data, options, info, dbg);
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&,
                            IODebugContext*) override {
    return IOStatus::NotSupported("FaultInjectionFs: positioned append");
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&,
                            const rocksdb::DataVerificationInfo&,
                            IODebugContext*) override {
    return IOStatus::NotSupported("FaultInjectionFs: positioned append");
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options,
                    IODebugContext* dbg) override {
    if (IOStatus s = fs_->OnTruncate(fname_, size); !s.ok()) return s;
    return target()->Truncate(size, options, dbg);
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    return SyncWith([&] { return target()->Sync(options, dbg); });
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return SyncWith([&] { return target()->Fsync(options, dbg); });
  }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&,
                     IODebugContext*) override {
    return IOStatus::OK();  // not a durability point here
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    return target()->Close(options, dbg);
  }

 private:
  template <typename F>
  IOStatus SyncWith(F sync) {
    // A sync makes durable what was written before it started; the fault
    // state changes only once the base sync succeeded.
    const uint64_t written = fs_->WrittenSize(fname_);
    IOStatus s = sync();
    if (!s.ok()) return s;
    return fs_->OnSync(fname_, written);
  }

  FaultInjectionFs* fs_;
  std::string fname_;
};

class ReadCheckedFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  ReadCheckedFile(FaultInjectionFs* fs, std::string fname,
                  std::unique_ptr<rocksdb::FSRandomAccessFile> base)
      : FSRandomAccessFileOwnerWrapper(std::move(base)),
        fs_(fs),
        fname_(std::move(fname)) {}

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& options,
                Slice* result, char* scratch,
                IODebugContext* dbg) const override {
    if (IOStatus s = fs_->OnRead(fname_, offset, n); !s.ok()) return s;
    return target()->Read(offset, n, options, result, scratch, dbg);
  }
  IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                     const IOOptions& options, IODebugContext* dbg) override {
    for (size_t i = 0; i < num_reqs; ++i) {
      reqs[i].status = Read(reqs[i].offset, reqs[i].len, options,
                            &reqs[i].result, reqs[i].scratch, dbg);
    }
    return IOStatus::OK();
  }

 private:
  FaultInjectionFs* fs_;
  std::string fname_;
};

}  // namespace

FaultInjectionFs::FaultInjectionFs(std::shared_ptr<rocksdb::FileSystem> base)
    : FileSystemWrapper(std::move(base)) {}

IOStatus FaultInjectionFs::Wrap(
    const std::string& fname, IOStatus s, uint64_t initial_size,
    std::unique_ptr<rocksdb::FSWritableFile>* result) {
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FileState& st = files_[fname];
    st.size = initial_size;
    st.synced = initial_size;
  }
  *result = std::make_unique<TrackedFile>(this, fname, std::move(*result));
  return s;
}

IOStatus FaultInjectionFs::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  }
  return Wrap(fname, target()->NewWritableFile(fname, opts, result, dbg), 0,
              result);
}

IOStatus FaultInjectionFs::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  }
  uint64_t size = 0;
  if (!target()->GetFileSize(fname, IOOptions(), &size, dbg).ok()) size = 0;
  return Wrap(fname, target()->ReopenWritableFile(fname, opts, result, dbg),
              size, result);
}

IOStatus FaultInjectionFs::ReuseWritableFile(
    const std::string& fname, const std::string& old_fname,
    const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
    files_.erase(old_fname);
  }
  return Wrap(fname,
              target()->ReuseWritableFile(fname, old_fname, opts, result, dbg),
              0, result);
}

IOStatus FaultInjectionFs::DeleteFile(const std::string& fname,
                                      const IOOptions& options,
                                      IODebugContext* dbg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
    files_.erase(fname);
  }
  return target()->DeleteFile(fname, options, dbg);
}

IOStatus FaultInjectionFs::RenameFile(const std::string& src,
                                      const std::string& dst,
                                      const IOOptions& options,
                                      IODebugContext* dbg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  IOStatus s = target()->RenameFile(src, dst, options, dbg);
  if (s.ok()) {
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[dst] = it->second;
      files_.erase(src);
    } else {
      files_.erase(dst);
    }
  }
  return s;
}

IOStatus FaultInjectionFs::NewRandomAccessFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* result, IODebugContext* dbg) {
  IOStatus s = target()->NewRandomAccessFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<ReadCheckedFile>(this, fname, std::move(*result));
  return s;
}

IOStatus FaultInjectionFs::OnRead(const std::string& fname, uint64_t offset,
                                  size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_reads_ && fail_reads_(fname, offset, n)) {
    ++failed_reads_;
    return IOStatus::IOError("FaultInjectionFs: read fails");
  }
  return IOStatus::OK();
}

IOStatus FaultInjectionFs::OnAppend(const std::string& fname, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  if (fail_writes_) return IOStatus::IOError("FaultInjectionFs: write fails");
  files_[fname].size += bytes;
  return IOStatus::OK();
}

IOStatus FaultInjectionFs::OnTruncate(const std::string& fname, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  FileState& st = files_[fname];
  st.size = size;
  st.synced = std::min(st.synced, size);
  return IOStatus::OK();
}

uint64_t FaultInjectionFs::WrittenSize(const std::string& fname) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_[fname].size;
}

IOStatus FaultInjectionFs::OnSync(const std::string& fname, uint64_t written) {
  std::function<void()> delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    delay = sync_delay_;
  }
  if (delay) delay();
  std::lock_guard<std::mutex> lock(mu_);
  if (frozen_) return IOStatus::IOError("FaultInjectionFs: frozen");
  if (fail_syncs_) return IOStatus::IOError("FaultInjectionFs: sync fails");
  ++syncs_;
  FileState& st = files_[fname];
  st.synced = std::max(st.synced, std::min(written, st.size));
  return IOStatus::OK();
}

void FaultInjectionFs::Freeze() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = true;
}

void FaultInjectionFs::SimulateCrash(TearMode mode, std::mt19937_64& rng) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [fname, st] : files_) {
    if (st.size <= st.synced) continue;
    const int fd = ::open(fname.c_str(), O_WRONLY);
    if (fd < 0) continue;  // deleted behind our back: nothing to tear
    const uint64_t unsynced = st.size - st.synced;
    const uint64_t keep = mode == TearMode::kDrop ? 0 : rng() % (unsynced + 1);
    if (mode == TearMode::kZeroFill) {
      const std::vector<char> zeros(unsynced - keep, 0);
      if (!zeros.empty()) {
        (void)::pwrite(fd, zeros.data(), zeros.size(),
                       static_cast<off_t>(st.synced + keep));
      }
    } else {
      (void)::ftruncate(fd, static_cast<off_t>(st.synced + keep));
    }
    ::close(fd);
  }
  files_.clear();
  frozen_ = false;
  fail_writes_ = false;
  fail_syncs_ = false;
  fail_reads_ = nullptr;
}

void FaultInjectionFs::FailWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_writes_ = true;
}

void FaultInjectionFs::FailSyncs() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_syncs_ = true;
}

void FaultInjectionFs::ClearFailures() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_writes_ = false;
  fail_syncs_ = false;
  fail_reads_ = nullptr;
}

void FaultInjectionFs::FailReads(ReadFilter which) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_reads_ = std::move(which);
}

uint64_t FaultInjectionFs::failed_reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_reads_;
}

void FaultInjectionFs::SetSyncDelay(std::function<void()> delay) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_delay_ = std::move(delay);
}

uint64_t FaultInjectionFs::syncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_;
}

}  // namespace tcc::wal::testing
