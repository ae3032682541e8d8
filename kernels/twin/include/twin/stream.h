// A twin "device stream": an in-order task queue drained by one worker thread, so the host runs ahead of the
// device as it does on NPU. A task that fails poisons the stream until Synchronize reports the error. The worker
// runs block 0 of each launch itself (twin/block_pool.h); it and Synchronize spin briefly before they sleep, so a
// short op costs no sleeping hand-off when the CPU is free.
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
    void Enqueue(std::function<void()> task);

    // Stream capture (host/src/graph_twin.cpp): while a sink is set, Enqueue hands each task to it instead of
    // queueing it, so a capturing stream records what it would have run, as a capturing NPU stream does. An empty
    // sink ends the redirection.
    void SetCaptureSink(std::function<void(std::function<void()>)> sink);

    // Waits until every task enqueued so far has run, at most timeoutSeconds. Returns false on timeout (the work
    // goes on). On return the first error since the last Synchronize, if any, is moved into *error.
    bool Synchronize(double timeoutSeconds, StreamError* error);

private:
    void Worker();

    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable idle_;
    std::deque<std::function<void()>> tasks_;
    bool running_ = false;  // a task is executing
    // Tasks queued or running; read without the lock by the brief spins that spare a hand-off its sleep.
    std::atomic<uint32_t> outstanding_{0};
    bool stopping_ = false;
    StreamError error_;
    std::function<void(std::function<void()>)> captureSink_;
    std::thread worker_;
};

}  // namespace cam::twin
