import Foundation

/// A benchmark peer in another runtime (Node, Python), driven one line at a time over its standard input and output.
///
/// The peer runs for the whole benchmark, so its start-up and warm-up are paid once, and its rounds can be
/// interleaved with the Swift rounds they are compared with. Reads block the calling thread; the signing benchmark
/// runs nothing else meanwhile.
final class PeerProcess {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffered = Data()

    /// Starts `command` through `/usr/bin/env`, so it is looked up on `PATH`.
    ///
    /// - Parameters:
    ///   - command: The program and its arguments.
    ///   - environment: Variables added to this process's environment for the peer, such as a secret that must not
    ///     appear among its arguments.
    ///   - standardError: Where the peer's standard error goes; nowhere unless given.
    /// - Returns: `nil` when the process cannot be started.
    init?(_ command: [String], environment: [String: String] = [:], standardError: FileHandle? = nil) {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardInput = input
        process.standardOutput = output
        process.standardError = standardError ?? FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return nil
        }
    }

    /// Sends one line and returns the peer's one-line answer, or `nil` when the peer has exited.
    ///
    /// A peer that has exited is not asked: its output may be held open by a copy another peer inherited, so that a
    /// read would wait for ever.
    func ask(_ line: String) -> String? {
        guard process.isRunning, (try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))) != nil
        else { return nil }
        return readLine()
    }

    /// Whether the peer is still running.
    var isRunning: Bool { process.isRunning }

    /// Closes the peer's input, which ends it, and waits for it to exit.
    ///
    /// Finish peers in the reverse order of starting them: a peer started later may hold an inherited copy of an
    /// earlier peer's input, which keeps that input open until the later peer exits.
    func finish() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    /// Reads the peer's next line, or `nil` when the peer has exited.
    func readLine() -> String? {
        while true {
            if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self)
                buffered = Data(buffered[buffered.index(after: newline)...])
                return line
            }
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { return nil }
            buffered.append(chunk)
        }
    }
}

extension PeerProcess {
    /// Asks `Scripts/fault-soak-backend.py` for its requests so far and its counts per Unix second since the last
    /// call, or `nil` when it does not answer with them.
    func backendStats() -> (requests: Int, perSecond: [(second: Int, count: Int)])? {
        struct Stats: Decodable {
            var requests: Int
            var perSecond: [[Int]]
        }
        guard let line = ask("stats"), let stats = try? JSONDecoder().decode(Stats.self, from: Data(line.utf8)) else {
            return nil
        }
        return (stats.requests, stats.perSecond.compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil })
    }
}

/// The peers' programs. Each reads a JSON configuration line, checks its signatures against the Swift signer's and
/// answers `ok`, then answers every `<set> <seconds>` line with the rate at which it signed that payload set in an
/// in-process loop of that many seconds, per second of the process's CPU time.
enum PeerScripts {
    static let node = """
        const { createHmac } = require("node:crypto");
        const readline = require("node:readline");
        let config;
        const sign = (payload) => createHmac("sha256", config.secret).update(payload).digest("hex");
        function rate(payloads, seconds) {
          const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
          const cpu = process.cpuUsage();
          let count = 0, sink = 0;
          do {
            for (const payload of payloads) sink += sign(payload).length;
            count += payloads.length;
          } while (process.hrtime.bigint() < end);
          const used = process.cpuUsage(cpu);
          return sink > 0 ? count / ((used.user + used.system) / 1e6) : 0;
        }
        readline.createInterface({ input: process.stdin }).on("line", (line) => {
          if (!config) {
            config = JSON.parse(line);
            const ok = config.sets.every((set) => set.payloads.every((p, i) => sign(p) === set.signatures[i]));
            rate(config.sets[0].payloads, 0.2);
            console.log(ok ? "ok" : "signature mismatch");
            return;
          }
          const [name, seconds] = line.split(" ");
          console.log(String(rate(config.sets.find((set) => set.name === name).payloads, Number(seconds))));
        });
        """

    static let python = """
        import hashlib, hmac, json, sys, time
        config = json.loads(sys.stdin.readline())
        key = config["secret"].encode()
        def sign(payload):
            return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        def rate(payloads, seconds):
            end = time.perf_counter() + seconds
            cpu = time.process_time()
            count = sink = 0
            while time.perf_counter() < end:
                for payload in payloads:
                    sink += len(sign(payload))
                count += len(payloads)
            return count / (time.process_time() - cpu) if sink else 0
        sets = {s["name"]: s for s in config["sets"]}
        ok = all(sign(p) == s["signatures"][i] for s in sets.values() for i, p in enumerate(s["payloads"]))
        rate(config["sets"][0]["payloads"], 0.2)
        print("ok" if ok else "signature mismatch", flush=True)
        for line in iter(sys.stdin.readline, ""):
            name, seconds = line.split()
            print(rate(sets[name]["payloads"], float(seconds)), flush=True)
        """
}

/// Runs a command to completion and returns its standard output, or `nil` when it cannot be started.
///
/// The command is started from a new thread whose signal mask is empty. A spawned process inherits the mask of the
/// thread that spawns it, the concurrency runtime's threads block most signals, and `openssl speed` ends each of its
/// timed loops with `SIGALRM`.
func commandOutput(_ command: [String]) async -> String? {
    await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
        let thread = Thread {
            var signals = sigset_t()
            sigemptyset(&signals)
            pthread_sigmask(SIG_SETMASK, &signals, nil)
            let process = Process()
            let output = Pipe()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = command
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else {
                continuation.resume(returning: nil)
                return
            }
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            continuation.resume(returning: process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil)
        }
        thread.start()
    }
}
