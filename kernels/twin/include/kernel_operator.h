// The twin's stand-in for the Ascend C umbrella header. Kernel sources include "kernel_operator.h" on both
// toolchains; bisheng finds CANN's header, g++ finds this one. Only the subset cam's kernels use is here.
#pragma once

#include "twin/types.h"
#include "twin/runtime.h"
#include "twin/tensor.h"
#include "twin/data_copy.h"
#include "twin/vector.h"
#include "twin/sync.h"
#include "twin/cube.h"
#include "twin/cube_int4.h"
