#include "server/admin_tokens.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tcc::server {
namespace {

constexpr size_t kMinToken = 16;
constexpr size_t kMaxToken = 256;
constexpr size_t kMaxName = 64;

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxName) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseAdminTokens(
    const std::string& text, const std::string& source) {
  std::map<std::string, std::string> tokens;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, ":", line_no, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected 'NAME TOKEN'"));
    }
    if (!ValidName(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "name '", fields[0],
                       "' must be 1-64 letters, digits, '.', '_' or '-'"));
    }
    if (fields[1].size() < kMinToken || fields[1].size() > kMaxToken) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "token must be ", kMinToken, " to ", kMaxToken,
                       " bytes (e.g. openssl rand -hex 32)"));
    }
    if (!tokens.emplace(fields[1], fields[0]).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "token repeated"));
    }
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no tokens (lines 'NAME TOKEN')"));
  }
  return tokens;
}

absl::StatusOr<std::map<std::string, std::string>> LoadAdminTokens(
    const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin.token_file ", path, ": cannot be read"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admin.token_file ", path,
        ": readable or writable by group or others; chmod 600 it"));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin.token_file ", path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseAdminTokens(text.str(), absl::StrCat("admin.token_file ", path));
}

}  // namespace tcc::server
