import Foundation
import SessionEngine

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A child process a test starts, run without blocking a thread of the Swift concurrency pool.
///
/// `readDataToEndOfFile()` or `waitUntilExit()` inside an async test holds one of the pool's few threads (two on a
/// two-core machine) for as long as the child runs, and every other test waits for it; reading standard output to
/// its end before standard error also deadlocks as soon as the child fills the standard-error pipe (64 KiB). Here a
/// thread of its own per child, outside the pool, writes the child's standard input and drains its standard output
/// and standard error together with `poll(2)`; the child's exit arrives through `Process.terminationHandler`. An async
/// wait (``firstLine(within:)``, ``finish(within:)``) parks on a continuation that this thread resumes.
///
/// Every wait has a wall-clock bound: a child is a real process, not the engine on the test clock, so a real-time
/// limit is legitimate there, and it turns a hung child into a clear failure instead of a stalled suite. Past the
/// bound, or once the child has written more than its output limit, the child's process group is killed and the wait
/// throws a ``Failure`` that names the child and says what happened. Cancelling a waiting task kills the child too.
final class ChildProcess: Sendable {
    /// How a finished child ended, with everything it wrote.
    struct Outcome: Sendable {
        /// The exit status, or the signal that ended the child.
        let status: Int32
        /// Whether the child exited or was ended by a signal.
        let reason: Process.TerminationReason
        /// What the child wrote to standard output.
        let output: Data
        /// What the child wrote to standard error.
        let error: Data

        /// ``output`` as text.
        var outputText: String { String(decoding: output, as: UTF8.self) }
        /// ``error`` as text.
        var errorText: String { String(decoding: error, as: UTF8.self) }
    }

    /// Why a wait for a child failed: the child's name, what happened, and how much it had written.
    struct Failure: Error, CustomStringConvertible {
        /// The whole message.
        let description: String
    }

    /// The most a child may write to standard output and standard error together: 4 MiB.
    static let defaultOutputLimit = 4 << 20

    /// The name failures give the child.
    let name: String
    private let process: Process
    private let channel: Channel

    private init(name: String, process: Process, channel: Channel) {
        self.name = name
        self.process = process
        self.channel = channel
    }

    /// Runs `executable` to its end and returns how it ended.
    ///
    /// - Parameters:
    ///   - executable: The program.
    ///   - arguments: Its arguments.
    ///   - environment: Its environment; the test process's when nil.
    ///   - name: The name failures give the child; the executable's file name when nil.
    ///   - input: Written to the child's standard input, which is then closed.
    ///   - timeLimit: How long the child may run before it is killed and this throws.
    ///   - outputLimit: How many bytes the child may write before it is killed and this throws.
    /// - Returns: The child's status and everything it wrote.
    /// - Throws: What `Process.run()` throws when the child cannot start, a ``Failure`` when it outlives
    ///   `timeLimit` or writes more than `outputLimit` bytes, `CancellationError` when the task is cancelled.
    static func run(
        _ executable: URL,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        name: String? = nil,
        input: Data = Data(),
        timeLimit: Duration = .seconds(30),
        outputLimit: Int = defaultOutputLimit
    ) async throws -> Outcome {
        let child = try launch(
            executable, arguments: arguments, environment: environment, name: name, input: input,
            outputLimit: outputLimit)
        return try await child.finish(within: timeLimit)
    }

    /// Starts `executable` and returns at once.
    ///
    /// - Parameters:
    ///   - executable: The program.
    ///   - arguments: Its arguments.
    ///   - environment: Its environment; the test process's when nil.
    ///   - name: The name failures give the child; the executable's file name when nil.
    ///   - input: Written to the child's standard input.
    ///   - keepsInputOpen: Whether standard input stays open after `input` until ``closeInput()``; otherwise it is
    ///     closed once `input` is written.
    ///   - outputLimit: How many bytes the child may write before it is killed and its waits throw.
    /// - Returns: The running child.
    /// - Throws: What `Process.run()` throws when the child cannot start.
    static func launch(
        _ executable: URL,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        name: String? = nil,
        input: Data = Data(),
        keepsInputOpen: Bool = false,
        outputLimit: Int = defaultOutputLimit
    ) throws -> ChildProcess {
        let name = name ?? executable.lastPathComponent
        let channel = try Channel(name: name, input: input, closesInput: !keepsInputOpen, outputLimit: outputLimit)
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        let standardInput = Pipe()
        let standardOutput = Pipe()
        let standardError = Pipe()
        process.standardInput = standardInput
        process.standardOutput = standardOutput
        process.standardError = standardError
        process.terminationHandler = { process in
            channel.exited(status: process.terminationStatus, reason: process.terminationReason)
        }
        try process.run()
        // The pump thread owns its own copies of the parent's ends (close-on-exec, so no later child inherits them)
        // and closes each when it is done with it; Foundation's handles are closed now.
        let descriptors = Channel.Descriptors(
            input: adopt(standardInput.fileHandleForWriting),
            output: adopt(standardOutput.fileHandleForReading),
            error: adopt(standardError.fileHandleForReading)
        )
        channel.started(pid: process.processIdentifier)
        let thread = Thread { channel.pump(descriptors) }
        thread.name = "ChildProcess \(name)"
        thread.start()
        return ChildProcess(name: name, process: process, channel: channel)
    }

    /// Waits until the child has printed a first line on standard output, and returns it without its newline.
    ///
    /// - Parameter limit: How long to wait before the child is killed and this throws.
    /// - Returns: The first line.
    /// - Throws: A ``Failure`` when the child closes standard output before a newline, outlives `limit` or writes
    ///   more than its output limit, `CancellationError` when the task is cancelled.
    func firstLine(within limit: Duration) async throws -> String {
        let snapshot = try await channel.wait(for: .line(nil), within: limit)
        let line = snapshot.output.prefix { $0 != UInt8(ascii: "\n") }
        return String(decoding: line, as: UTF8.self)
    }

    /// Waits until the child has printed `line`, a whole line, on standard output.
    ///
    /// - Parameters:
    ///   - line: The line, without its newline.
    ///   - limit: How long to wait before the child is killed and this throws.
    /// - Throws: As ``firstLine(within:)``.
    func printed(_ line: String, within limit: Duration) async throws {
        _ = try await channel.wait(for: .line(line), within: limit)
    }

    /// Waits until the child has printed at least `count` lines on standard output, and returns the first `count`.
    ///
    /// - Parameters:
    ///   - count: How many newlines standard output must hold.
    ///   - limit: How long to wait before the child is killed and this throws.
    /// - Returns: The first `count` lines, without their newlines.
    /// - Throws: As ``firstLine(within:)``.
    @discardableResult
    func printedLines(_ count: Int, within limit: Duration) async throws -> [String] {
        let snapshot = try await channel.wait(for: .lines(count), within: limit)
        return String(decoding: snapshot.output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .prefix(count).map(String.init)
    }

    /// Waits until the child has exited and closed its output, and returns how it ended.
    ///
    /// - Parameter limit: How long to wait before the child is killed and this throws.
    /// - Returns: The child's status and everything it wrote.
    /// - Throws: A ``Failure`` when the child outlives `limit` or writes more than its output limit,
    ///   `CancellationError` when the task is cancelled.
    func finish(within limit: Duration) async throws -> Outcome {
        let snapshot = try await channel.wait(for: .exit, within: limit)
        guard let exit = snapshot.exit else { preconditionFailure("a finished child without an exit") }
        return Outcome(status: exit.status, reason: exit.reason, output: snapshot.output, error: snapshot.error)
    }

    /// The child's process ID: the leader of its process group, and the program itself when `/bin/sh` `exec`s it.
    var processIdentifier: pid_t { process.processIdentifier }

    /// Writes `data` to the child's standard input after what is still pending; nothing once the input is closed.
    func sendInput(_ data: Data) {
        channel.appendInput(data)
    }

    /// Closes the child's standard input once what was given at launch is written.
    func closeInput() {
        channel.closeInput()
    }

    /// Sends `SIGTERM` to the child's process group, if the child is still running.
    func terminate() {
        channel.signal(SIGTERM)
    }

    /// Sends `SIGKILL` to the child's process group, if the child is still running.
    func kill() {
        channel.signal(SIGKILL)
    }

    /// A duplicate of `handle`'s descriptor that is closed on exec; `handle` itself is closed.
    private static func adopt(_ handle: FileHandle) -> Int32 {
        let descriptor = fcntl(handle.fileDescriptor, F_DUPFD_CLOEXEC, 0)
        precondition(descriptor >= 0, "fcntl(F_DUPFD_CLOEXEC) failed: errno \(errno)")
        try? handle.close()
        return descriptor
    }
}

extension ChildProcess {
    /// What a wait waits for.
    fileprivate enum Goal {
        /// A line on standard output: any line, or the given one.
        case line(String?)
        /// At least this many lines on standard output.
        case lines(Int)
        /// The child's exit, with both its output pipes at their end.
        case exit
    }

    /// What the child has done so far.
    fileprivate struct Snapshot: Sendable {
        let output: Data
        let error: Data
        let exit: (status: Int32, reason: Process.TerminationReason)?
    }

    /// Why the child was given up on.
    fileprivate enum Fault {
        case timedOut(Goal, Duration)
        case tooMuchOutput(Int)
        case closedOutputBeforeALine
        case cancelled
    }

    /// A parked wait.
    fileprivate struct Waiter {
        let goal: Goal
        let deadline: ContinuousClock.Instant
        let limit: Duration
        let continuation: CheckedContinuation<Snapshot, any Error>
    }

    /// What one turn of the pump must do after the state is updated, outside the lock.
    fileprivate struct Actions {
        /// Waits that are decided, with their results.
        var resumptions: [(CheckedContinuation<Snapshot, any Error>, Result<Snapshot, any Error>)] = []
        /// A process group to kill.
        var kill: pid_t?
        /// Whether to close the child's standard input now.
        var closesInput = false
        /// Whether to give up on output pipes still open long after the child was killed.
        var abandonsOutput = false
        /// Which descriptors to poll.
        var pollsOutput = false
        var pollsError = false
        var pollsInput = false
        /// How long to poll; forever when nil.
        var timeout: Duration?
        /// Whether the child has exited and its output is read: the pump is done.
        var done = false
    }

    /// The child's state, decided purely under the lock; every side effect is an ``Actions`` field.
    fileprivate struct State {
        let name: String
        let outputLimit: Int
        var pid: pid_t = 0
        var output = Data()
        var error = Data()
        var outputOpen = true
        var errorOpen = true
        var pendingInput: Data
        var inputOpen = true
        var closesInput: Bool
        var exit: (status: Int32, reason: Process.TerminationReason)?
        var fault: Fault?
        var killedAt: ContinuousClock.Instant?
        var waiters: [Int: Waiter] = [:]
        var cancelled: Set<Int> = []
        var nextWaiter = 0

        /// How long after a kill output pipes that are still open (held by a process outside the group) are
        /// abandoned.
        static let abandonAfterKill: Duration = .seconds(5)

        var snapshot: Snapshot { Snapshot(output: output, error: error, exit: exit) }

        /// Gives up on the child: records `fault` (the first one stands) and kills it if it still runs.
        mutating func giveUp(_ fault: Fault, now: ContinuousClock.Instant) -> pid_t? {
            if self.fault == nil { self.fault = fault }
            guard exit == nil, killedAt == nil, pid > 0 else { return nil }
            killedAt = now
            return pid
        }

        /// The result of a wait for `goal` now, or nil while it must go on waiting; past the deadline the child is
        /// given up on and `kill` names its process group.
        mutating func verdict(
            _ goal: Goal, deadline: ContinuousClock.Instant, limit: Duration, now: ContinuousClock.Instant,
            kill: inout pid_t?
        ) -> Result<Snapshot, any Error>? {
            if let fault { return .failure(failure(fault)) }
            switch goal {
            case .line(let text):
                // The line is there, or can never come.
                if let text {
                    var lines = Data([UInt8(ascii: "\n")])
                    lines.append(output)
                    if lines.range(of: Data("\n\(text)\n".utf8)) != nil { return .success(snapshot) }
                } else if output.contains(UInt8(ascii: "\n")) {
                    return .success(snapshot)
                }
                if !outputOpen { return .failure(failure(.closedOutputBeforeALine)) }
            case .lines(let count):
                if output.lazy.filter({ $0 == UInt8(ascii: "\n") }).count >= count { return .success(snapshot) }
                if !outputOpen { return .failure(failure(.closedOutputBeforeALine)) }
            case .exit:
                // The child is gone and everything it wrote is read.
                if exit != nil, !outputOpen, !errorOpen { return .success(snapshot) }
            }
            guard now >= deadline else { return nil }
            kill = giveUp(.timedOut(goal, limit), now: now) ?? kill
            return .failure(failure(fault ?? .timedOut(goal, limit)))
        }

        /// One turn of the pump: decide every parked wait, and say what to poll and for how long.
        mutating func step(now: ContinuousClock.Instant) -> Actions {
            var actions = Actions()
            for (id, waiter) in waiters {
                var kill: pid_t?
                guard
                    let result = verdict(
                        waiter.goal, deadline: waiter.deadline, limit: waiter.limit, now: now, kill: &kill)
                else { continue }
                waiters[id] = nil
                actions.kill = kill ?? actions.kill
                actions.resumptions.append((waiter.continuation, result))
            }
            if inputOpen, pendingInput.isEmpty, closesInput || exit != nil {
                inputOpen = false
                actions.closesInput = true
            }
            if let killedAt, outputOpen || errorOpen {
                // A killed group's pipes close at once; one held open past the grace belongs to an escaped process.
                if now - killedAt >= Self.abandonAfterKill {
                    outputOpen = false
                    errorOpen = false
                    actions.abandonsOutput = true
                } else {
                    actions.timeout = killedAt + Self.abandonAfterKill - now
                }
            }
            if exit != nil, !outputOpen, !errorOpen {
                // Every goal is decidable now, so no wait is left parked.
                precondition(waiters.isEmpty, "a wait left parked after the child finished")
                actions.done = true
                return actions
            }
            actions.pollsOutput = outputOpen
            actions.pollsError = errorOpen
            actions.pollsInput = inputOpen && !pendingInput.isEmpty
            for waiter in waiters.values {
                let left = max(.zero, waiter.deadline - now)
                actions.timeout = min(actions.timeout ?? left, left)
            }
            return actions
        }

        /// Takes `count` bytes the child wrote; past the output limit the child is given up on and they are dropped.
        mutating func received(_ bytes: UnsafeRawBufferPointer, fromError: Bool, now: ContinuousClock.Instant)
            -> pid_t?
        {
            guard output.count + error.count + bytes.count <= outputLimit else {
                return giveUp(.tooMuchOutput(outputLimit), now: now)
            }
            if fromError { error.append(contentsOf: bytes) } else { output.append(contentsOf: bytes) }
            return nil
        }

        /// The failure a wait throws for `fault`.
        func failure(_ fault: Fault) -> any Error {
            let what: String
            switch fault {
            case .timedOut(.line(let text), let limit):
                let line = text.map { "the line \"\($0)\"" } ?? "a line"
                what = "did not print \(line) within \(limit), so it was killed"
            case .timedOut(.lines(let count), let limit):
                what = "did not print \(count) lines within \(limit), so it was killed"
            case .timedOut(.exit, let limit): what = "did not exit within \(limit), so it was killed"
            case .tooMuchOutput(let limit): what = "wrote more than \(limit) bytes, so it was killed"
            case .closedOutputBeforeALine: what = "closed its standard output before printing a line"
            case .cancelled: return CancellationError()
            }
            var message = "\(name) \(what)"
            if let exit { message += " (it ended with \(exit.reason == .exit ? "status" : "signal") \(exit.status))" }
            message += "; it wrote \(output.count) bytes to standard output and \(error.count) to standard error"
            if !error.isEmpty {
                message += ", ending: " + String(decoding: error.suffix(1024), as: UTF8.self)
            }
            return Failure(description: message)
        }
    }

    /// The state shared by the waits, the termination handler and the pump thread, with the pipe that wakes the pump.
    fileprivate final class Channel: Sendable {
        /// The parent's ends of the child's pipes, owned by the pump thread.
        struct Descriptors: Sendable {
            let input: Int32
            let output: Int32
            let error: Int32
        }

        private let state: SanitizedMutex<State>
        /// The pump polls this pipe's read end; anything that changes what the pump must do writes a byte to it.
        private let wakeRead: Int32
        private let wakeWrite: Int32

        init(name: String, input: Data, closesInput: Bool, outputLimit: Int) throws {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else { throw Failure(description: "pipe() failed: errno \(errno)") }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
            wakeRead = ends[0]
            wakeWrite = ends[1]
            state = SanitizedMutex(
                State(name: name, outputLimit: outputLimit, pendingInput: input, closesInput: closesInput))
        }

        deinit {
            close(wakeRead)
            close(wakeWrite)
        }

        /// Wakes the pump so that it decides again.
        func wake() {
            var byte: UInt8 = 1
            // A full pipe already holds a wake-up; nothing else can fail here.
            _ = write(wakeWrite, &byte, 1)
        }

        func started(pid: pid_t) {
            state.withLock { $0.pid = pid }
        }

        func exited(status: Int32, reason: Process.TerminationReason) {
            state.withLock { $0.exit = (status, reason) }
            wake()
        }

        func closeInput() {
            state.withLock { $0.closesInput = true }
            wake()
        }

        func appendInput(_ data: Data) {
            state.withLock { state in
                if state.inputOpen { state.pendingInput.append(data) }
            }
            wake()
        }

        func signal(_ signal: Int32) {
            let pid = state.withLock { state in state.exit == nil && state.pid > 0 ? state.pid : nil }
            if let pid { signalGroup(pid, signal) }
        }

        /// Parks until `goal` is reached, the child is given up on, or `limit` has passed.
        func wait(for goal: Goal, within limit: Duration) async throws -> Snapshot {
            let id = state.withLock { state in
                state.nextWaiter += 1
                return state.nextWaiter
            }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let now = ContinuousClock.now
                    var kill: pid_t?
                    let decided = state.withLock { state -> Result<Snapshot, any Error>? in
                        if state.cancelled.remove(id) != nil {
                            kill = state.giveUp(.cancelled, now: now)
                            return .failure(CancellationError())
                        }
                        let deadline = now + limit
                        if let result = state.verdict(goal, deadline: deadline, limit: limit, now: now, kill: &kill) {
                            return result
                        }
                        state.waiters[id] = Waiter(
                            goal: goal, deadline: deadline, limit: limit, continuation: continuation)
                        return nil
                    }
                    if let kill { signalGroup(kill, SIGKILL) }
                    if let decided { continuation.resume(with: decided) } else { wake() }
                }
            } onCancel: {
                let now = ContinuousClock.now
                let (waiter, kill) = state.withLock { state -> (Waiter?, pid_t?) in
                    guard let waiter = state.waiters.removeValue(forKey: id) else {
                        // Not parked yet (the registration sees this) or already decided (then this is unused).
                        state.cancelled.insert(id)
                        return (nil, nil)
                    }
                    return (waiter, state.giveUp(.cancelled, now: now))
                }
                if let kill { signalGroup(kill, SIGKILL) }
                waiter?.continuation.resume(throwing: CancellationError())
                wake()
            }
        }

        /// The pump thread's loop: write the input, drain both output pipes, decide the waits, until the child has
        /// exited and its output is read.
        func pump(_ descriptors: Descriptors) {
            // Writing to a pipe whose reader has gone raises SIGPIPE on the writing thread; blocked here, the write
            // fails with EPIPE instead of ending the test process.
            var blocked = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &blocked, nil)
            _ = fcntl(descriptors.input, F_SETFL, fcntl(descriptors.input, F_GETFL) | O_NONBLOCK)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 1)
            defer { buffer.deallocate() }
            var open = (input: true, output: true, error: true)
            func closeOutputs() {
                if open.output { close(descriptors.output) }
                if open.error { close(descriptors.error) }
                open.output = false
                open.error = false
            }
            while true {
                let actions = state.withLock { $0.step(now: .now) }
                if let pid = actions.kill { signalGroup(pid, SIGKILL) }
                for (continuation, result) in actions.resumptions { continuation.resume(with: result) }
                if actions.closesInput, open.input {
                    close(descriptors.input)
                    open.input = false
                }
                if actions.abandonsOutput { closeOutputs() }
                if actions.done {
                    if open.input { close(descriptors.input) }
                    closeOutputs()
                    return
                }
                var polled = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
                if actions.pollsOutput {
                    polled.append(pollfd(fd: descriptors.output, events: Int16(POLLIN), revents: 0))
                }
                if actions.pollsError {
                    polled.append(pollfd(fd: descriptors.error, events: Int16(POLLIN), revents: 0))
                }
                if actions.pollsInput {
                    polled.append(pollfd(fd: descriptors.input, events: Int16(POLLOUT), revents: 0))
                }
                let timeout = actions.timeout.map(Self.milliseconds) ?? -1
                guard poll(&polled, nfds_t(polled.count), timeout) > 0 else { continue }
                for entry in polled where entry.revents != 0 {
                    switch entry.fd {
                    case wakeRead:
                        _ = read(wakeRead, buffer.baseAddress, buffer.count)
                    case descriptors.output, descriptors.error:
                        let fromError = entry.fd == descriptors.error
                        let count = read(entry.fd, buffer.baseAddress, buffer.count)
                        if count < 0, errno == EINTR || errno == EAGAIN { continue }
                        let now = ContinuousClock.now
                        let kill = state.withLock { state -> pid_t? in
                            guard count > 0 else {
                                if fromError { state.errorOpen = false } else { state.outputOpen = false }
                                return nil
                            }
                            return state.received(
                                UnsafeRawBufferPointer(rebasing: buffer[..<count]), fromError: fromError, now: now)
                        }
                        if count <= 0 {
                            close(entry.fd)
                            if fromError { open.error = false } else { open.output = false }
                        }
                        if let kill { signalGroup(kill, SIGKILL) }
                    default:
                        writeInput(to: descriptors.input)
                    }
                }
            }
        }

        /// Writes what the pipe takes of the pending input; a child that stopped reading gets no more.
        private func writeInput(to descriptor: Int32) {
            let chunk = state.withLock { $0.pendingInput.prefix(64 << 10) }
            let written = chunk.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR || errno == EAGAIN { return }
            state.withLock { state in
                if written < 0 { state.pendingInput = Data() } else { state.pendingInput.removeFirst(written) }
            }
        }

        private static func milliseconds(_ duration: Duration) -> Int32 {
            let (seconds, attoseconds) = duration.components
            let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
            return Int32(clamping: max(0, milliseconds))
        }
    }
}

/// Sends `signal` to the process group `group` leads (`Process` starts every child as the leader of its own group).
private func signalGroup(_ group: pid_t, _ signal: Int32) {
    _ = kill(-group, signal)
}
