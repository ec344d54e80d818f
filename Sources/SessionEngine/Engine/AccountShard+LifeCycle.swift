import Foundation

/// Running, shutting down and shutting down gracefully.
extension AccountShard {
    /// ``SessionEngine/run()``, for the shard's account: the engine's, or a pool's member's.
    func run(_ slot: Slot) async throws {
        await waitUntilStopped(slot, stopsOnCancellation: true)
        await beginShutdown(slot)
    }

    /// ``SessionEngine/shutdown()``, for the shard's account: the engine's, or a pool's member's.
    func shutdown(_ slot: Slot) async {
        await beginShutdown(slot)
    }

    /// ``SessionEngine/shutdown(gracePeriod:)``, for the shard's account: the engine's, or a pool's member's.
    func shutdown(_ slot: Slot, gracePeriod: Duration) async {
        requestShutdown(slot, gracePeriod: gracePeriod)
        await waitUntilStopped(slot)
    }

    /// Signs out, with the account-change hooks, and shuts down, as ``SessionEngine/signOut()`` followed by
    /// ``SessionEngine/shutdown()`` would, except that no account change can begin between the two: the sign-out
    /// becomes the shutdown in the same turn of the actor that begins it. A pool removes a member this way, so a call
    /// that reached the member as it left fails with `SHUT_DOWN` (and is retried on the account's next member) instead
    /// of signing the leaving member in again, whose hooks would then report a change from the account to itself.
    ///
    /// During a graceful shutdown no account change begins, and the sign-out with hooks that shuts the engine down is
    /// the grace period's end: it ends now, so the account still leaves with its hooks (and its work cancelled, as a
    /// sign-out's is). At any other time that input changes nothing.
    func signOutAndShutDown(_ slot: Slot) async {
        requestAccountChange(slot, to: nil)
        gracePeriodEnded(slot)
        requestShutdown(slot)
        await waitUntilStopped(slot)
    }

    /// Begins a graceful shutdown, as ``SessionEngine/shutdown(gracePeriod:)`` does, without waiting for it: a pool
    /// begins every account's at once and then waits for each.
    func requestShutdown(_ slot: Slot, gracePeriod: Duration) {
        step(
            slot,
            announcing: { actions in
                if !actions.isEmpty {
                    self.log(.info, "graceful shutdown began", ["gracePeriod": gracePeriod.readable])
                }
            },
            { $0.gracefulShutdownRequested(grace: gracePeriod, at: $1) }
        )
    }

    /// Waits until the account has shut down, making its signal if no caller has waited before.
    ///
    /// The machine reaches `shutDown` only in the step whose `finishShutdown` opens that signal, so a caller that finds
    /// it there, or finds the account's life ended, has nothing to wait for.
    ///
    /// - Parameters:
    ///   - slot: The account.
    ///   - stopsOnCancellation: Whether cancelling the calling task ends the wait early.
    func waitUntilStopped(_ slot: Slot, stopsOnCancellation: Bool = false) async {
        guard let index = lifeIndex(of: slot), !lives[index]!.machine.isShutDown else { return }
        let signal = lives[index]!.stopped ?? OneShot<Void>()
        lives[index]!.stopped = signal
        if stopsOnCancellation {
            _ = await signal.valueUnlessCancelled()
        } else {
            await signal.value()
        }
    }

    private func gracePeriodEnded(_ slot: Slot) {
        step(slot) { $0.gracePeriodEnded(at: $1) }
    }

    private func beginShutdown(_ slot: Slot) async {
        requestShutdown(slot)
        await waitUntilStopped(slot)
    }

    /// Begins a shutdown, as ``SessionEngine/shutdown()`` does, without waiting for it: a pool begins every account's
    /// and then waits for each.
    func requestShutdown(_ slot: Slot) {
        step(
            slot,
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
    func startGracePeriod(_ grace: Duration, for slot: Slot, at index: Int) {
        let deadline = setDeadline(after: grace) { [weak slot] in
            // Fired: a task of the account's own holds its slot until the machine has heard, as a timer's firing does.
            guard let slot else { return }
            _ = slot.shard.startTask(slot) { await slot.shard.gracePeriodEnded(slot) }
        }
        let drain = startTask(slot) {
            // New work is refused, so this only waits for the work that was running, whose callers hold the slot
            // until it ends as well.
            await slot.store.drain(before: .max)
            await self.gracePeriodEnded(slot)
        }
        lives[index]!.gracePeriod = OutOfLine(GracePeriodWatch(deadline: deadline, drain: drain))
    }
}
