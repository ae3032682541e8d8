// Code bisheng rejects must not compile against the twin either. Built with -fsyntax-only and -DCHECK=<name>;
// each `bad_*` must fail to compile and its `good_*` control must compile (tests/test_twin_enforcement.py).
#include "kernel_operator.h"

#include "../../kernels/common/kernel_frame.h"

#define IS(name) (CHECK_##name == CHECK)
#define CHECK_good_gm_addr 1
#define CHECK_bad_gm_addr 2
#define CHECK_good_event 3
#define CHECK_bad_event 4
#define CHECK_good_set_value 5
#define CHECK_bad_set_value 6
#define CHECK_good_pipe 7
#define CHECK_bad_pipe 8
#define CHECK_good_params 9
#define CHECK_bad_params 10
#define CHECK_good_kernel_frame 11
#define CHECK_bad_kernel_frame 12

// An op object of `bytes`: a kernel entry asserts its op against the stack budget (common/kernel_frame.h).
template <uint32_t bytes>
struct OpOf {
    uint8_t state[bytes];
};

__aicore__ inline void Check(uint8_t* raw) {
    (void)raw;
#if IS(good_gm_addr)
    GM_ADDR a = nullptr;
    GM_ADDR b = nullptr;
    (void)a, (void)b;
#elif IS(bad_gm_addr)
    GM_ADDR a = nullptr, b = nullptr;  // GM_ADDR is a macro: b is a uint8_t
    (void)a, (void)b;
#elif IS(good_event)
    AscendC::TPipe pipe;
    const AscendC::TEventID id = pipe.FetchEventID(AscendC::HardEvent::V_S);
    AscendC::SetFlag<AscendC::HardEvent::V_S>(id);
    AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID0);
#elif IS(bad_event)
    const AscendC::event_t id = 0;  // event_t is a global built-in, not in AscendC
    (void)id;
#elif IS(good_set_value)
    AscendC::GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(raw), 1);
    g.SetValue(0, 1);
#elif IS(bad_set_value)
    const AscendC::GlobalTensor<int32_t> g;
    g.SetValue(0, 1);  // SetValue is not const in the Ascend C header
#elif IS(good_pipe)
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::PipeBarrier<AscendC::PIPE_ALL>();  // as the Ascend C docs write it (TPipe constructor page)
#elif IS(bad_pipe)
    AscendC::PipeBarrier<AscendC::HardEvent::V_S>();  // an event is no pipe
#elif IS(good_params)
    AscendC::DataCopyExtParams p{1, 32u, 0, 0, 0};
    AscendC::DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
    (void)p, (void)pad;
#elif IS(bad_params)
    uint64_t len = 32;
    AscendC::DataCopyExtParams p{1, len, 0, 0, 0};  // the real constructor takes a uint32_t: narrowing
    (void)p;
#elif IS(good_kernel_frame)
    OpOf<cam::kernels::kKernelOpBudgetBytes> op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    (void)op;
#elif IS(bad_kernel_frame)
    OpOf<cam::kernels::kKernelOpBudgetBytes + 1> op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    (void)op;
#else
#error "unknown CHECK"
#endif
}
