// The explorer's hooks into the Swift concurrency runtime.
//
// The runtime exports four hook variables (swift/Runtime/Concurrency.h, stdlib/public/Concurrency/
// ConcurrencyHooks.def): when one is set, the runtime calls it instead of its global executor. The explorer sets all
// four. Enqueues made on the explorer's thread go to the Swift sink (the explorer's run queue); an enqueue from any
// other thread is counted as foreign and handed to the runtime's original executor, so that the job is not lost and
// the run that saw it fails. The package's lock reports each acquisition through `__tsan_acquire`, which this target
// defines (outside thread-sanitizer builds), so the explorer learns every lock a job takes.

#ifndef CSESSIONENGINE_EXPLORER_H
#define CSESSIONENGINE_EXPLORER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// How a job reached a hook.
typedef enum se_explorer_route {
    /// swift_task_enqueueGlobal: a job ready to run now.
    SE_EXPLORER_ROUTE_GLOBAL = 0,
    /// swift_task_enqueueGlobalWithDelay: a job that asks for real time.
    SE_EXPLORER_ROUTE_DELAY = 1,
    /// swift_task_enqueueGlobalWithDeadline: a job that asks for a deadline on a real clock.
    SE_EXPLORER_ROUTE_DEADLINE = 2,
    /// swift_task_enqueueMainExecutor: a job for the main actor.
    SE_EXPLORER_ROUTE_MAIN = 3,
    /// The explorer's task executor: a job of a task that prefers it.
    SE_EXPLORER_ROUTE_TASK_EXECUTOR = 4,
} se_explorer_route;

/// Receives a job enqueued on the explorer's thread.
typedef void (*se_explorer_enqueue_sink)(void *job, int route);

/// Receives a lock acquisition made on the explorer's thread, with the executor the code runs on (its identity
/// pointer; null for the generic executor).
typedef void (*se_explorer_lock_sink)(const void *lock, const void *executor);

/// Installs the four hooks and the sinks; the calling thread becomes the explorer's thread.
///
/// Returns null on success, or a static string saying which runtime symbol is missing.
const char *se_explorer_install(se_explorer_enqueue_sink enqueue, se_explorer_lock_sink lock);

/// Hands a job that reached the explorer's task executor on another thread to the runtime's global executor (through
/// swift_task_enqueueGlobal, whose hook counts it as foreign), so that it is not lost and the run that saw it fails.
void se_explorer_enqueue_foreign(void *job);

/// Whether the calling thread is the explorer's thread.
int se_explorer_on_explorer_thread(void);

/// The job kind: the low byte of the job's flags (0 for an AsyncTask, 192 and above for runtime-private jobs such
/// as a default actor's processing job).
int se_explorer_job_kind(const void *job);

/// The pointer-sized word at `offset` bytes into `job` (for reading a runtime job's fields).
uintptr_t se_explorer_job_word(const void *job, int offset);

/// Jobs enqueued from a thread other than the explorer's since installation.
uint64_t se_explorer_foreign_enqueues(void);

/// Lock acquisitions on a thread other than the explorer's since installation.
uint64_t se_explorer_foreign_locks(void);

/// Times a hook handed a job to the runtime's original executor since installation.
uint64_t se_explorer_original_calls(void);

/// The identity of the executor the calling code runs on (swift_task_getCurrentExecutor), null for the generic one.
const void *se_explorer_current_executor(void);

/// The task running on the calling thread (swift_task_getCurrent), null outside a task.
const void *se_explorer_current_task(void);

/// The calling thread's identity, for checks that code ran on the explorer's thread.
uint64_t se_explorer_thread_id(void);

/// Whether the thread-sanitizer hooks are this target's (0 in a --sanitize=thread build, where the sanitizer's own
/// runtime defines them and the explorer sees no lock).
int se_explorer_sees_locks(void);

/// Runs `job` with no task executor and on the generic executor (swift_job_run), as the runtime's own global
/// executor would: the self-test's control for "inline hops become choice points". Returns 0 when swift_job_run is
/// missing.
int se_explorer_run_job_without_task_executor(void *job);

/// Runs `body` on a new thread and waits for it: the self-test's foreign enqueue.
void se_explorer_run_on_other_thread(void (*body)(void));

#ifdef __cplusplus
}
#endif

#endif
