// The twin's stand-in for the Ascend C Hccl client header (CANN: lib/hccl/hccl.h under the Ascend C headers).
#pragma once

#include "twin/hccl.h"
