import Foundation
import SessionEngine
import Synchronization

/// Samples the process's resident memory every 2 ms while a body runs, and reports the peak growth.
///
/// It reads `/proc/self/statm`, so it works on Linux only; ``isAvailable`` says whether it can.
enum MemoryProbe {
    /// Whether resident memory can be read here.
    static var isAvailable: Bool { residentBytes() != nil }

    /// The process's resident memory now, in bytes.
    static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The most another running process has held resident since it started (`VmHWM` in `/proc/PID/status`), in
    /// bytes; nil once it has exited or where `/proc` cannot be read.
    static func peakResidentBytes(ofProcess pid: pid_t) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count > 1, let kibibytes = Int(fields[1]) else { return nil }
            return kibibytes * 1024
        }
        return nil
    }

    /// Runs `body` and returns its result with the largest resident-memory growth seen while it ran.
    static func peakGrowth<T: Sendable>(during body: () async -> T) async -> (T, growth: Int) {
        let baseline = residentBytes() ?? 0
        let state = SanitizedMutex((peak: baseline, running: true))
        let sampler = Thread {
            while state.withLock({ $0.running }) {
                let now = residentBytes() ?? 0
                state.withLock { $0.peak = max($0.peak, now) }
                usleep(2000)
            }
        }
        sampler.start()
        let result = await body()
        let now = residentBytes() ?? 0
        let peak = state.withLock { state in
            state.running = false
            return max(state.peak, now)
        }
        return (result, peak - baseline)
    }
}
