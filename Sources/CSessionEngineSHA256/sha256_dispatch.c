// Run-time choice of the SHA-256 compression backend.

#include "CSessionEngineSHA256.h"

#include <stdlib.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#elif defined(__aarch64__) || defined(_M_ARM64)
#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_SHA2
#define HWCAP_SHA2 (1UL << 6)
#endif
#endif
#endif

int se_sha256_active_backend_cache = -1;

#if defined(__aarch64__) && defined(__APPLE__)
/// Whether the named `hw.optional` sysctl exists and is non-zero.
static int sysctl_flag(const char *name) {
    int value = 0;
    size_t size = sizeof(value);
    return sysctlbyname(name, &value, &size, NULL, 0) == 0 && value != 0;
}
#endif

static int detect_hardware_backend(void) {
#if defined(__x86_64__) || defined(_M_X64)
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return SE_SHA256_BACKEND_PORTABLE;
    }
    const int ssse3 = (ecx >> 9) & 1;
    const int sse41 = (ecx >> 19) & 1;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return SE_SHA256_BACKEND_PORTABLE;
    }
    const int sha = (ebx >> 29) & 1;
    return ssse3 && sse41 && sha ? SE_SHA256_BACKEND_X86_SHA_NI : SE_SHA256_BACKEND_PORTABLE;
#elif defined(__aarch64__) || defined(_M_ARM64)
#if defined(__APPLE__)
    return sysctl_flag("hw.optional.arm.FEAT_SHA256") || sysctl_flag("hw.optional.armv8_crypto")
               ? SE_SHA256_BACKEND_ARMV8_SHA2
               : SE_SHA256_BACKEND_PORTABLE;
#elif defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_SHA2) != 0 ? SE_SHA256_BACKEND_ARMV8_SHA2 : SE_SHA256_BACKEND_PORTABLE;
#elif defined(__ARM_FEATURE_SHA2)
    return SE_SHA256_BACKEND_ARMV8_SHA2;
#else
    return SE_SHA256_BACKEND_PORTABLE;
#endif
#else
    return SE_SHA256_BACKEND_PORTABLE;
#endif
}

int se_sha256_hardware_backend(void) {
    static int cached = -1;
    int backend = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (backend < 0) {
        // Detection is idempotent, so threads that race here store the same answer.
        backend = detect_hardware_backend();
        __atomic_store_n(&cached, backend, __ATOMIC_RELAXED);
    }
    return backend;
}

int se_sha256_resolve_active_backend(void) {
    const char *portable = getenv("SESSIONENGINE_PORTABLE_SHA256");
    const int forcePortable = portable != NULL && portable[0] != '\0' && !(portable[0] == '0' && portable[1] == '\0');
    const int backend = forcePortable ? SE_SHA256_BACKEND_PORTABLE : se_sha256_hardware_backend();
    __atomic_store_n(&se_sha256_active_backend_cache, backend, __ATOMIC_RELAXED);
    return backend;
}
