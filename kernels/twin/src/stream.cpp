#include "twin/stream.h"

#include "twin/park.h"

#include <algorithm>
#include <chrono>
#include <exception>

namespace cam::twin {

namespace {

// The stream this thread may run its own tasks on (RunHereScope), or null.
thread_local const Stream* tRunHere = nullptr;
std::atomic<uint64_t> gRunHere{0};

}  // namespace

RunHereScope::RunHereScope(void* stream) : previous_(tRunHere) { tRunHere = static_cast<const Stream*>(stream); }

RunHereScope::~RunHereScope() { tRunHere = previous_; }

uint64_t Stream::RunHereCount() { return gRunHere.load(std::memory_order_relaxed); }

StreamError Stream::RunTask(const std::function<void()>& task) {
    try {
        task();
    } catch (const TaskError& e) {
        return {e.code, e.what()};
    } catch (const std::exception& e) {
        return {kTaskFault, e.what()};
    } catch (...) {
        return {kTaskFault, "unknown exception in a stream task"};
    }
    return {};
}

Stream::Stream() : worker_([this] { Worker(); }) {}

Stream::~Stream() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
}

void Stream::Enqueue(std::function<void()> task) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (captureSink_) {
        captureSink_(std::move(task));
        return;
    }
    // Idle and not poisoned: nothing this task must wait for, nothing that would skip it. running_ keeps the
    // worker off the queue until this task ends, so tasks other threads enqueue meanwhile stay behind it and
    // Synchronize on any thread waits for it: stream order and error poisoning are the worker's, unchanged.
    if (tRunHere == this && tasks_.empty() && !running_ && error_.code == 0 && !stopping_) {
        running_ = true;
        outstanding_.fetch_add(1, std::memory_order_release);
        lock.unlock();
        gRunHere.fetch_add(1, std::memory_order_relaxed);
        StreamError failure = RunTask(task);
        lock.lock();
        Finished(std::move(failure));
        if (!tasks_.empty()) {
            lock.unlock();
            wake_.notify_one();
        }
        return;
    }
    tasks_.push_back(std::move(task));
    outstanding_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_one();
}

void Stream::Finished(StreamError failure) {
    running_ = false;
    outstanding_.fetch_sub(1, std::memory_order_release);
    if (failure.code != 0 && error_.code == 0) error_ = std::move(failure);
    if (tasks_.empty()) idle_.notify_all();
}

void Stream::SetCaptureSink(std::function<void(std::function<void()>)> sink) {
    std::lock_guard<std::mutex> lock(mutex_);
    captureSink_ = std::move(sink);
}

bool Stream::Synchronize(double timeoutSeconds, StreamError* error) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(std::min(timeoutSeconds, 1e7)));  // no int64 ns overflow
    // The spin is inside the bound too: a synchronize never waits past its timeout, however short.
    SpinUntil([&] {
        return outstanding_.load(std::memory_order_acquire) == 0 || std::chrono::steady_clock::now() >= deadline;
    }, SpinNs());
    std::unique_lock<std::mutex> lock(mutex_);
    const bool done = idle_.wait_until(lock, deadline, [this] { return tasks_.empty() && !running_; });
    if (!done) return false;
    if (error) *error = std::move(error_);
    error_ = StreamError{};
    return true;
}

void Stream::Worker() {
    TightenTimerSlack();  // this thread runs block 0 of every launch: its timed parks must end on time
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        if (tasks_.empty() && !stopping_) {
            lock.unlock();
            SpinUntil([this] { return outstanding_.load(std::memory_order_acquire) != 0; }, SpinNs());
            lock.lock();
        }
        // !running_: a caller may be running a task of this stream itself (RunHereScope); the queue waits for it.
        wake_.wait(lock, [this] { return !running_ && (stopping_ || !tasks_.empty()); });
        if (tasks_.empty()) return;  // stopping and drained
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        const bool poisoned = error_.code != 0;
        running_ = true;
        lock.unlock();
        StreamError failure = poisoned ? StreamError{} : RunTask(task);
        task = nullptr;  // what the task holds is released before Synchronize can return, as for a run-here task
        lock.lock();
        Finished(std::move(failure));
    }
}

}  // namespace cam::twin

#include "twin/launch.h"
#include "twin/runtime.h"

namespace cam::twin {

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel,
                   LaunchSchedule schedule) {
    static_cast<Stream*>(stream)->Enqueue([kernelName, blockDim, kernel = std::move(kernel), schedule] {
        RunLaunch(kernelName, blockDim, kernel, nullptr, schedule);
    });
}

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel,
                   LaunchSchedule schedule, LaunchWindows windows) {
    static_cast<Stream*>(stream)->Enqueue(
        [kernelName, blockDim, kernel = std::move(kernel), schedule, windows = std::move(windows)] {
            RunLaunch(kernelName, blockDim, kernel, &windows, schedule);
        });
}

void EnqueueHostTask(void* stream, std::function<void()> task) { static_cast<Stream*>(stream)->Enqueue(std::move(task)); }

}  // namespace cam::twin
