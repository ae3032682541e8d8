// camCheckAscendPlane from the command line: 13 CamTopology fields, timeoutNs, idlePollNs, HCCL_BUFFSIZE (MiB),
// AI Core op timeout (s). Prints "<status> <message>".
#include <cam/cam.h>
#include <cam/window_layout.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    if (argc != 18) return 2;
    int64_t f[13];
    for (int i = 0; i < 13; ++i) f[i] = std::atoll(argv[1 + i]);
    const CamTopology t{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12]};
    const camCommConfig cfg{std::atoll(argv[14]), std::atoll(argv[15]), ACL_BF16};
    const aclnnStatus st = camCheckAscendPlane(&t, &cfg, static_cast<uint32_t>(std::atoll(argv[16])),
                                               static_cast<uint32_t>(std::atoll(argv[17])));
    std::printf("%d %s\n", st, st == ACLNN_SUCCESS ? "" : camGetLastErrorMessage());
    return 0;
}
