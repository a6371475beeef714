// A rocksdb::FileSystem for crash tests and benchmarks (after LevelDB's
// fault_injection_test and RocksDB's FaultInjectionTestFS).
//
// It remembers, for every file written through it, how many bytes were
// synced. SimulateCrash() then does what a power cut does to those files:
// the unsynced tail is dropped, cut short at a random point, or zero-filled
// from a random point on. Call it with the DB closed or, to model a crash
// that gives the process no chance to finish, after Freeze(): from then on
// every write and sync fails, so closing the DB persists nothing more.
//
// It can also fail the next write or sync with an IOError (fail-stop tests),
// fail the reads that a predicate picks (a file that can't be read back),
// and delay every sync (the benchmark's slow disk; the delay runs through an
// injected sleeper, so this file reads no clock).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "rocksdb/file_system.h"

namespace tcc::wal::testing {

enum class TearMode {
  kDrop,      // the unsynced tail is gone
  kCut,       // a random prefix of it survives
  kZeroFill,  // a random prefix survives, the rest of it reads as zeros
};

class FaultInjectionFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFs(std::shared_ptr<rocksdb::FileSystem> base =
                                rocksdb::FileSystem::Default());

  const char* Name() const override { return "FaultInjectionFs"; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& fname, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& fname, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& fname, const std::string& old_fname,
      const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src,
                               const std::string& target,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& fname, const rocksdb::FileOptions& opts,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
      rocksdb::IODebugContext* dbg) override;

  // From now on every write and sync fails (the machine is off).
  void Freeze();
  // Tears every unsynced tail as `mode` says, choosing cut points with `rng`,
  // then forgets what it tracked and works normally again.
  void SimulateCrash(TearMode mode, std::mt19937_64& rng);

  // The next write / sync (any file) fails with an IOError, and every one
  // after it too until ClearFailures().
  void FailWrites();
  void FailSyncs();
  void ClearFailures();

  // Every random-access read (table files) for which `which(file name,
  // offset, length)` is true fails with an IOError, until ClearFailures().
  using ReadFilter =
      std::function<bool(const std::string& fname, uint64_t offset, size_t n)>;
  void FailReads(ReadFilter which);
  // Reads failed so far.
  uint64_t failed_reads() const;

  // Every sync calls `delay` first (nullptr: none).
  void SetSyncDelay(std::function<void()> delay);

  uint64_t syncs() const;

  // Called by the file wrappers.
  rocksdb::IOStatus OnAppend(const std::string& fname, size_t bytes);
  uint64_t WrittenSize(const std::string& fname);
  rocksdb::IOStatus OnSync(const std::string& fname, uint64_t written);
  rocksdb::IOStatus OnTruncate(const std::string& fname, uint64_t size);
  rocksdb::IOStatus OnRead(const std::string& fname, uint64_t offset, size_t n);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  rocksdb::IOStatus Wrap(const std::string& fname, rocksdb::IOStatus s,
                         uint64_t initial_size,
                         std::unique_ptr<rocksdb::FSWritableFile>* result);

  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  bool frozen_ = false;
  bool fail_writes_ = false;
  bool fail_syncs_ = false;
  ReadFilter fail_reads_;
  uint64_t failed_reads_ = 0;
  uint64_t syncs_ = 0;
  std::function<void()> sync_delay_;
};

}  // namespace tcc::wal::testing
