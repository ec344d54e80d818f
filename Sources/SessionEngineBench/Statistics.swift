import Foundation
import SessionEngine
import Synchronization

/// The rounds of one measurement, summarised by their median and spread.
struct Summary: Codable, Sendable {
    /// Every round's value, in measurement order.
    let rounds: [Double]
    let median: Double
    let minimum: Double
    let maximum: Double

    init(_ rounds: [Double]) {
        precondition(!rounds.isEmpty, "a summary needs at least one round")
        let sorted = rounds.sorted()
        self.rounds = rounds
        self.median = percentile(sorted, 0.5)
        self.minimum = sorted.first!
        self.maximum = sorted.last!
    }

    /// The range of the rounds relative to their median: `(max - min) / median`.
    var spread: Double { median == 0 ? 0 : (maximum - minimum) / median }
}

/// The value below which `fraction` of the sorted values lie, interpolating linearly between neighbours.
func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
    guard sorted.count > 1 else { return sorted.first ?? 0 }
    let position = fraction * Double(sorted.count - 1)
    let lower = Int(position.rounded(.down))
    let upper = min(lower + 1, sorted.count - 1)
    let weight = position - Double(lower)
    return sorted[lower] * (1 - weight) + sorted[upper] * weight
}

/// The arithmetic mean.
func mean(_ values: [Double]) -> Double {
    values.reduce(0, +) / Double(max(1, values.count))
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// The process's resident memory in bytes, from `VmRSS` in `/proc/self/status`; zero where that file is missing.
func residentMemory() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        if fields.count >= 2, let kibibytes = Double(fields[1]) { return kibibytes * 1024 }
    }
    return 0
}

/// Returns the allocator's free memory to the operating system (glibc's `malloc_trim`), so that a later rise in
/// resident memory measures new allocations rather than the reuse of memory freed earlier.
func releaseFreeMemory() {
    typealias Trim = @convention(c) (Int) -> Int32
    guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "malloc_trim") else { return }
    _ = unsafeBitCast(symbol, to: Trim.self)(0)
}

/// Keeps a computed value alive so the optimizer cannot drop the work that produced it.
let sink = Atomic<Int>(0)

/// Records `value` in ``sink``.
@inline(never)
func consume(_ value: Int) {
    sink.add(value, ordering: .relaxed)
}

/// What ``threadRates(threads:duration:batchSize:_:)`` measured.
struct ThreadRates: Sendable {
    /// Operations per second of each thread's own CPU time.
    var perThread: [Double]
    /// The share of the window the threads were on a CPU, averaged over the threads. Below one, the scheduler ran
    /// other work in between: with several threads, they then overlapped less than the figure suggests.
    var onCPU: Double

    /// The mean rate of the threads.
    var meanRate: Double { mean(perThread) }
}

/// Runs an operation on dedicated threads, outside the concurrency runtime's pool, and reports each thread's rate.
///
/// Every thread waits until all have started, then calls `batch` repeatedly for `duration` of wall time. `batch`
/// performs `batchSize` operations and returns a checksum that is kept so the work cannot be optimised away.
///
/// Rates are per second of the thread's own CPU time, that is per core: on a shared machine, time the scheduler
/// gives to other processes does not count against the operation.
func threadRates(
    threads: Int,
    duration: Duration,
    batchSize: Int,
    _ batch: @escaping @Sendable () -> Int
) async -> ThreadRates {
    await withCheckedContinuation { (continuation: CheckedContinuation<ThreadRates, Never>) in
        let results = SanitizedMutex<[(rate: Double, onCPU: Double)]>([])
        let barrier = ThreadBarrier(count: threads)
        for _ in 0..<threads {
            let thread = Thread {
                barrier.arriveAndWait()
                let start = ContinuousClock.now
                let startCPU = threadCPUTime()
                var operations = 0
                var checksum = 0
                var elapsed = Duration.zero
                repeat {
                    checksum &+= batch()
                    operations += batchSize
                    elapsed = start.duration(to: .now)
                } while elapsed < duration
                let cpu = threadCPUTime() - startCPU
                consume(checksum)
                let all = results.withLock { results -> [(rate: Double, onCPU: Double)]? in
                    results.append((Double(operations) / cpu, cpu / elapsed.seconds))
                    return results.count == threads ? results : nil
                }
                guard let all else { return }
                let onCPU = all.reduce(0) { $0 + $1.onCPU } / Double(threads)
                continuation.resume(returning: ThreadRates(perThread: all.map(\.rate), onCPU: onCPU))
            }
            thread.start()
        }
    }
}

/// The most of `starts` (in time order) that fall within any one second.
func peakInAnySecond(_ starts: [Duration]) -> Int {
    var peak = 0
    var first = 0
    for (index, time) in starts.enumerated() {
        while starts[first] <= time - .seconds(1) { first += 1 }
        peak = max(peak, index - first + 1)
    }
    return peak
}

/// Sleeps for `window` of real time and returns what `wakeUps` counted meanwhile, the process's CPU time and the
/// window's length, in seconds.
func idleWindow(_ window: Duration, wakeUps: () -> Int) async -> (wakeUps: Int, cpu: Double, seconds: Double) {
    let startWakeUps = wakeUps()
    let startCPU = processCPUTime()
    let start = ContinuousClock.now
    try? await Task.sleep(for: window)
    let seconds = start.duration(to: .now).seconds
    return (wakeUps() - startWakeUps, processCPUTime() - startCPU, seconds)
}

/// The CPU time the calling thread has used, in seconds.
func threadCPUTime() -> Double {
    cpuTime(CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time all of the process's threads have used, in seconds.
func processCPUTime() -> Double {
    cpuTime(CLOCK_PROCESS_CPUTIME_ID)
}

private func cpuTime(_ clock: clockid_t) -> Double {
    var time = timespec()
    clock_gettime(clock, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Releases a fixed number of threads together once all of them have arrived.
private final class ThreadBarrier: Sendable {
    private let remaining: Atomic<Int>

    init(count: Int) {
        remaining = Atomic(count)
    }

    /// Spins until every thread has arrived; only for the moment threads start, never for long waits.
    func arriveAndWait() {
        remaining.subtract(1, ordering: .acquiringAndReleasing)
        while remaining.load(ordering: .acquiring) > 0 {}
    }
}
