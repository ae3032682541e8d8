// The data plane: cam._C.Comm (a camComm) and the four ops. Everything that can wait (joining a group, the ops)
// runs without the GIL so other ranks' threads keep going.
#include "common.h"

#include <cstring>
#include <memory>

#include "common/window_layout.h"
#include "dispatch_recv/dispatch_recv_tiling_data.h"

namespace cam::bindings {
namespace {

using Fields = std::vector<int64_t>;

CamTopology ToTopology(const Fields& f) {
    if (f.size() != sizeof(CamTopology) / sizeof(int64_t))
        throw StatusError{ACLNN_ERR_PARAM_INVALID, "topology needs " + std::to_string(sizeof(CamTopology) / 8) + " fields"};
    CamTopology t{};
    std::memcpy(&t, f.data(), sizeof(t));
    return t;
}

// The C API takes names as C strings: a NUL inside a Python str would cut the name short there, and two different
// names could then open one segment or group. Refused by name instead.
const char* CName(const std::string& s, const char* what) {
    if (s.find('\0') != std::string::npos)
        throw StatusError{ACLNN_ERR_PARAM_INVALID, std::string(what) + " contains a NUL character: " +
                                                       "it would be cut short there and could collide with another"};
    return s.c_str();
}

class Comm {
public:
    static std::unique_ptr<Comm> InProcess(const std::string& group, const Fields& fields, int64_t rank,
                                           int64_t timeoutNs, int64_t idleNs, int32_t joinTimeoutMs, int64_t actDtype) {
        const CamTopology t = ToTopology(fields);
        const camCommConfig cfg{timeoutNs, idleNs, actDtype};
        const char* groupName = CName(group, "group");
        camComm* c = nullptr;
        aclnnStatus st;
        {
            py::gil_scoped_release release;
            st = camCommCreateInProcess(groupName, &t, rank, &cfg, joinTimeoutMs, &c);
        }
        ThrowIfFailed(st);
        return std::unique_ptr<Comm>(new Comm(c));
    }

    static std::unique_ptr<Comm> Shm(const std::string& name, const Fields& fields, int64_t rank, int64_t timeoutNs,
                                     int64_t idleNs, int64_t actDtype) {
        const CamTopology t = ToTopology(fields);
        const camCommConfig cfg{timeoutNs, idleNs, actDtype};
        camComm* c = nullptr;
        ThrowIfFailed(camCommCreateShm(CName(name, "shm segment name"), &t, rank, &cfg, &c));
        return std::unique_ptr<Comm>(new Comm(c));
    }

    // The NPU transport (ACL IPC; the twin's stand-ins on the twin): create + allow the peers' pids, then attach.
    // With segmentName, the twin's shm plane: the same, the window's segment named so (camCommCreateShmIpc).
    static std::unique_ptr<Comm> Ipc(const Fields& fields, int64_t rank, int64_t timeoutNs, int64_t idleNs,
                                     int64_t actDtype, const std::vector<int32_t>& peerPids,
                                     const std::optional<std::string>& segmentName) {
        const CamTopology t = ToTopology(fields);
        const camCommConfig cfg{timeoutNs, idleNs, actDtype};
        camComm* c = nullptr;
        const auto count = static_cast<int64_t>(peerPids.size());
        if (segmentName)
            ThrowIfFailed(camCommCreateShmIpc(CName(*segmentName, "shm segment name"), &t, rank, &cfg,
                                              peerPids.data(), count, &c));
        else
            ThrowIfFailed(camCommCreateIpc(&t, rank, &cfg, peerPids.data(), count, &c));
        return std::unique_ptr<Comm>(new Comm(c));
    }
    py::dict IpcRecord() const {
        camIpcWindowRecord r{};
        ThrowIfFailed(camCommGetIpcRecord(Get(), &r));
        py::dict d;
        d["key"] = std::string(r.key);
        d["pid"] = r.pid;
        d["device"] = r.deviceId;
        d["window_bytes"] = r.windowBytes;
        d["fingerprint"] = r.fingerprint;
        return d;
    }
    void AttachIpc(const std::vector<py::dict>& records) {
        std::vector<camIpcWindowRecord> recs(records.size());
        for (size_t i = 0; i < records.size(); ++i) {
            const auto key = records[i]["key"].cast<std::string>();
            if (key.size() >= CAM_IPC_KEY_BYTES || key.find('\0') != std::string::npos)
                throw StatusError{ACLNN_ERR_PARAM_INVALID, "rank " + std::to_string(i) + "'s IPC key is longer than " +
                                                               std::to_string(CAM_IPC_KEY_BYTES - 1) +
                                                               " bytes or contains a NUL"};
            std::memcpy(recs[i].key, key.c_str(), key.size() + 1);
            recs[i].pid = records[i]["pid"].cast<int32_t>();
            recs[i].deviceId = records[i]["device"].cast<int32_t>();
            recs[i].windowBytes = records[i]["window_bytes"].cast<uint64_t>();
            recs[i].fingerprint = records[i]["fingerprint"].cast<int64_t>();
        }
        ThrowIfFailed(camCommAttachIpc(Get(), recs.data(), static_cast<int64_t>(recs.size())));
    }
    void DetachIpc() { ThrowIfFailed(camCommDetachIpc(Get())); }

    ~Comm() { Close(); }

    void AttachShm(const std::vector<std::string>& names) {
        std::vector<const char*> ptrs;
        for (const auto& n : names) ptrs.push_back(CName(n, "shm segment name"));
        ThrowIfFailed(camCommAttachShm(Get(), ptrs.data(), static_cast<int64_t>(ptrs.size())));
    }
    void UnlinkShm() { ThrowIfFailed(camCommUnlinkShm(Get())); }
    void Abort() { ThrowIfFailed(camCommAbort(Get())); }
    void ReportDeadRank(int64_t rank) { ThrowIfFailed(camCommReportDeadRank(Get(), rank)); }
    void FenceDeadRank(int64_t rank) { ThrowIfFailed(camCommFenceDeadRank(Get(), rank)); }
    int64_t ReplicaFence(int64_t replica) const {
        int64_t dead = -1;
        ThrowIfFailed(camCommReplicaFence(Get(), replica, &dead));
        return dead;
    }
    void SetWeightsEpoch(int64_t epoch) { ThrowIfFailed(camCommSetWeightsEpoch(Get(), epoch)); }
    int64_t WeightsEpoch() const {
        int64_t epoch = 0;
        ThrowIfFailed(camCommGetWeightsEpoch(Get(), &epoch));
        return epoch;
    }
    int64_t DroppedRounds(int64_t replica) const {
        int64_t dropped = 0;
        ThrowIfFailed(camCommDroppedRounds(Get(), replica, &dropped));
        return dropped;
    }
    void Close() {
        if (comm_) {
            // CAM_ERR_COMM_BUSY (ops still queued after a sync timeout) leaves the communicator allocated: dropping
            // it leaks the windows, which a running kernel may still touch; freeing them would not be safe.
            camCommDestroy(comm_);
            comm_ = nullptr;
        }
    }
    bool Closed() const { return comm_ == nullptr; }

    std::pair<uintptr_t, uint64_t> Window() const {
        void* base = nullptr;
        uint64_t bytes = 0;
        ThrowIfFailed(camCommGetWindow(Get(), &base, &bytes));
        return {reinterpret_cast<uintptr_t>(base), bytes};
    }
    uint64_t PeerWindowBytes(int64_t rank) const {
        uint64_t bytes = 0;
        ThrowIfFailed(camCommGetPeerWindowBytes(Get(), rank, &bytes));
        return bytes;
    }
    int64_t PlaneId() const {
        int64_t id = 0;
        ThrowIfFailed(camCommGetPlaneId(Get(), &id));
        return id;
    }
    py::dict Status() const {
        int64_t st[8];
        int64_t abortWord = 0;
        ThrowIfFailed(camCommGetStatus(Get(), st, &abortWord));
        py::dict d;
        const char* names[] = {"code", "op", "rank", "peer", "replica", "layer", "seq", "detail"};
        for (int i = 0; i < 8; ++i) d[names[i]] = st[i];
        d["abort"] = abortWord;
        return d;
    }

    camComm* Get() const {
        if (!comm_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "the communicator is closed"};
        return comm_;
    }

private:
    explicit Comm(camComm* c) : comm_(c) {}
    camComm* comm_ = nullptr;
};

void Register(py::module_& m) {
    m.attr("DISPATCH_RECV_MAX_ITEMS") = cam::kernels::kDispatchRecvMaxItems;
    m.attr("SHM_NAME_MAX") = CAM_SHM_NAME_MAX;
    // The row-budget rule of the batched dispatch_recv, asked without a Comm (cam.serve.ServePolicy): raises what
    // the op would, else returns the most rows one batch can take on the topology.
    m.def(
        "dispatch_recv_check_row_budget",
        [](const Fields& fields, int64_t rowBudget) {
            const CamTopology t = ToTopology(fields);
            int64_t largest = 0;
            ThrowIfFailed(aclnnCamDispatchRecvCheckRowBudget(&t, rowBudget, &largest));
            return largest;
        },
        py::arg("topology"), py::arg("row_budget"));
    py::class_<Comm>(m, "Comm")
        .def_static("in_process", &Comm::InProcess, py::arg("group"), py::arg("topology"), py::arg("rank"),
                    py::arg("timeout_ns"), py::arg("idle_poll_ns"), py::arg("join_timeout_ms"), py::arg("act_dtype"))
        .def_static("shm", &Comm::Shm, py::arg("name"), py::arg("topology"), py::arg("rank"), py::arg("timeout_ns"),
                    py::arg("idle_poll_ns"), py::arg("act_dtype"))
        .def_static("ipc", &Comm::Ipc, py::arg("topology"), py::arg("rank"), py::arg("timeout_ns"),
                    py::arg("idle_poll_ns"), py::arg("act_dtype"), py::arg("peer_pids"),
                    py::arg("segment_name") = py::none())
        .def("ipc_record", &Comm::IpcRecord)
        .def("attach_ipc", &Comm::AttachIpc, py::arg("records"))
        .def("detach_ipc", &Comm::DetachIpc)
        .def("attach_shm", &Comm::AttachShm, py::arg("names"))
        .def("unlink_shm", &Comm::UnlinkShm)
        .def("abort", &Comm::Abort)
        .def("report_dead_rank", &Comm::ReportDeadRank, py::arg("rank"))
        .def("fence_dead_rank", &Comm::FenceDeadRank, py::arg("rank"))
        .def("replica_fence", &Comm::ReplicaFence, py::arg("replica"))
        .def("dropped_rounds", &Comm::DroppedRounds, py::arg("replica"))
        .def("set_weights_epoch", &Comm::SetWeightsEpoch, py::arg("epoch"))
        .def("weights_epoch", &Comm::WeightsEpoch)
        .def("close", &Comm::Close)
        .def_property_readonly("closed", &Comm::Closed)
        .def("window", &Comm::Window)
        .def("peer_window_bytes", &Comm::PeerWindowBytes, py::arg("rank"))
        .def("status", &Comm::Status)
        .def("plane_id", &Comm::PlaneId);

    m.def("ipc_process_id", [] {
        int32_t pid = 0;
        ThrowIfFailed(camIpcProcessId(&pid));
        return pid;
    });
#ifndef CAM_WITH_CANN
    // Debug surface of the twin's ACL IPC stand-ins (tests): the calls made so far in this process, in order, and
    // the imports still open.
    m.def(
        "twin_ipc_calls",
        [](bool reset) {
            std::vector<char> buf(1 << 20);
            if (camTwinIpcCallLog(buf.data(), buf.size(), reset ? 1 : 0) != ACL_SUCCESS)
                throw StatusError{ACLNN_ERR_INNER, "the twin's IPC call log is longer than 1 MiB"};
            std::vector<std::string> calls;
            std::string all(buf.data());
            for (size_t at = 0; at < all.size();) {
                size_t end = all.find(';', at);
                if (end == std::string::npos) end = all.size();
                calls.push_back(all.substr(at, end - at));
                at = end + 1;
            }
            return calls;
        },
        py::arg("reset") = false);
    m.def("twin_ipc_open_imports", [] { return camTwinIpcOpenImports(); });
#endif

    m.def(
        "dispatch_send",
        [](Comm& comm, const Descriptor& x, const Descriptor& ids, int64_t layer,
           const std::optional<Descriptor>& placement, Stream* stream, const py::object& allocate,
           std::optional<double> syncTimeoutS) {
            AclTensor tx(x), ti(ids);
            std::optional<AclTensor> tp;
            if (placement) tp.emplace(*placement);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDispatchSendV2GetWorkspaceSize(c, tx.get(), ti.get(), layer, tp ? tp->get() : nullptr,
                                                              ws, ex);
            }, aclnnCamDispatchSend, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("x"), py::arg("topk_ids"), py::arg("layer"), py::arg("placement"), py::arg("stream"),
        py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "dispatch_recv",
        [](Comm& comm, const Descriptor& expandX, const Descriptor& scales, const Descriptor& counts,
           const Descriptor& workItem, Stream* stream, const py::object& allocate,
           std::optional<double> syncTimeoutS) {
            AclTensor te(expandX), ts(scales), tc(counts), tw(workItem);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDispatchRecvGetWorkspaceSize(c, te.get(), ts.get(), tc.get(), tw.get(), ws, ex);
            }, aclnnCamDispatchRecv, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("expand_x"), py::arg("scales"), py::arg("expert_counts"), py::arg("work_item"),
        py::arg("stream"), py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "dispatch_recv_batch",
        [](Comm& comm, int64_t rowBudget, const Descriptor& expandX, const Descriptor& scales,
           const Descriptor& groupTable, const Descriptor& origin, const Descriptor& workItems, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor te(expandX), ts(scales), tg(groupTable), to(origin), tw(workItems);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDispatchRecvBatchGetWorkspaceSize(c, rowBudget, te.get(), ts.get(), tg.get(), to.get(),
                                                                 tw.get(), ws, ex);
            }, aclnnCamDispatchRecv, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("row_budget"), py::arg("expand_x"), py::arg("scales"), py::arg("group_table"),
        py::arg("origin"), py::arg("work_items"), py::arg("stream"), py::arg("allocate"),
        py::arg("sync_timeout_s") = py::none());
    // The same two modes with a stop word (aclnnCamDispatchRecv*V2: 0 for none, else the address the C call checks
    // is the Comm's stop word, docs/graph.md "Stopping a captured loop").
    m.def(
        "dispatch_recv_v2",
        [](Comm& comm, const Descriptor& expandX, const Descriptor& scales, const Descriptor& counts,
           const Descriptor& workItem, uintptr_t stopWord, Stream* stream, const py::object& allocate,
           std::optional<double> syncTimeoutS) {
            AclTensor te(expandX), ts(scales), tc(counts), tw(workItem);
            camComm* c = comm.Get();
            const void* stop = reinterpret_cast<const void*>(stopWord);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDispatchRecvV2GetWorkspaceSize(c, te.get(), ts.get(), tc.get(), tw.get(), stop, ws,
                                                              ex);
            }, aclnnCamDispatchRecv, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("expand_x"), py::arg("scales"), py::arg("expert_counts"), py::arg("work_item"),
        py::arg("stop_word"), py::arg("stream"), py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "dispatch_recv_batch_v2",
        [](Comm& comm, int64_t rowBudget, const Descriptor& expandX, const Descriptor& scales,
           const Descriptor& groupTable, const Descriptor& origin, const Descriptor& workItems, uintptr_t stopWord,
           Stream* stream, const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor te(expandX), ts(scales), tg(groupTable), to(origin), tw(workItems);
            camComm* c = comm.Get();
            const void* stop = reinterpret_cast<const void*>(stopWord);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDispatchRecvBatchV2GetWorkspaceSize(c, rowBudget, te.get(), ts.get(), tg.get(),
                                                                   to.get(), tw.get(), stop, ws, ex);
            }, aclnnCamDispatchRecv, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("row_budget"), py::arg("expand_x"), py::arg("scales"), py::arg("group_table"),
        py::arg("origin"), py::arg("work_items"), py::arg("stop_word"), py::arg("stream"), py::arg("allocate"),
        py::arg("sync_timeout_s") = py::none());
    m.def(
        "dispatch_recv_stop_word",
        [](Comm& comm) {
            void* word = nullptr;
            ThrowIfFailed(aclnnCamDispatchRecvStopWord(comm.Get(), &word));
            return reinterpret_cast<uintptr_t>(word);
        },
        py::arg("comm"));
    m.def(
        "dispatch_recv_set_stop",
        [](Comm& comm, bool stop) {
            int32_t was = 0;
            ThrowIfFailed(aclnnCamDispatchRecvSetStop(comm.Get(), stop ? 1 : 0, &was));
            return was != 0;
        },
        py::arg("comm"), py::arg("stop"));
    m.def(
        "combine_send",
        [](Comm& comm, const Descriptor& expertOut, const Descriptor& workItem, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor to(expertOut), tw(workItem);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamCombineSendGetWorkspaceSize(c, to.get(), tw.get(), ws, ex);
            }, aclnnCamCombineSend, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("expert_out"), py::arg("work_item"), py::arg("stream"), py::arg("allocate"),
        py::arg("sync_timeout_s") = py::none());
    m.def(
        "combine_send_batch",
        [](Comm& comm, int64_t rowBudget, const Descriptor& expertOut, const Descriptor& workItems, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor to(expertOut), tw(workItems);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamCombineSendBatchGetWorkspaceSize(c, rowBudget, to.get(), tw.get(), ws, ex);
            }, aclnnCamCombineSend, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("row_budget"), py::arg("expert_out"), py::arg("work_items"), py::arg("stream"),
        py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "combine_recv",
        [](Comm& comm, const Descriptor& ids, const Descriptor& weights, const Descriptor& out, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor ti(ids), tw(weights), to(out);
            camComm* c = comm.Get();
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamCombineRecvGetWorkspaceSize(c, ti.get(), tw.get(), to.get(), ws, ex);
            }, aclnnCamCombineRecv, stream, allocate, syncTimeoutS);
        },
        py::arg("comm"), py::arg("topk_ids"), py::arg("topk_weights"), py::arg("out"), py::arg("stream"),
        py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
