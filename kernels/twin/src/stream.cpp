#include "twin/stream.h"

#include "twin/park.h"

#include <algorithm>
#include <chrono>
#include <exception>

namespace cam::twin {

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
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (captureSink_) {
            captureSink_(std::move(task));
            return;
        }
        tasks_.push_back(std::move(task));
        outstanding_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_one();
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
        wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping and drained
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        const bool poisoned = error_.code != 0;
        running_ = true;
        lock.unlock();
        StreamError failure;
        if (!poisoned) {
            try {
                task();
            } catch (const TaskError& e) {
                failure = {e.code, e.what()};
            } catch (const std::exception& e) {
                failure = {kTaskFault, e.what()};
            } catch (...) {
                failure = {kTaskFault, "unknown exception in a stream task"};
            }
        }
        lock.lock();
        running_ = false;
        outstanding_.fetch_sub(1, std::memory_order_release);
        if (failure.code != 0 && error_.code == 0) error_ = std::move(failure);
        if (tasks_.empty()) idle_.notify_all();
    }
}

}  // namespace cam::twin

#include "twin/launch.h"
#include "twin/runtime.h"

namespace cam::twin {

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel) {
    static_cast<Stream*>(stream)->Enqueue(
        [kernelName, blockDim, kernel = std::move(kernel)] { RunLaunch(kernelName, blockDim, kernel); });
}

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel,
                   LaunchWindows windows) {
    static_cast<Stream*>(stream)->Enqueue(
        [kernelName, blockDim, kernel = std::move(kernel), windows = std::move(windows)] {
            RunLaunch(kernelName, blockDim, kernel, &windows);
        });
}

void EnqueueHostTask(void* stream, std::function<void()> task) { static_cast<Stream*>(stream)->Enqueue(std::move(task)); }

}  // namespace cam::twin
