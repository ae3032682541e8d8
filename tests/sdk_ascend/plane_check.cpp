// camCheckAscendPlane from the command line: every CamTopology field (as cam.Topology.as_c_fields gives them),
// timeoutNs, idlePollNs, HCCL_BUFFSIZE (MiB), AI Core op timeout (s). Prints "<status> <message>".
#include <cam/cam.h>
#include <cam/window_layout.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
    constexpr int kFields = sizeof(CamTopology) / sizeof(int64_t);
    if (argc != 1 + kFields + 4) return 2;
    int64_t f[kFields];
    for (int i = 0; i < kFields; ++i) f[i] = std::atoll(argv[1 + i]);
    CamTopology t{};
    std::memcpy(&t, f, sizeof(t));
    char** rest = argv + 1 + kFields;
    const camCommConfig cfg{std::atoll(rest[0]), std::atoll(rest[1]), ACL_BF16};
    const aclnnStatus st = camCheckAscendPlane(&t, &cfg, static_cast<uint32_t>(std::atoll(rest[2])),
                                               static_cast<uint32_t>(std::atoll(rest[3])));
    std::printf("%d %s\n", st, st == ACLNN_SUCCESS ? "" : camGetLastErrorMessage());
    return 0;
}
