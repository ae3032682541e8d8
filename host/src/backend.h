// The device backend: platform description for tiling, and streams. Twin now; Ascend when built with CANN.
#pragma once

#include "cam/acl_compat.h"
#include "cam/tiling/platform_info.h"

namespace cam::host {

tiling::PlatformInfo CurrentPlatform();

}  // namespace cam::host
