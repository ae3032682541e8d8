#include "gmm_common.h"

#include "backend.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "common/device_status_record.h"
#include "common/gmm_cube_tiling_data.h"
#include "gmm_split_int4/gmm_split_int4.h"

namespace cam::host {

using kernels::CeilDiv;

aclnnStatus CheckGroupList(const ArgChecker& check, int64_t groupListType, GmmArgs* a);

namespace {

// The two weight formats a layer can hold: int8 FRACTAL_NZ (W8A8) or packed int4 ZN fractals with their colsums
// (W4A8, docs/gmm.md §9).
enum class WeightFormat { Int8Nz, Int4Packed };

// Every layer's weights, scales (and with int4 colsums) against the format's shapes; the errors name the layer.
aclnnStatus CheckLayerWeights(const ArgChecker& check, const char* xName, WeightFormat format, GmmArgs* a) {
    aclnnStatus st;
    const bool int4 = format == WeightFormat::Int4Packed;
    const std::vector<int64_t> shape =
        int4 ? std::vector<int64_t>{a->experts, static_cast<int64_t>(CeilDiv(a->k, kernels::kGmmK0Int4)),
                                    static_cast<int64_t>(CeilDiv(a->n, kernels::kGmmN0Int4)), 16, 32}
             : std::vector<int64_t>{a->experts, static_cast<int64_t>(CeilDiv(a->n, kernels::kGmmNzCols)),
                                    static_cast<int64_t>(CeilDiv(a->k, kernels::kGmmNzRows)), kernels::kGmmNzRows,
                                    kernels::kGmmNzCols};
    const char* layout = int4 ? " must be packed int4 " : " must be FRACTAL_NZ ";
    const char* dims = int4 ? " ([E_local, ceil(K/64), ceil(N/16), 16, 32] with K = "
                            : " ([E_local, ceil(N/32), ceil(K/16), 16, 32] with K = ";
    const char* build = int4 ? " (build the weights with cam.LayerWeights(..., format=\"int4\"))"
                             : " (build the weights with cam.LayerWeights / cam.ops.prepack_weights)";
    // [E, G, N] scales: one per group of K / G rows (kGroups > 1 only comes from them).
    const bool grouped = a->scales[0].shape.size() == 3;
    for (int64_t l = 0; l < a->layers; ++l) {
        const std::string w = "weights[" + std::to_string(l) + "]", s = "weight_scales[" + std::to_string(l) + "]",
                          c = "weight_colsums[" + std::to_string(l) + "]";
        const TensorView& wl = a->weights[l];
        if ((st = check.Dtype(wl, w.c_str(), {int4 ? ACL_UINT8 : ACL_INT8}))) return st;
        if (wl.shape != shape) {
            TensorView expect;
            expect.shape = shape;
            return check.Invalid(w + layout + expect.ShapeString() + dims + std::to_string(a->k) + " from " + xName +
                                 " and E_local, N = " + std::to_string(a->n) + " from weight_scales), got " +
                                 wl.ShapeString() + build);
        }
        if ((st = check.Contiguous(wl, w.c_str()))) return st;
        if ((st = grouped ? check.Tensor(a->scales[l], s.c_str(), {ACL_FLOAT}, {a->experts, a->kGroups, a->n})
                          : check.Tensor(a->scales[l], s.c_str(), {ACL_FLOAT}, {a->experts, a->n})))
            return st;
        if (int4 && ((st = check.Tensor(a->colsums[l], c.c_str(), {ACL_INT32}, {a->experts, a->kGroups, a->n})) ||
                     (st = check.Contiguous(a->colsums[l], c.c_str()))))
            return st;
    }
    return ACLNN_SUCCESS;
}

// W4A8: the colsums' list against the weights' before the per-layer checks.
aclnnStatus CheckInt4Lists(const ArgChecker& check, const aclTensorList* weightColsums, GmmArgs* a) {
    aclnnStatus st;
    a->int4 = true;
    if ((st = check.List(weightColsums, "weight_colsums", &a->colsums))) return st;
    if (a->colsums.size() != a->weights.size())
        return check.Invalid("weights (" + std::to_string(a->weights.size()) + " layers) and weight_colsums (" +
                             std::to_string(a->colsums.size()) + " layers) must match");
    if (a->kGroups > 1 && (a->k / a->kGroups) % kernels::kGmmK0Int4 != 0)
        return check.Invalid("weight_scales[0] splits K = " + std::to_string(a->k) + " into " +
                             std::to_string(a->kGroups) + " groups of " + std::to_string(a->k / a->kGroups) +
                             " rows: with int4 weights each group must be a multiple of 64 rows (an int4 fractal "
                             "holds 64 K values)");
    return ACLNN_SUCCESS;
}

}  // namespace

aclnnStatus CheckGmmInputs(const ArgChecker& check, const char* xName, const char* xScaleName, const aclTensor* x,
                           const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
                           const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
                           GmmArgs* a, const aclTensorList* weightColsums) {
    aclnnStatus st;
    const bool table = groupListType == kernels::kGroupListTable;
    if ((st = check.View(x, xName, &a->x)) || (st = check.View(xScale, xScaleName, &a->xScale)) ||
        (st = check.List(weights, "weights", &a->weights)) || (st = check.List(weightScales, "weight_scales", &a->scales)) ||
        (st = check.View(groupList, "group_list", &a->groupList)))
        return st;
    // A group table names each group's layer: layer_index is not read then, and may be null.
    if (!(table && layerIndex == nullptr) && (st = check.View(layerIndex, "layer_index", &a->layerIndex))) return st;
    if ((st = check.Tensor(a->x, xName, {ACL_INT8}, {kAnyDim, kAnyDim})))
        return st;
    a->m = a->x.Dim(0);
    a->k = a->x.Dim(1);
    if (a->k < 1) return check.Invalid(std::string(xName) + " must have at least one column, got shape " + a->x.ShapeString());
    if (a->k > kernels::kGmmMaxK)
        return check.Invalid(std::string(xName) + " has K = " + std::to_string(a->k) + " columns; at most " +
                             std::to_string(kernels::kGmmMaxK) + " are supported");
    if ((st = check.Tensor(a->xScale, xScaleName, {ACL_FLOAT}, {a->m})))
        return st;

    if (a->weights.empty()) return check.Invalid("weights must hold at least one layer");
    if (a->scales.size() != a->weights.size())
        return check.Invalid("weights (" + std::to_string(a->weights.size()) + " layers) and weight_scales (" +
                             std::to_string(a->scales.size()) + " layers) must match");
    a->layers = static_cast<int64_t>(a->weights.size());
    const TensorView& s0 = a->scales[0];
    // [E, N] per output channel, or [E, G, N] per group of K / G rows along K (docs/gmm.md §9.2).
    if (s0.shape.size() == 3) {
        if ((st = check.Tensor(s0, "weight_scales[0]", {ACL_FLOAT}, {kAnyDim, kAnyDim, kAnyDim}))) return st;
        a->kGroups = s0.Dim(1);
        if (a->kGroups < 1 || a->k % a->kGroups != 0 || (a->k / a->kGroups) % kernels::kGmmK0 != 0)
            return check.Invalid("weight_scales[0] " + s0.ShapeString() + " splits K = " + std::to_string(a->k) +
                                 " into " + std::to_string(a->kGroups) + " groups: each group must be a multiple of " +
                                 std::to_string(kernels::kGmmK0) + " rows");
    } else if ((st = check.Tensor(s0, "weight_scales[0]", {ACL_FLOAT}, {kAnyDim, kAnyDim}))) {
        return st;
    }
    a->experts = s0.Dim(0);
    a->n = s0.Dim(s0.shape.size() - 1);
    if (a->experts < 1 || a->n < 1)
        return check.Invalid("weight_scales[0] must be [E_local >= 1, N >= 1], got " + s0.ShapeString());
    if (weightColsums != nullptr && (st = CheckInt4Lists(check, weightColsums, a))) return st;
    if ((st = CheckLayerWeights(check, xName, a->int4 ? WeightFormat::Int4Packed : WeightFormat::Int8Nz, a)))
        return st;
    return CheckGroupList(check, groupListType, a);
}

aclnnStatus CheckGroupList(const ArgChecker& check, int64_t groupListType, GmmArgs* a) {
    aclnnStatus st;
    const bool table = groupListType == kernels::kGroupListTable;
    if (groupListType != 0 && groupListType != 1 && !table)
        return check.Invalid("group_list_type must be 0 (cumsum), 1 (counts) or 2 (group table), got " +
                             std::to_string(groupListType));
    if (table) {
        if ((st = check.Dtype(a->groupList, "group_list", {ACL_INT64}))) return st;
        if (a->groupList.shape.size() != 2 || a->groupList.Dim(1) != kernels::kGroupWords)
            return check.Invalid("group_list (a group table, group_list_type 2) must be [G, 3] {layer, expert, rows}, "
                                 "got shape " + a->groupList.ShapeString());
        a->groups = a->groupList.Dim(0);
        if (a->groups < 1)
            return check.Invalid("group_list (a group table) must hold at least one group, got shape " +
                                 a->groupList.ShapeString());
        return check.Contiguous(a->groupList, "group_list");
    }
    a->groups = a->experts;
    if ((st = check.Tensor(a->groupList, "group_list", {ACL_INT64}, {a->experts})))
        return st;
    if ((st = check.Dtype(a->layerIndex, "layer_index", {ACL_INT64})))
        return st;
    if (a->layerIndex.Numel() != 1)
        return check.Invalid("layer_index must hold exactly one element, got shape " + a->layerIndex.ShapeString());
    return ACLNN_SUCCESS;
}

namespace {
// The split: hi and lo planes of M rows x 64·ceil(K/64) int4, half a byte each (0 without int4).
uint64_t GmmSplitBytes(const GmmArgs& a) {
    return a.int4 ? static_cast<uint64_t>(a.m) * kernels::AlignUp(a.k, kernels::kGmmK0Int4) : 0;
}
}  // namespace

GmmWorkspace GmmRingWorkspace(uint64_t ringBytes, const GmmArgs& a) {
    constexpr uint64_t kAlign = 512;
    GmmWorkspace w;
    w.status = 0;
    w.acc = kernels::AlignUp(kernels::kDeviceStatusBytes, kAlign);
    w.bytes = kernels::AlignUp(w.acc + ringBytes, kAlign);
    if (const uint64_t split = GmmSplitBytes(a)) {
        w.split = w.bytes;
        w.bytes = kernels::AlignUp(w.split + split, kAlign);
    }
    return w;
}

uint8_t* LaunchGmmCubeActivations(aclrtStream stream, uint8_t* x, uint8_t* groupList, uint8_t* layerIndex,
                                  uint8_t* workspace, const GmmWorkspace& ws,
                                  const cam::kernels::GmmCubeTilingData& cube,
                                  const cam::kernels::GmmSplitInt4TilingData& split) {
    if (!cube.int4) return x;
    uint8_t* planes = workspace + ws.split;
    cam::kernels::LaunchGmmSplitInt4(split.blockDim, stream, x, groupList, layerIndex, planes, workspace + ws.status,
                                     cube, split);
    return planes;
}

uint8_t* PersistentGmmTable(const GmmArgs& a) {
    // Keyed by content: the table holds nothing but addresses, so two weight sets with the same addresses share
    // one table and a table can never go stale. Built once per weight set, at its first call (an
    // eager warm-up call before a capture, docs/graph.md), and never freed: a graph may hold its address for life.
    static std::mutex mutex;
    static auto* tables = new std::map<std::string, uint8_t*>();
    const std::vector<uint8_t> bytes = GmmAddressTable(a);
    std::string key(bytes.begin(), bytes.end());
    std::lock_guard<std::mutex> lock(mutex);
    auto it = tables->find(key);
    if (it != tables->end()) return it->second;
    auto* table = static_cast<uint8_t*>(PersistentDeviceCopy(bytes));
    tables->emplace(std::move(key), table);
    return table;
}

std::vector<uint8_t> GmmAddressTable(const GmmArgs& a) {
    std::vector<uint64_t> table;
    for (const TensorView& w : a.weights) table.push_back(reinterpret_cast<uintptr_t>(w.data));
    for (const TensorView& s : a.scales) table.push_back(reinterpret_cast<uintptr_t>(s.data));
    for (const TensorView& c : a.colsums) table.push_back(reinterpret_cast<uintptr_t>(c.data));
    std::vector<uint8_t> bytes(table.size() * sizeof(uint64_t));
    std::memcpy(bytes.data(), table.data(), bytes.size());
    return bytes;
}

}  // namespace cam::host
