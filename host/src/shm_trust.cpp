#include "shm_trust.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cam::host {

std::string RefuseUntrustedSegment(int fd, const std::string& who, uint64_t* bytes) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return "fstat of " + who + " failed: " + std::strerror(errno);
    if (st.st_uid != geteuid())
        return "refused " + who + ": it is owned by uid " + std::to_string(st.st_uid) + ", not this process's uid " +
               std::to_string(geteuid());
    if ((st.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return "refused " + who + ": it is open to group/other (mode " + mode + ", cam creates 0600)";
    }
    *bytes = static_cast<uint64_t>(st.st_size);
    return "";
}

}  // namespace cam::host
