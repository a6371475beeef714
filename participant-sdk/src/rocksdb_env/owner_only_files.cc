#include "tcc/rocksdb_env/owner_only_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <utility>

#include "rocksdb/file_system.h"

namespace tcc::rocksdb_env {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;

constexpr mode_t kFileMode = 0600;
constexpr mode_t kDirMode = 0700;

// Clears the group and other bits of one entry (not following a link).
std::error_code TightenOne(const std::filesystem::path& path, int* changed) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return std::error_code(errno, std::generic_category());
  }
  if (S_ISLNK(st.st_mode) || (st.st_mode & 077) == 0) return {};
  if (::chmod(path.c_str(), st.st_mode & 07700) != 0) {
    return std::error_code(errno, std::generic_category());
  }
  if (changed != nullptr) ++*changed;
  return {};
}

IOStatus Chmod(const std::string& path, mode_t mode) {
  if (::chmod(path.c_str(), mode) != 0) {
    return IOStatus::IOError(
        "can't make owner-only: " + path,
        std::error_code(errno, std::generic_category()).message());
  }
  return IOStatus::OK();
}

class OwnerOnlyFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit OwnerOnlyFileSystem(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "tcc.OwnerOnlyFileSystem"; }

  IOStatus NewWritableFile(const std::string& fname,
                           const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                           IODebugContext* dbg) override {
    return Made(fname, kFileMode,
                target()->NewWritableFile(fname, options, result, dbg));
  }
  IOStatus ReopenWritableFile(const std::string& fname,
                              const rocksdb::FileOptions& options,
                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                              IODebugContext* dbg) override {
    return Made(fname, kFileMode,
                target()->ReopenWritableFile(fname, options, result, dbg));
  }
  IOStatus ReuseWritableFile(const std::string& fname,
                             const std::string& old_fname,
                             const rocksdb::FileOptions& options,
                             std::unique_ptr<rocksdb::FSWritableFile>* result,
                             IODebugContext* dbg) override {
    return Made(
        fname, kFileMode,
        target()->ReuseWritableFile(fname, old_fname, options, result, dbg));
  }
  IOStatus NewRandomRWFile(const std::string& fname,
                           const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                           IODebugContext* dbg) override {
    return Made(fname, kFileMode,
                target()->NewRandomRWFile(fname, options, result, dbg));
  }
  IOStatus LockFile(const std::string& fname, const IOOptions& options,
                    rocksdb::FileLock** lock, IODebugContext* dbg) override {
    IOStatus s = target()->LockFile(fname, options, lock, dbg);
    if (!s.ok()) return s;
    if (IOStatus m = Chmod(fname, kFileMode); !m.ok()) {
      (void)target()->UnlockFile(*lock, options, dbg);
      *lock = nullptr;
      return m;
    }
    return s;
  }
  IOStatus CreateDir(const std::string& dirname, const IOOptions& options,
                     IODebugContext* dbg) override {
    return Made(dirname, kDirMode, target()->CreateDir(dirname, options, dbg));
  }
  IOStatus CreateDirIfMissing(const std::string& dirname,
                              const IOOptions& options,
                              IODebugContext* dbg) override {
    IOStatus s = target()->CreateDirIfMissing(dirname, options, dbg);
    if (!s.ok()) return s;
    if (std::error_code ec = TightenOne(dirname, nullptr); ec) {
      return IOStatus::IOError("can't make owner-only: " + dirname,
                               ec.message());
    }
    return s;
  }

 private:
  static IOStatus Made(const std::string& path, mode_t mode, IOStatus made) {
    if (!made.ok()) return made;
    return Chmod(path, mode);
  }
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewOwnerOnlyFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base) {
  if (base == nullptr) base = rocksdb::FileSystem::Default();
  return std::make_shared<OwnerOnlyFileSystem>(std::move(base));
}

std::error_code CreateOwnerOnlyDirectories(const std::filesystem::path& dir) {
  std::filesystem::path at;
  for (const std::filesystem::path& part : dir) {
    at /= part;
    if (::mkdir(at.c_str(), kDirMode) == 0) {
      // mkdir's mode is filtered by the umask: set it whole.
      if (::chmod(at.c_str(), kDirMode) != 0) {
        return std::error_code(errno, std::generic_category());
      }
    } else if (errno != EEXIST) {
      return std::error_code(errno, std::generic_category());
    }
  }
  return {};
}

std::error_code RestrictToOwner(const std::filesystem::path& path,
                                int* changed) {
  if (std::error_code ec = TightenOne(path, changed); ec) return ec;
  std::error_code ec;
  if (!std::filesystem::is_directory(std::filesystem::symlink_status(path))) {
    return {};
  }
  for (std::filesystem::recursive_directory_iterator
           it(path, std::filesystem::directory_options::none, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    if (std::error_code e = TightenOne(it->path(), changed); e) return e;
  }
  return ec;
}

}  // namespace tcc::rocksdb_env
