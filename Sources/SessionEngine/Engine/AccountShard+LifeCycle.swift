import Foundation

/// Running, shutting down and shutting down gracefully.
extension AccountShard {
    /// ``SessionEngine/run()``, for the shard's account: the engine's, or a pool's member's.
    func run() async throws {
        await waitUntilStopped(stopsOnCancellation: true)
        await beginShutdown()
    }

    /// ``SessionEngine/shutdown()``, for the shard's account: the engine's, or a pool's member's.
    func shutdown() async {
        await beginShutdown()
    }

    /// ``SessionEngine/shutdown(gracePeriod:)``, for the shard's account: the engine's, or a pool's member's.
    func shutdown(gracePeriod: Duration) async {
        requestShutdown(gracePeriod: gracePeriod)
        await waitUntilStopped()
    }

    /// Signs out, with the account-change hooks, and shuts down, as ``signOut()`` followed by ``shutdown()`` would,
    /// except that no account change can begin between the two: the sign-out becomes the shutdown in the same turn of
    /// the actor that begins it. A pool removes a member this way, so a call that reached the member as it left fails
    /// with `SHUT_DOWN` (and is retried on the account's next member) instead of signing the leaving member in again,
    /// whose hooks would then report a change from the account to itself.
    ///
    /// During a graceful shutdown no account change begins, and the sign-out with hooks that shuts the engine down is
    /// the grace period's end: it ends now, so the account still leaves with its hooks (and its work cancelled, as a
    /// sign-out's is). At any other time that input changes nothing.
    func signOutAndShutDown() async {
        requestAccountChange(to: nil)
        gracePeriodEnded()
        requestShutdown()
        await waitUntilStopped()
    }

    /// Begins a graceful shutdown, as ``shutdown(gracePeriod:)`` does, without waiting for it: a pool begins every
    /// account's at once and then waits for each.
    func requestShutdown(gracePeriod: Duration) {
        step(
            announcing: { actions in
                if !actions.isEmpty {
                    self.log(.info, "graceful shutdown began", ["gracePeriod": gracePeriod.readable])
                }
            },
            { $0.gracefulShutdownRequested(grace: gracePeriod, at: $1) }
        )
    }

    /// Waits until the engine has shut down, making its signal if no caller has waited before.
    ///
    /// The machine reaches `shutDown` only in the step whose `finishShutdown` opens that signal, so a caller that finds
    /// it there has nothing to wait for.
    ///
    /// - Parameter stopsOnCancellation: Whether cancelling the calling task ends the wait early.
    func waitUntilStopped(stopsOnCancellation: Bool = false) async {
        guard !life.machine.isShutDown else { return }
        let signal = life.stopped ?? OneShot<Void>()
        life.stopped = signal
        if stopsOnCancellation {
            _ = await signal.valueUnlessCancelled()
        } else {
            await signal.value()
        }
    }

    private func gracePeriodEnded() {
        step { $0.gracePeriodEnded(at: $1) }
    }

    private func beginShutdown() async {
        requestShutdown()
        await waitUntilStopped()
    }

    /// Begins a shutdown, as ``shutdown()`` does, without waiting for it: a pool begins every account's and then waits
    /// for each.
    func requestShutdown() {
        step(
            announcing: { decision in
                if case .began = decision { self.log(.info, "shutting down", [:]) }
            },
            { $0.shutdownRequested(at: $1) }
        )
    }

    /// What watches a graceful shutdown's grace period: its deadline's slot in the engine's deadline queue, and the
    /// task that waits for the running work to finish.
    struct GracePeriodWatch: Sendable {
        let deadline: DeadlineQueue<TimerTarget>.Token
        let drain: Task<Void, Never>
    }

    /// Watches a graceful shutdown's grace period: the first of the running work finishing and the grace period
    /// passing on the engine's clock reports its end to the machine.
    ///
    /// The grace period is a deadline in the engine's deadline queue, as a sign-in's is: no task sleeps for it, and
    /// `finishShutdown` gives its slot back.
    func startGracePeriod(_ grace: Duration) {
        let deadline = setDeadline(after: grace) { [weak self] in
            // Fired: a task of the engine's own holds it until the machine has heard, as a timer's firing does.
            guard let self else { return }
            _ = startTask { await self.gracePeriodEnded() }
        }
        let drain = startTask {
            // New work is refused, so this only waits for the work that was running, whose callers hold the engine
            // until it ends as well.
            await self.store.drain(before: .max)
            await self.gracePeriodEnded()
        }
        life.gracePeriod = OutOfLine(GracePeriodWatch(deadline: deadline, drain: drain))
    }
}
