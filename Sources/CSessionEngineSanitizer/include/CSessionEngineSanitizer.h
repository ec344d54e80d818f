// Thread-sanitizer annotations for locks the sanitizer cannot see.
//
// On Linux, Synchronization.Mutex locks with a futex inside the precompiled Synchronization library, which the
// thread sanitizer does not instrument: it sees the accesses a lock protects but not the lock, and reports them as
// races. SessionEngine's lock calls these functions right after locking and right before unlocking, which gives the
// sanitizer the happens-before edge the lock provides. Without the sanitizer they do nothing.

#ifndef CSESSIONENGINE_SANITIZER_H
#define CSESSIONENGINE_SANITIZER_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SE_SANITIZER_THREAD_COMPILED 1
#endif
#endif
#if !defined(SE_SANITIZER_THREAD_COMPILED) && defined(__SANITIZE_THREAD__)
#define SE_SANITIZER_THREAD_COMPILED 1
#endif

#if defined(SE_SANITIZER_THREAD_COMPILED)

// C code compiled with -fsanitize=thread: the runtime is linked, call it directly.
void __tsan_acquire(void *address);
void __tsan_release(void *address);

static inline __attribute__((always_inline)) int se_sanitizer_thread_annotations_enabled(void) { return 1; }

static inline __attribute__((always_inline)) void se_sanitizer_acquire(const void *lock) {
    __tsan_acquire((void *)lock);
}

static inline __attribute__((always_inline)) void se_sanitizer_release(const void *lock) {
    __tsan_release((void *)lock);
}

#elif defined(__ELF__)

// Swift code, or C code built without the sanitizer. `swift build --sanitize=thread` instruments Swift code but does
// not tell the Clang importer, so `__has_feature(thread_sanitizer)` is false in these functions when Swift calls
// them. The hooks are weak references instead: they resolve to the sanitizer runtime when the executable links it,
// which every `--sanitize=thread` build does, and to null otherwise. A normal build then pays one load and one
// always-predicted branch per lock and per unlock, next to the lock's own atomic instructions.
void __tsan_acquire(void *address) __attribute__((weak));
void __tsan_release(void *address) __attribute__((weak));

static inline __attribute__((always_inline)) int se_sanitizer_thread_annotations_enabled(void) {
    return __tsan_acquire != 0 && __tsan_release != 0;
}

static inline __attribute__((always_inline)) void se_sanitizer_acquire(const void *lock) {
    if (__builtin_expect(__tsan_acquire != 0, 0)) {
        __tsan_acquire((void *)lock);
    }
}

static inline __attribute__((always_inline)) void se_sanitizer_release(const void *lock) {
    if (__builtin_expect(__tsan_release != 0, 0)) {
        __tsan_release((void *)lock);
    }
}

#else

// Other platforms need no annotations: on Apple platforms the sanitizer intercepts os_unfair_lock, which
// Synchronization.Mutex uses there, and Mach-O has no weak references to symbols that no image defines.
static inline __attribute__((always_inline)) int se_sanitizer_thread_annotations_enabled(void) { return 0; }

static inline __attribute__((always_inline)) void se_sanitizer_acquire(const void *lock) { (void)lock; }

static inline __attribute__((always_inline)) void se_sanitizer_release(const void *lock) { (void)lock; }

#endif

/// Whether this target's C sources were compiled with the thread sanitizer: true under
/// `swift build --sanitize=thread`. Tests compare it with `se_sanitizer_thread_annotations_enabled()` as Swift sees it.
int se_sanitizer_thread_sanitizer_compiled(void);

#ifdef __cplusplus
}
#endif

#endif
