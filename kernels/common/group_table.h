// The group table: the device-resident list of a grouped matmul's row groups when the groups span several layers
// (a dispatch_recv batch, docs/protocol.md §6.2; read by W1 and W2, docs/gmm.md §2). Group g is three int64 words
// {layer, local expert, rows}; its rows follow those of group g-1 in the row buffers. Shared by the producer and the
// consumers so the word order is written once.
#pragma once

#include <cstdint>

namespace cam::kernels {

// group_list_type of the grouped matmuls: group_list as cumsum or counts over E_local experts of one layer
// (layer_index names it), or a group table (groups of any layer and expert; layer_index unused).
constexpr uint32_t kGroupListCumsum = 0;
constexpr uint32_t kGroupListCounts = 1;
constexpr uint32_t kGroupListTable = 2;

constexpr int64_t kGroupWords = 3;
constexpr int64_t kGroupLayer = 0;
constexpr int64_t kGroupExpert = 1;
constexpr int64_t kGroupRows = 2;

}  // namespace cam::kernels
