// Resolving a CANN library at run time (Ascend builds only): the runtime (backend_ascend.cpp, transport_ipc.cpp)
// and HCCL (transport_hccl.cpp) are dlopen'ed so libcam_aclnn loads where CANN is absent. Each caller lists its
// entry points once, as an X-macro of (member, symbol) pairs: CAM_DL_MEMBER declares each member typed from the
// library's own prototype (decltype(&aclrtMemcpyAsync) ...), so a prototype change is a compile error in the header
// check, not a crash; CAM_DL_LOAD_TABLE resolves every one by name.
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

// One table member per (member, symbol) of an entry-point list: `ENTRIES(CAM_DL_MEMBER)` inside the struct.
// (Further arguments of an entry, such as a twin stand-in's name, are the list owner's.)
#define CAM_DL_MEMBER(member, symbol, ...) decltype(&symbol) member = nullptr;
#define CAM_DL_RESOLVE_MEMBER(member, symbol, ...) \
    &&::cam::host::ResolveSymbol(lib, soname, what, #symbol, &table.member, &table.unavailable)

// A table (a struct with the ENTRIES members and `std::string unavailable`) with every entry resolved from
// `soname`; on the first one missing (or no library) `unavailable` says why and the table must not be used.
#define CAM_DL_LOAD_TABLE(Table, ENTRIES, soname_, what_)                     \
    [] {                                                                      \
        Table table;                                                          \
        const char* soname = soname_;                                         \
        const char* what = what_;                                             \
        void* lib = ::cam::host::OpenCannLibrary(soname, what, &table.unavailable); \
        if (lib != nullptr) (void)(true ENTRIES(CAM_DL_RESOLVE_MEMBER));      \
        return table;                                                         \
    }()

}  // namespace cam::host
