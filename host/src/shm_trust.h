// The one trust rule for mapping another process's POSIX shm segment into a plane: the twin's ACL IPC stand-ins
// apply it to every import by key and every look-up of a key by segment name (the shm plane's attach), which are the
// only ways a twin plane maps a peer's window. A segment someone outside the plane can write (another user's, or
// one open to group/other) could rewrite the window under it, identity line included, so only the plane user's own
// 0600 segments (what cam creates) are mapped (docs/protocol.md §9).
#pragma once

#include <cstdint>
#include <string>

namespace cam::host {

// "" when the open segment `fd` may be mapped (then *bytes is its size), else the refusal naming `who` ("rank 2's
// segment /name"), the owner or the mode.
std::string RefuseUntrustedSegment(int fd, const std::string& who, uint64_t* bytes);

}  // namespace cam::host
