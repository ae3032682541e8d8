// GlobalTensor / LocalTensor and the UB allocators (TPipe, TQue, TBuf) with the discipline the hardware needs.
#pragma once

#include <atomic>
#include <string>
#include <type_traits>

#include "twin/dcache.h"
#include "twin/pipes.h"
#include "twin/runtime.h"
#include "twin/timing.h"
#include "twin/types.h"

namespace cam::twin {

constexpr uint32_t kUbAlign = 32;

enum class BufferState : uint8_t { Free, Allocated, Enqueued, Dequeued, Calc };

const char* StateName(BufferState s);

// One UB buffer handed out by TPipe::InitBuffer: either a slot of a queue or the whole of a TBuf.
struct BufferRecord {
    uint8_t* base = nullptr;
    uint32_t bytes = 0;
    BufferState state = BufferState::Free;
    AscendC::TPosition position = AscendC::TPosition::VECCALC;
    std::source_location lastAlloc{};  // where the buffer was last taken, for leak reports
    // An L0C buffer's bytes an initialising Mmad wrote since it was last taken ([initBegin, initEnd), their hull):
    // an accumulating Mmad may only add into those (mmad-init, twin/cube.h).
    const uint8_t* initBegin = nullptr;
    const uint8_t* initEnd = nullptr;
};

// Which engine touches a UB buffer; the legal buffer states differ per engine.
enum class Access : uint8_t { Vector, Scalar, CopyIn /*MTE2 writes UB*/, CopyOut /*MTE3 reads UB*/ };

void CheckBufferAccess(const BufferRecord* rec, Access access, const std::source_location& where);

template <typename T>
constexpr bool kFlagWord = std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8);

}  // namespace cam::twin

namespace AscendC {

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    GlobalTensor() = default;

    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize = 0) {
        addr_ = buffer;
        size_ = bufferSize;
    }
    __gm__ T* GetPhyAddr() const { return addr_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const {
        CheckPairOffset(offset, std::source_location::current());
        return cam::twin::AdvanceElems(addr_, offset);
    }
    uint64_t GetSize() const { return size_; }

    GlobalTensor operator[](uint64_t offset) const {
        CheckPairOffset(offset, std::source_location::current());
        GlobalTensor t;
        t.addr_ = cam::twin::AdvanceElems(addr_, offset);
        t.size_ = size_ > offset ? size_ - offset : 0;
        return t;
    }

    // Scalar GM access goes through the block's data cache (twin/dcache.h): a value another core wrote is seen
    // only after DataCacheCleanAndInvalid dropped this block's copy of the line, a stored value leaves the block
    // only with a clean. CAM_TWIN_DCACHE=0 turns the model off (4/8-byte integers are then acquire/release).
    T GetValue(uint64_t offset, const std::source_location where = std::source_location::current()) const {
        static_assert(cam::twin::kElemBits<T> >= 8, "the twin has no scalar access to packed int4 elements");
        CheckIndex(offset, where);
        cam::twin::TimeScalar(true);
        if (cam::twin::InKernel()) cam::twin::PipeScalarGmLoad(addr_ + offset, sizeof(T), where);
        if (cam::twin::InKernel() && cam::twin::DcacheEnabled()) {
            T v;
            cam::twin::CurrentBlock().dcache->Load(addr_ + offset, &v, sizeof(T), where);
            return v;
        }
        if constexpr (cam::twin::kFlagWord<T>) {
            return __atomic_load_n(addr_ + offset, __ATOMIC_ACQUIRE);
        } else {
            return addr_[offset];
        }
    }
    // Not const, as in the Ascend C header: a const GlobalTensor cannot be written through.
    void SetValue(uint64_t offset, T value, const std::source_location where = std::source_location::current()) {
        static_assert(cam::twin::kElemBits<T> >= 8, "the twin has no scalar access to packed int4 elements");
        CheckIndex(offset, where);
        cam::twin::TimeScalar(true);
        if (cam::twin::InKernel()) cam::twin::CheckScalarStoreTarget(addr_ + offset, where);
        if (cam::twin::InKernel() && cam::twin::DcacheEnabled()) {
            cam::twin::CurrentBlock().dcache->Store(addr_ + offset, &value, sizeof(T), where);
            return;
        }
        if constexpr (cam::twin::kFlagWord<T>) {
            __atomic_store_n(addr_ + offset, value, __ATOMIC_RELEASE);
        } else {
            addr_[offset] = value;
        }
    }

    void CheckRange(uint64_t offset, uint64_t count, const std::source_location& where) const {
        CAM_TWIN_CHECK(addr_ != nullptr, "gm-null", "GlobalTensor used before SetGlobalBuffer", where);
        CAM_TWIN_CHECK(size_ == 0 || offset + count <= size_, "gm-bounds",
                       "access [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                           ") outside a GlobalTensor of " + std::to_string(size_) + " elements",
                       where);
    }

private:
    void CheckIndex(uint64_t offset, const std::source_location& where) const { CheckRange(offset, 1, where); }
    // An int4 tensor addresses bytes: an odd element offset would start inside a byte.
    static void CheckPairOffset(uint64_t offset, const std::source_location& where) {
        if constexpr (cam::twin::kElemBits<T> == 4)
            CAM_TWIN_CHECK(offset % 2 == 0, "int4-pair",
                           "int4 tensor offset " + std::to_string(offset) + " is odd (two elements share a byte)",
                           where);
    }

    __gm__ T* addr_ = nullptr;
    uint64_t size_ = 0;  // elements; 0 = unknown, not checked
};

template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;
    LocalTensor(T* addr, uint32_t count, cam::twin::BufferRecord* rec) : addr_(addr), count_(count), rec_(rec) {}

    LocalTensor operator[](uint32_t offset) const {
        const auto where = std::source_location::current();
        CAM_TWIN_CHECK(offset <= count_, "ub-bounds",
                       "sub-tensor offset " + std::to_string(offset) + " past a tensor of " + std::to_string(count_),
                       where);
        if constexpr (cam::twin::kElemBits<T> == 4)
            CAM_TWIN_CHECK(offset % 2 == 0, "int4-pair",
                           "int4 tensor offset " + std::to_string(offset) + " is odd (two elements share a byte)",
                           where);
        return LocalTensor(cam::twin::AdvanceElems(addr_, offset), count_ - offset, rec_);
    }

    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        const uint64_t bits = uint64_t(count_) * cam::twin::kElemBits<T>;
        return LocalTensor<U>(reinterpret_cast<U*>(addr_), static_cast<uint32_t>(bits / cam::twin::kElemBits<U>), rec_);
    }

    T GetValue(uint32_t index, const std::source_location where = std::source_location::current()) const {
        static_assert(cam::twin::kElemBits<T> >= 8, "the twin has no scalar access to packed int4 elements");
        CheckScalar(index, where);
        cam::twin::TimeScalar(false);
        return addr_[index];
    }
    void SetValue(uint32_t index, T value, const std::source_location where = std::source_location::current()) const {
        static_assert(cam::twin::kElemBits<T> >= 8, "the twin has no scalar access to packed int4 elements");
        CheckScalar(index, where);
        cam::twin::TimeScalar(false);
        addr_[index] = value;
    }

    uint32_t GetSize() const { return count_; }
    uint64_t GetPhyAddr() const { return reinterpret_cast<uint64_t>(addr_); }

    // Twin internals for the copy and vector emulation; kernels do not call these.
    T* Data() const { return addr_; }
    cam::twin::BufferRecord* Record() const { return rec_; }

private:
    void CheckScalar(uint32_t index, const std::source_location& where) const {
        CAM_TWIN_CHECK(addr_ != nullptr, "ub-null", "LocalTensor used before allocation", where);
        CAM_TWIN_CHECK(index < count_, "ub-bounds",
                       "index " + std::to_string(index) + " past a tensor of " + std::to_string(count_), where);
        cam::twin::CheckBufferAccess(rec_, cam::twin::Access::Scalar, where);
    }

    T* addr_ = nullptr;
    uint32_t count_ = 0;
    cam::twin::BufferRecord* rec_ = nullptr;
};

}  // namespace AscendC

namespace cam::twin {
// The allocators' common parts live outside AscendC: the real namespace has no such names.
class TQueBase;
class TBufBase;
}  // namespace cam::twin

namespace AscendC {

class TPipe {
public:
    explicit TPipe(const std::source_location where = std::source_location::current());
    ~TPipe();
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    void InitBuffer(cam::twin::TQueBase& que, uint8_t num, uint32_t len,
                    const std::source_location where = std::source_location::current());
    void InitBuffer(cam::twin::TBufBase& buf, uint32_t len,
                    const std::source_location where = std::source_location::current());

    // Event ids for SetFlag/WaitFlag. The twin executes pipes in program order; the ids only have to be valid
    // (0..7) and used in matched pairs (twin/sync.h).
    template <HardEvent>
    TEventID FetchEventID() { return 0; }
    TEventID FetchEventID(HardEvent) { return 0; }
    // Releases the pipe: another TPipe may be created afterwards (one live TPipe at a time).
    void Destroy();

private:
    bool live_ = false;     // counted in the block's live pipes
    uint32_t ubStart_ = 0;  // UB offset this pipe started carving from; given back when it goes away
    uint32_t cubeStart_[4] = {};  // same for the cube core's L1 / L0A / L0B / L0C
};

}  // namespace AscendC

namespace cam::twin {

using AscendC::LocalTensor;
using AscendC::TPosition;

class TQueBase {
public:
    static constexpr int kMaxBuffers = 8;

    template <typename T>
    LocalTensor<T> AllocTensor(const std::source_location where = std::source_location::current()) {
        cam::twin::BufferRecord* rec = TakeFree(where);
        return LocalTensor<T>(reinterpret_cast<T*>(rec->base),
                              static_cast<uint32_t>(cam::twin::ElemsInBytes<T>(rec->bytes)), rec);
    }
    template <typename T>
    void EnQue(const LocalTensor<T>& t, const std::source_location where = std::source_location::current()) {
        Push(t.Record(), where);
    }
    template <typename T>
    LocalTensor<T> DeQue(const std::source_location where = std::source_location::current()) {
        cam::twin::BufferRecord* rec = Pop(where);
        return LocalTensor<T>(reinterpret_cast<T*>(rec->base),
                              static_cast<uint32_t>(cam::twin::ElemsInBytes<T>(rec->bytes)), rec);
    }
    template <typename T>
    void FreeTensor(const LocalTensor<T>& t, const std::source_location where = std::source_location::current()) {
        Release(t.Record(), where);
    }

    // A buffer still taken when the queue goes out of scope is a discipline error (the hardware queue would be
    // left holding it); reported unless the block is already unwinding from another error.
    ~TQueBase() noexcept(false);

protected:
    explicit TQueBase(TPosition pos, int32_t depth) : position_(pos), depth_(depth) {}

private:
    friend class AscendC::TPipe;
    cam::twin::BufferRecord* TakeFree(const std::source_location& where);
    void Push(cam::twin::BufferRecord* rec, const std::source_location& where);
    cam::twin::BufferRecord* Pop(const std::source_location& where);
    void Release(cam::twin::BufferRecord* rec, const std::source_location& where);
    bool Owns(const cam::twin::BufferRecord* rec) const;

    TPosition position_;
    int32_t depth_;
    int num_ = 0;
    cam::twin::BufferRecord records_[kMaxBuffers];
    cam::twin::BufferRecord* fifo_[kMaxBuffers] = {};
    int head_ = 0;
    int queued_ = 0;
};

class TBufBase {
public:
    template <typename T>
    LocalTensor<T> Get(const std::source_location where = std::source_location::current()) {
        CAM_TWIN_CHECK(record_.base != nullptr, "tbuf-uninit", "TBuf::Get before TPipe::InitBuffer", where);
        return LocalTensor<T>(reinterpret_cast<T*>(record_.base),
                              static_cast<uint32_t>(cam::twin::ElemsInBytes<T>(record_.bytes)), &record_);
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t count, const std::source_location where = std::source_location::current()) {
        CAM_TWIN_CHECK(record_.base != nullptr, "tbuf-uninit", "TBuf::Get before TPipe::InitBuffer", where);
        CAM_TWIN_CHECK(cam::twin::BytesOfElems<T>(count) <= record_.bytes, "ub-bounds",
                       "TBuf::Get of " + std::to_string(cam::twin::BytesOfElems<T>(count)) +
                           " bytes from a buffer of " + std::to_string(record_.bytes),
                       where);
        return LocalTensor<T>(reinterpret_cast<T*>(record_.base), count, &record_);
    }

protected:
    explicit TBufBase(TPosition pos) { record_.position = pos; }

private:
    friend class AscendC::TPipe;
    cam::twin::BufferRecord record_;
};

}  // namespace cam::twin

namespace AscendC {

template <TPosition pos, int32_t depth = 1>
class TQue : public cam::twin::TQueBase {
public:
    TQue() : TQueBase(pos, depth) {}
};

template <TPosition pos = TPosition::VECCALC>
class TBuf : public cam::twin::TBufBase {
public:
    TBuf() : TBufBase(pos) {}
};

inline int64_t GetBlockIdx() { return cam::twin::CurrentBlock().blockIdx; }
inline int64_t GetBlockNum() { return cam::twin::CurrentBlock().blockNum; }

}  // namespace AscendC
