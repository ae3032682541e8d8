// How the twin's CPU-path switches read their environment variable (CAM_TWIN_COPY in gm_copy.cpp, CAM_TWIN_CUBE in
// cube_kernels.cpp, CAM_TWIN_VECTOR in vector_simd.cpp): written once here so the three cannot drift apart.
// Unset, empty or "auto" takes the first path of the preference list this machine runs; a name the list does not
// hold, or a path the machine cannot run, comes back as an error the caller reports as its rule's violation at
// first use. Never a silent fallback: a test that forces a path must either run that path or fail.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace cam::twin {

template <typename Path>
struct EnvPath {
    Path path;          // on error: the last (fallback) path of the preference list
    std::string error;  // non-empty: the variable asked for something this machine cannot run
};

// preference: every path, best first; the last one is the fallback. name(p): p's spelling in the variable.
// supported(p): whether this machine may run p. unsupportedWhy: the message after "<var>=<value> but ".
template <typename Path, typename Name, typename Supported>
EnvPath<Path> ResolveEnvPath(const char* var, std::initializer_list<Path> preference, Name name,
                             Supported supported, const char* unsupportedWhy) {
    EnvPath<Path> r{*(preference.end() - 1), {}};
    const char* env = std::getenv(var);
    if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) {
        for (Path p : preference) {
            if (supported(p)) {
                r.path = p;
                break;
            }
        }
        return r;
    }
    for (Path p : preference) {
        if (std::strcmp(env, name(p)) == 0) {
            if (supported(p))
                r.path = p;
            else
                r.error = std::string(var) + "=" + env + " but " + unsupportedWhy;
            return r;
        }
    }
    std::string names = "auto";
    for (Path p : preference) names += std::string(", ") + name(p);
    r.error = std::string(var) + "='" + env + "' is not one of " + names;
    return r;
}

}  // namespace cam::twin
