// cam.Topology's sizes come from the one window layout header, never from a Python re-derivation of it: a layout
// change in kernels/common/window_layout.h reaches Python with the next build.
#include "common.h"

#include <cstring>

#include "common/window_layout.h"

namespace cam::bindings {
namespace {

py::dict WindowLayout(const std::vector<int64_t>& fields) {
    if (fields.size() != sizeof(CamTopology) / sizeof(int64_t))
        throw StatusError{ACLNN_ERR_PARAM_INVALID,
                          "topology needs " + std::to_string(sizeof(CamTopology) / sizeof(int64_t)) + " fields"};
    CamTopology t{};
    std::memcpy(&t, fields.data(), sizeof(t));
    py::dict d;
    const int64_t firstBad = layout::check_topology(t);
    d["first_bad_field"] = firstBad;  // field::k*; the sizes below are meaningless unless kOk
    if (firstBad != field::kOk) return d;
    d["recv_rows"] = layout::recv_rows(t);
    d["worst_case_rows"] = layout::worst_case_rows(t);
    d["max_chunks_per_round"] = layout::max_chunks_per_round(t);
    d["work_item_words"] = layout::work_item_words(t);
    d["work_item_chunk_off"] = layout::work_item_chunk_off(t);
    d["attn_window_bytes"] = layout::attn_window_bytes(t);
    d["ffn_window_bytes"] = layout::ffn_window_bytes(t);
    d["window_bytes"] = layout::window_bytes(t);
    d["fingerprint"] = layout::fingerprint(t);
    d["experts_per_ffn"] = layout::experts_per_ffn(t);
    d["placement_width"] = layout::placement_width(t);
    d["placement_words"] = layout::placement_words(t);
    return d;
}

void Register(py::module_& m) {
    m.def("window_layout", &WindowLayout, py::arg("topology"),
          "Sizes of a topology's windows and outputs, from kernels/common/window_layout.h.");
    m.attr("WINDOW_FIELD_WINDOW") = field::kWindow;
    // int64 index in a window of the plane id every rank stamps into its identity line (cam.Comm.plane_id)
    m.attr("IDENTITY_PLANE_ID_WORD") = kIdentityOff / 8 + kIdentityPlaneId;
    // the placement table's epoch word and the first word of its rows (layer 0), docs/protocol.md §15
    m.attr("PLACEMENT_EPOCH_WORD") = layout::kPlacementEpochWord;
    m.attr("PLACEMENT_ROWS_WORD") = layout::kPlacementHeaderWords;
    // The work item's words (docs/protocol.md §4.2), for cam.WorkItem's view: bound here, never numbered in Python.
    py::dict wi;
    wi["kind"] = kWiKind;
    wi["replica"] = kWiReplica;
    wi["layer"] = kWiLayer;
    wi["seq"] = kWiSeq;
    wi["slot"] = kWiSlot;
    wi["rows"] = kWiRows;
    wi["ffn_rank"] = kWiFfnRank;
    wi["fingerprint"] = kWiFingerprint;
    wi["counts"] = kWiCounts;
    m.attr("WORK_ITEM_WORDS") = wi;
    py::dict chunk;
    chunk["first_row"] = kWcFirstRow;
    chunk["round_rows"] = kWcRoundRows;
    chunk["epoch"] = kWcEpoch;
    m.attr("WORK_ITEM_CHUNK_WORDS") = chunk;
    m.attr("WORK_ITEM_KIND_EMPTY") = kWiEmpty;
    m.attr("WORK_ITEM_KIND_WORK") = kWiWork;
}

}  // namespace

CAM_BINDING(Register);

}  // namespace cam::bindings
