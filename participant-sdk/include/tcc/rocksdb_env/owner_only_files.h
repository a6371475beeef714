// Databases only their owner can read or write: every file RocksDB creates
// through NewOwnerOnlyFileSystem is 0600 and every directory 0700 (RocksDB
// itself uses 0644 and 0755, and in RocksDB 7.8 Env::SetAllowNonOwnerAccess
// changes nothing the POSIX file system creates), and the helpers below
// create and tighten the directories around a database the same way. The
// files hold every payload a database keeps.
//
// Modes are set right after creation; the directories around are 0700
// first, so no one else can reach a file in between. Thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <system_error>

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace tcc::rocksdb_env {

// `base` (null: the OS's file system), with every file and directory it
// creates made owner-only; a directory that CreateDirIfMissing finds is
// tightened too.
std::shared_ptr<rocksdb::FileSystem> NewOwnerOnlyFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base);

// mkdir -p with mode 0700 for each directory it creates (whatever the
// umask); nothing to do for those that exist.
[[nodiscard]] std::error_code CreateOwnerOnlyDirectories(
    const std::filesystem::path& dir);

// Removes the group and other permission bits from `path` and, for a
// directory, from everything under it (symbolic links are neither followed
// nor changed). `changed`, when given, gets how many entries it changed.
[[nodiscard]] std::error_code RestrictToOwner(const std::filesystem::path& path,
                                              int* changed = nullptr);

}  // namespace tcc::rocksdb_env
