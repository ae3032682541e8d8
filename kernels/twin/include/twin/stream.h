// A twin "device stream": an in-order task queue drained by one worker thread, so the host runs ahead of the
// device as it does on NPU. A task that fails poisons the stream until Synchronize reports the error. The worker
// runs block 0 of each launch itself (twin/block_pool.h); it and Synchronize may spin briefly before they sleep
// (CAM_TWIN_SPIN_NS). A caller that will synchronize at once can instead run a task itself while the stream is
// idle (RunHereScope): no hand-off at all (docs/twin.md, "Launch and the per-call path").
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace cam::twin {

// A task may throw this to report a status code of its own (e.g. a device-detected argument error);
// any other exception is reported with kTaskFault.
class TaskError : public std::runtime_error {
public:
    TaskError(int code, const std::string& message) : std::runtime_error(message), code(code) {}
    int code;
};

constexpr int kTaskFault = 1;

struct StreamError {
    int code = 0;  // 0: none
    std::string message;
};

class Stream {
public:
    Stream();
    ~Stream();  // drains what is queued, then joins the worker
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // The task runs on the worker; an exception it throws becomes the stream's error and later tasks are skipped.
    // Inside a RunHereScope for this stream, on the scope's thread, a task that finds the stream idle (nothing
    // queued or running, no unreported error, no capture) runs on the calling thread before Enqueue returns,
    // with the same error handling; otherwise it is queued as always.
    void Enqueue(std::function<void()> task);

    // Stream capture (host/src/graph_twin.cpp): while a sink is set, Enqueue hands each task to it instead of
    // queueing it, so a capturing stream records what it would have run, as a capturing NPU stream does. An empty
    // sink ends the redirection.
    void SetCaptureSink(std::function<void(std::function<void()>)> sink);

    // Waits until every task enqueued so far has run, at most timeoutSeconds. Returns false on timeout (the work
    // goes on). On return the first error since the last Synchronize, if any, is moved into *error.
    bool Synchronize(double timeoutSeconds, StreamError* error);

    // Tasks running on a caller right now (tests: the run-here path was taken).
    static uint64_t RunHereCount();

private:
    friend class RunHereScope;
    void Worker();
    static StreamError RunTask(const std::function<void()>& task);
    void Finished(StreamError failure);  // under mutex_: a task (worker's or caller's) ended

    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable idle_;
    std::deque<std::function<void()>> tasks_;
    bool running_ = false;  // a task is executing, on the worker or on a caller (RunHereScope)
    // Tasks queued or running; read without the lock by the brief spins that spare a hand-off its sleep.
    std::atomic<uint32_t> outstanding_{0};
    bool stopping_ = false;
    StreamError error_;
    std::function<void(std::function<void()>)> captureSink_;
    std::thread worker_;
};

// While alive, tasks this thread enqueues on `stream` may run on this thread (Stream::Enqueue). Only for a caller
// that synchronizes the stream right after, and only around work that waits on nothing outside its own launch
// (no peer flag, no host event): such work ends on its own, so running it here cannot turn the caller's bounded
// synchronize into an unbounded one. Work that may wait on another rank stays on the worker, where a
// synchronize can give up on it.
class RunHereScope {
public:
    explicit RunHereScope(void* stream);
    ~RunHereScope();
    RunHereScope(const RunHereScope&) = delete;
    RunHereScope& operator=(const RunHereScope&) = delete;

private:
    const Stream* previous_;
};

}  // namespace cam::twin
