// The SHA-256 compression function on the CPU's SHA instructions, chosen at run time.
//
// x86_64 uses the SHA extensions (SHA-NI) and arm64 the ARMv8 SHA-2 instructions. The portable compression, and the
// reference the accelerated ones are tested against, is SessionEngine's pure-Swift one (Crypto/SHA256.swift).

#ifndef CSESSIONENGINE_SHA256_H
#define CSESSIONENGINE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The compression runs in portable code: the CPU has no SHA-256 instructions this library uses, or they are disabled.
#define SE_SHA256_BACKEND_PORTABLE 0
/// The compression runs on the x86 SHA extensions (SHA-NI, with SSSE3 and SSE4.1).
#define SE_SHA256_BACKEND_X86_SHA_NI 1
/// The compression runs on the ARMv8 SHA-2 instructions.
#define SE_SHA256_BACKEND_ARMV8_SHA2 2

/// The SHA-256 instructions this CPU offers: one of the `SE_SHA256_BACKEND_` values.
///
/// Detected once with `cpuid` on x86_64, and on arm64 with `getauxval(AT_HWCAP)` on Linux and Android or `sysctl`
/// on Apple platforms. The environment variable does not change this answer; see `se_sha256_active_backend`.
int se_sha256_hardware_backend(void);

/// Resolves and caches the backend the process uses; call `se_sha256_active_backend` instead.
int se_sha256_resolve_active_backend(void);

/// The cached answer of `se_sha256_resolve_active_backend`, or -1 before the first call.
extern int se_sha256_active_backend_cache;

/// The backend the process uses: the hardware backend, unless the environment variable
/// `SESSIONENGINE_PORTABLE_SHA256` is set to a value other than an empty string or `0`, which forces the portable one.
///
/// The environment is read on the first call; after it, the answer costs one relaxed atomic load.
static inline int se_sha256_active_backend(void) {
    int backend = __atomic_load_n(&se_sha256_active_backend_cache, __ATOMIC_RELAXED);
    if (__builtin_expect(backend < 0, 0)) {
        backend = se_sha256_resolve_active_backend();
    }
    return backend;
}

/// Compresses `blocks` consecutive 64-byte blocks at `data` (any alignment) into the eight chaining words at `state`
/// (`a` to `h`, native byte order) with this CPU's SHA-256 instructions.
///
/// Call it only when `se_sha256_hardware_backend()` is not `SE_SHA256_BACKEND_PORTABLE`; without the instructions it
/// traps.
void se_sha256_compress_hardware(uint32_t state[8], const void *data, size_t blocks);

#ifdef __cplusplus
}
#endif

#endif
