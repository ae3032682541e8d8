// Entry i of an aclTensorList on Ascend. aclnn's C API has only aclGetTensorListSize; the entries are reached
// through the aclTensorList class of CANN's opdev headers (a toolkit header the torch-npu wheel does not ship, so
// this file is built only with a toolkit and is not part of the wheel-header compile check).
#include "opdev/common_types.h"

#include "backend.h"

namespace cam::host {

const aclTensor* TensorListEntry(const aclTensorList* list, uint64_t i) { return (*list)[i]; }

}  // namespace cam::host
