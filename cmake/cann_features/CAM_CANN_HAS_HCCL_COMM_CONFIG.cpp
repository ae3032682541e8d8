// What the HCCL transport (host/src/transport_hccl.cpp) calls beyond the oldest hccl.h: a communicator created
// with a configuration (its window size) and the rank queries. torch-npu 2.8.0's hccl.h lacks them.
#include <hccl/hccl.h>

void CamProbe() {
    (void)&HcclCommInitRootInfoConfig;
    (void)&HcclGetRankSize;
    (void)&HcclGetRankId;
    (void)&HcclGetErrorString;
    (void)&HcclGetCommName;
}
