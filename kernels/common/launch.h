// How a kernel is put on a stream. bisheng compiles the triple-chevron launch; g++ hands the same kernel to the
// twin, which runs it on the stream's worker thread as blockDim block threads. Each op's .cpp wraps its launch
// in a plain C++ function so host code never sees either form.
#pragma once

#if defined(__CCE__)
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)
#else
#include "twin/launch.h"
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() { kernel(__VA_ARGS__); })
#endif
