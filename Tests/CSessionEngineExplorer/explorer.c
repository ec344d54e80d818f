// The runtime hooks of the explorer; see CSessionEngineExplorer.h.

#include "CSessionEngineExplorer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define SE_SWIFTCALL __attribute__((swiftcall))

typedef SE_SWIFTCALL void (*se_original_global)(void *job);
typedef SE_SWIFTCALL void (*se_hook_global)(void *job, se_original_global original);

typedef SE_SWIFTCALL void (*se_original_delay)(unsigned long long delay, void *job);
typedef SE_SWIFTCALL void (*se_hook_delay)(unsigned long long delay, void *job, se_original_delay original);

typedef SE_SWIFTCALL void (*se_original_deadline)(long long sec, long long nsec, long long tsec, long long tnsec,
                                                  int clock, void *job);
typedef SE_SWIFTCALL void (*se_hook_deadline)(long long sec, long long nsec, long long tsec, long long tnsec,
                                              int clock, void *job, se_original_deadline original);

// SerialExecutorRef: the executor's identity and its witness table with flag bits; two words, returned in registers.
typedef struct se_executor_ref {
    void *identity;
    uintptr_t implementation;
} se_executor_ref;
typedef SE_SWIFTCALL se_executor_ref (*se_get_current_executor)(void);

static pthread_t explorer_thread;
static _Atomic int installed;
static se_explorer_enqueue_sink enqueue_sink;
static se_explorer_lock_sink lock_sink;
static se_get_current_executor get_current_executor;
typedef SE_SWIFTCALL void *(*se_get_current_task)(void);
static se_get_current_task get_current_task;
static _Atomic uint64_t foreign_enqueues;
static _Atomic uint64_t foreign_locks;
static _Atomic uint64_t original_calls;

int se_explorer_on_explorer_thread(void) {
    return atomic_load(&installed) && pthread_equal(pthread_self(), explorer_thread);
}

typedef SE_SWIFTCALL void (*se_enqueue_global)(void *job);

void se_explorer_enqueue_foreign(void *job) {
    static se_enqueue_global enqueue;
    if (enqueue == NULL) {
        enqueue = (se_enqueue_global)dlsym(RTLD_DEFAULT, "swift_task_enqueueGlobal");
    }
    if (enqueue == NULL) {
        // Cannot happen once install() succeeded (the runtime that exports the hooks exports this); count it anyway.
        atomic_fetch_add(&foreign_enqueues, 1);
        return;
    }
    enqueue(job);
}

static SE_SWIFTCALL void hook_global(void *job, se_original_global original) {
    if (se_explorer_on_explorer_thread()) {
        enqueue_sink(job, SE_EXPLORER_ROUTE_GLOBAL);
        return;
    }
    atomic_fetch_add(&foreign_enqueues, 1);
    atomic_fetch_add(&original_calls, 1);
    original(job);
}

static SE_SWIFTCALL void hook_delay(unsigned long long delay, void *job, se_original_delay original) {
    if (se_explorer_on_explorer_thread()) {
        enqueue_sink(job, SE_EXPLORER_ROUTE_DELAY);
        return;
    }
    atomic_fetch_add(&foreign_enqueues, 1);
    atomic_fetch_add(&original_calls, 1);
    original(delay, job);
}

static SE_SWIFTCALL void hook_deadline(long long sec, long long nsec, long long tsec, long long tnsec, int clock,
                                       void *job, se_original_deadline original) {
    if (se_explorer_on_explorer_thread()) {
        enqueue_sink(job, SE_EXPLORER_ROUTE_DEADLINE);
        return;
    }
    atomic_fetch_add(&foreign_enqueues, 1);
    atomic_fetch_add(&original_calls, 1);
    original(sec, nsec, tsec, tnsec, clock, job);
}

static SE_SWIFTCALL void hook_main(void *job, se_original_global original) {
    if (se_explorer_on_explorer_thread()) {
        enqueue_sink(job, SE_EXPLORER_ROUTE_MAIN);
        return;
    }
    atomic_fetch_add(&foreign_enqueues, 1);
    atomic_fetch_add(&original_calls, 1);
    original(job);
}

const char *se_explorer_install(se_explorer_enqueue_sink enqueue, se_explorer_lock_sink lock) {
    se_hook_global *global = (se_hook_global *)dlsym(RTLD_DEFAULT, "swift_task_enqueueGlobal_hook");
    if (global == NULL) {
        return "swift_task_enqueueGlobal_hook is not exported by the Swift runtime";
    }
    se_hook_delay *delay = (se_hook_delay *)dlsym(RTLD_DEFAULT, "swift_task_enqueueGlobalWithDelay_hook");
    if (delay == NULL) {
        return "swift_task_enqueueGlobalWithDelay_hook is not exported by the Swift runtime";
    }
    se_hook_deadline *deadline = (se_hook_deadline *)dlsym(RTLD_DEFAULT, "swift_task_enqueueGlobalWithDeadline_hook");
    if (deadline == NULL) {
        return "swift_task_enqueueGlobalWithDeadline_hook is not exported by the Swift runtime";
    }
    se_hook_global *main_executor = (se_hook_global *)dlsym(RTLD_DEFAULT, "swift_task_enqueueMainExecutor_hook");
    if (main_executor == NULL) {
        return "swift_task_enqueueMainExecutor_hook is not exported by the Swift runtime";
    }
    get_current_executor = (se_get_current_executor)dlsym(RTLD_DEFAULT, "swift_task_getCurrentExecutor");
    if (get_current_executor == NULL) {
        return "swift_task_getCurrentExecutor is not exported by the Swift runtime";
    }
    get_current_task = (se_get_current_task)dlsym(RTLD_DEFAULT, "swift_task_getCurrent");
    if (get_current_task == NULL) {
        return "swift_task_getCurrent is not exported by the Swift runtime";
    }
    if (*global != NULL || *delay != NULL || *deadline != NULL || *main_executor != NULL) {
        return "a concurrency hook is already installed (by another library, or install() ran twice)";
    }
    explorer_thread = pthread_self();
    enqueue_sink = enqueue;
    lock_sink = lock;
    atomic_store(&installed, 1);
    *global = hook_global;
    *delay = hook_delay;
    *deadline = hook_deadline;
    *main_executor = hook_main;
    return NULL;
}

int se_explorer_job_kind(const void *job) {
    // Job: HeapObject (metadata, refcounts: 16 bytes), SchedulerPrivate[2] (16 bytes), then JobFlags, whose low
    // byte is the JobKind (swift/ABI/Task.h, swift/ABI/MetadataValues.h).
    return ((const unsigned char *)job)[32];
}

uintptr_t se_explorer_job_word(const void *job, int offset) {
    return *(const uintptr_t *)((const unsigned char *)job + offset);
}

uint64_t se_explorer_foreign_enqueues(void) { return atomic_load(&foreign_enqueues); }

uint64_t se_explorer_foreign_locks(void) { return atomic_load(&foreign_locks); }

uint64_t se_explorer_original_calls(void) { return atomic_load(&original_calls); }

const void *se_explorer_current_executor(void) {
    if (get_current_executor == NULL) {
        return NULL;
    }
    return get_current_executor().identity;
}

typedef SE_SWIFTCALL void (*se_job_run)(void *job, se_executor_ref executor);

int se_explorer_run_job_without_task_executor(void *job) {
    static se_job_run run;
    if (run == NULL) {
        run = (se_job_run)dlsym(RTLD_DEFAULT, "swift_job_run");
        if (run == NULL) {
            return 0;
        }
    }
    se_executor_ref generic = {NULL, 0};
    run(job, generic);
    return 1;
}

static void *se_explorer_thread_body(void *body) {
    ((void (*)(void))body)();
    return NULL;
}

void se_explorer_run_on_other_thread(void (*body)(void)) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, se_explorer_thread_body, (void *)body) == 0) {
        pthread_join(thread, NULL);
    }
}

const void *se_explorer_current_task(void) {
    if (get_current_task == NULL) {
        return NULL;
    }
    return get_current_task();
}

uint64_t se_explorer_thread_id(void) { return (uint64_t)pthread_self(); }

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SE_EXPLORER_UNDER_TSAN 1
#endif
#endif
#if !defined(SE_EXPLORER_UNDER_TSAN) && defined(__SANITIZE_THREAD__)
#define SE_EXPLORER_UNDER_TSAN 1
#endif

#if !defined(SE_EXPLORER_UNDER_TSAN)

// SessionEngine's lock calls these through weak references (CSessionEngineSanitizer.h); a program linked with this
// target resolves them here, so every lock of the package reports its address to the explorer.
void __tsan_acquire(void *address) {
    if (!atomic_load(&installed)) {
        return;
    }
    if (!pthread_equal(pthread_self(), explorer_thread)) {
        atomic_fetch_add(&foreign_locks, 1);
        return;
    }
    lock_sink(address, se_explorer_current_executor());
}

void __tsan_release(void *address) { (void)address; }

int se_explorer_sees_locks(void) { return 1; }

#else

int se_explorer_sees_locks(void) { return 0; }

#endif
