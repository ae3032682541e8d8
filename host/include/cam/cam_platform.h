/* The device cam runs on, as tiling sees it. On the twin the description can be switched (e.g. to check tiling
 * at Ascend sizes); on Ascend it is read from the runtime. */
#ifndef CAM_PLATFORM_H
#define CAM_PLATFORM_H

#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* name;
    uint32_t aivCores;
    uint32_t aicCores;
    uint32_t ubBytes;
} camPlatformInfo;

CAM_API aclnnStatus camGetPlatform(camPlatformInfo* info);
/* Twin only: "twin" (default), "ascend910b", "ascend910_93". Affects launches issued afterwards. */
CAM_API aclnnStatus camSetTwinPlatform(const char* name);

#ifdef __cplusplus
}
#endif

#endif
