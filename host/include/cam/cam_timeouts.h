/* The timeout chain, written once (docs/protocol.md §9). Every wait of an op ends inside the next one out, so
 * the error the caller sees is always cam's own, naming the op and the peer:
 *   device wait   block 0 of a data-plane kernel gives up after timeoutNs (a begun round) or idlePollNs (nothing
 *                 ready); the other blocks follow block 0 and give up on their own only CAM_FOLLOWER_MARGIN_S
 *                 later (never, unless block 0 is stuck)
 *   host sync     the host's synchronize bound (Python: CAM_SYNC_TIMEOUT_S) must exceed the device wait by
 *                 CAM_SYNC_MARGIN_S (a loaded 2-core host never eats it)
 *   drain         after a sync timeout the host aborts the op's communicator and waits CAM_DRAIN_S more for the
 *                 stream to drain
 *   device kill   sync bound + drain, and a kernel's longest wait (device wait + follower margin), stay below
 *                 CAM_AICORE_OP_TIMEOUT_S, Ascend's default AI Core op execution timeout (the runtime kills a
 *                 kernel running longer; aclrtSetOpExecuteTimeOut changes it)
 * The macros are for C and C++ code built with cam; camGetTimeoutChain hands the same values to code that binds
 * the library (cam._C.timeout_chain() in Python). */
#ifndef CAM_TIMEOUTS_H
#define CAM_TIMEOUTS_H

#include "cam/cam_status.h"

#define CAM_FOLLOWER_MARGIN_S 60
#define CAM_SYNC_MARGIN_S 30
#define CAM_DRAIN_S 60
#define CAM_AICORE_OP_TIMEOUT_S 1091

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double followerMarginS;
    double syncMarginS;
    double drainS;
    double aicoreOpTimeoutS;
} camTimeoutChain;

CAM_API aclnnStatus camGetTimeoutChain(camTimeoutChain* chain);

#ifdef __cplusplus
}
#endif

#endif
