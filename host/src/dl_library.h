// Resolving a CANN library at run time (Ascend builds only): the runtime (backend_ascend.cpp) and HCCL
// (transport_hccl.cpp) are dlopen'ed so libcam_aclnn loads where CANN is absent. The callers type every entry point
// from the library's own prototype (decltype(&aclrtMemcpyAsync) ...), so a prototype change is a compile error in
// the header check, not a crash.
#pragma once

#include <dlfcn.h>

#include <string>

namespace cam::host {

// Opens `soname` (the one already loaded, if torch_npu loaded it); nullptr with the reason in *why otherwise.
inline void* OpenCannLibrary(const char* soname, const char* what, std::string* why) {
    void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        const char* err = dlerror();
        *why = std::string(what) + " (" + soname + ") could not be loaded: " + (err ? err : "unknown reason") +
               " (source CANN's set_env.sh first)";
    }
    return lib;
}

// Points *fn at `name` in `lib`; false with the reason in *why when the library lacks it.
template <typename F>
bool ResolveSymbol(void* lib, const char* soname, const char* what, const char* name, F* fn, std::string* why) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    if (*fn == nullptr) *why = std::string(what) + " (" + soname + ") has no " + name;
    return *fn != nullptr;
}

}  // namespace cam::host
