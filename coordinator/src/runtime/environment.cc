#include "runtime/environment.h"

#include "absl/strings/str_cat.h"

namespace tcc::runtime {

std::string ClipParticipantText(std::string text) {
  if (text.size() <= kMaxParticipantText) return text;
  // Not inside a UTF-8 character (views carry it in proto strings).
  size_t keep = kMaxParticipantText;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) {
    --keep;
  }
  const size_t cut = text.size() - keep;
  text.resize(keep);
  absl::StrAppend(&text, "... (", cut, " more bytes cut)");
  return text;
}

absl::Status ReceivedStatus(const absl::Status& status) {
  if (status.ok()) return status;
  // A new status: no payload of the transport's comes along.
  return absl::Status(
      status.code(), ClipParticipantText(std::string(status.message().data(),
                                                     status.message().size())));
}

}  // namespace tcc::runtime
