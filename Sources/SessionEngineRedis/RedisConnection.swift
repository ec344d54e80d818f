internal import CSessionEngineRedis
import Dispatch
internal import SessionEngine

/// A reply of the server, copied out of hiredis's.
enum RedisValue: Sendable, Hashable {
    case string([UInt8])
    case status(String)
    case integer(Int64)
    case array([RedisValue])
    case null
    case error(String)

    /// The reply as text, for a bulk or status string.
    var text: String? {
        switch self {
        case .string(let bytes): String(decoding: bytes, as: UTF8.self)
        case .status(let text): text
        default: nil
        }
    }
}

/// One connection to the server, used by one command at a time on a thread of its own.
///
/// hiredis's calls block, each bounded by the connection's timeout, so they run on a serial queue of the connection's
/// own and never on the concurrency pool's threads. A command waits its turn, at most `maximumWaiting` of them; one
/// whose deadline has passed when its turn comes is not sent. A command that fails to get a reply drops the
/// connection, and the next one connects again (and authenticates, when configured).
final class RedisConnection: Sendable {
    struct Endpoint: Sendable {
        let host: String
        let port: Int
        let username: String?
        let password: String?
        let connectTimeout: Duration
        let commandTimeout: Duration
    }

    /// The hiredis connection, touched only on `queue`.
    private final class Handle: @unchecked Sendable {
        var connection: OpaquePointer?
    }

    private let endpoint: Endpoint
    private let queue = DispatchQueue(label: "SessionEngineRedis.connection")
    private let handle = Handle()
    private let waiting = SanitizedMutex(0)
    private let maximumWaiting: Int

    init(endpoint: Endpoint, maximumWaiting: Int = 64) {
        self.endpoint = endpoint
        self.maximumWaiting = maximumWaiting
    }

    deinit {
        // Every command's block holds the connection, so none is running: the handle is this object's alone.
        se_redis_close(handle.connection)
    }

    /// Runs one command, which must be sent before `deadline` on the continuous clock.
    ///
    /// - Parameters:
    ///   - arguments: The command and its arguments.
    ///   - deadline: When the command is no longer worth sending.
    /// - Returns: The server's reply; an error reply is a value, not a throw.
    /// - Throws: ``RedisCoordinatorError`` when the command could not be sent or got no reply.
    func run(_ arguments: [[UInt8]], before deadline: ContinuousClock.Instant) async throws(RedisCoordinatorError)
        -> RedisValue
    {
        let admitted = waiting.withLock { count -> Bool in
            guard count < maximumWaiting else { return false }
            count += 1
            return true
        }
        guard admitted else {
            throw RedisCoordinatorError(.busy, reason: "\(maximumWaiting) commands already wait for the connection")
        }
        let result = await withParkedContinuation {
            (continuation: UnsafeContinuation<Result<RedisValue, RedisCoordinatorError>, Never>) in
            queue.async {
                let result = self.perform(arguments, before: deadline)
                self.waiting.withLock { $0 -= 1 }
                continuation.resume(returning: result)
            }
        }
        return try result.get()
    }

    /// Sends a command on the queue, connecting first when there is no connection.
    private func perform(_ arguments: [[UInt8]], before deadline: ContinuousClock.Instant) -> Result<
        RedisValue, RedisCoordinatorError
    > {
        guard ContinuousClock.now < deadline else {
            return .failure(RedisCoordinatorError(.timedOut, reason: "the command's deadline passed while it waited"))
        }
        if handle.connection == nil {
            switch connect() {
            case .success(let connection): handle.connection = connection
            case .failure(let error): return .failure(error)
            }
        }
        let result = Self.send(arguments, on: handle.connection)
        if case .failure = result {
            se_redis_close(handle.connection)
            handle.connection = nil
        }
        return result
    }

    /// Connects and authenticates.
    private func connect() -> Result<OpaquePointer?, RedisCoordinatorError> {
        var error = [CChar](repeating: 0, count: 160)
        let connection = se_redis_connect(
            endpoint.host, Int32(endpoint.port), Int32(Self.milliseconds(endpoint.connectTimeout, atMost: 60_000)),
            Int32(Self.milliseconds(endpoint.commandTimeout, atMost: 60_000)), &error, error.count)
        guard let connection else {
            let reason = RedisConnection.text(of: error)
            return .failure(
                RedisCoordinatorError(.connectionFailed, reason: "\(endpoint.host):\(endpoint.port): \(reason)"))
        }
        guard let password = endpoint.password else { return .success(connection) }
        var auth: [[UInt8]] = [Array("AUTH".utf8)]
        if let username = endpoint.username { auth.append(Array(username.utf8)) }
        auth.append(Array(password.utf8))
        switch Self.send(auth, on: connection) {
        case .success(.status):
            return .success(connection)
        case .success:
            // The server's words are left out: a reply to AUTH is no place to look for anything but "OK".
            se_redis_close(connection)
            return .failure(
                RedisCoordinatorError(.authenticationFailed, reason: "the server refused the username or password"))
        case .failure(let failure):
            se_redis_close(connection)
            return .failure(failure)
        }
    }

    /// Sends a command on a connection and copies its reply.
    private static func send(_ arguments: [[UInt8]], on connection: OpaquePointer?) -> Result<
        RedisValue, RedisCoordinatorError
    > {
        var error = [CChar](repeating: 0, count: 160)
        let reply: UnsafeMutablePointer<se_redis_reply>? = withArguments(arguments) { argv, lengths in
            se_redis_command(connection, Int32(arguments.count), argv, lengths, &error, error.count)
        }
        guard let reply else {
            let reason = RedisConnection.text(of: error)
            return .failure(RedisCoordinatorError(.connectionLost, reason: reason.isEmpty ? "no reply" : reason))
        }
        defer { se_redis_free_reply(reply) }
        return copy(reply.pointee, depth: 0)
    }

    /// The reply as a value, refusing one deeper or larger than the coordinator's scripts return.
    private static func copy(_ reply: se_redis_reply, depth: Int) -> Result<RedisValue, RedisCoordinatorError> {
        let tooLarge = RedisCoordinatorError(.unexpectedReply, reason: "the reply is larger than a decision")
        switch reply.type {
        case Int32(SE_REDIS_REPLY_STRING), Int32(SE_REDIS_REPLY_STATUS),
            Int32(SE_REDIS_REPLY_ERROR):
            guard reply.len <= 65_536 else { return .failure(tooLarge) }
            let bytes =
                reply.str.map { pointer in
                    Array(UnsafeRawBufferPointer(start: pointer, count: reply.len))
                } ?? []
            switch reply.type {
            case Int32(SE_REDIS_REPLY_STRING): return .success(.string(bytes))
            case Int32(SE_REDIS_REPLY_STATUS): return .success(.status(String(decoding: bytes, as: UTF8.self)))
            default:
                // The server's words, shortened and without control characters, for an error's reason.
                let printable = bytes.prefix(200).map { $0 < 0x20 || $0 == 0x7F ? UInt8(ascii: " ") : $0 }
                return .success(.error(String(decoding: printable, as: UTF8.self)))
            }
        case Int32(SE_REDIS_REPLY_INTEGER):
            return .success(.integer(reply.integer))
        case Int32(SE_REDIS_REPLY_NIL):
            return .success(.null)
        case Int32(SE_REDIS_REPLY_ARRAY):
            guard depth < 2, reply.elements <= 16 else { return .failure(tooLarge) }
            var values: [RedisValue] = []
            for index in 0..<reply.elements {
                guard let element = reply.element?[index] else { return .failure(tooLarge) }
                switch copy(element.pointee, depth: depth + 1) {
                case .success(let value): values.append(value)
                case .failure(let error): return .failure(error)
                }
            }
            return .success(.array(values))
        default:
            return .failure(RedisCoordinatorError(.unexpectedReply, reason: "a reply of unknown type \(reply.type)"))
        }
    }

    /// Calls `body` with C arrays of the arguments' bytes and lengths.
    private static func withArguments<T>(
        _ arguments: [[UInt8]], _ body: (UnsafeMutablePointer<UnsafePointer<CChar>?>, UnsafePointer<Int>) -> T
    ) -> T {
        let lengths = arguments.map(\.count)
        let copies = arguments.map { bytes -> UnsafeMutablePointer<CChar> in
            let copy = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, bytes.count))
            for (index, byte) in bytes.enumerated() { copy[index] = CChar(bitPattern: byte) }
            return copy
        }
        defer { copies.forEach { $0.deallocate() } }
        var pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) }
        return pointers.withUnsafeMutableBufferPointer { argv in
            lengths.withUnsafeBufferPointer { body(argv.baseAddress!, $0.baseAddress!) }
        }
    }

    /// The text a C function wrote into `buffer`, up to its terminating zero.
    static func text(of buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A duration in whole milliseconds, at least one and at most `limit` (a duration never overflows on the way).
    static func milliseconds(_ duration: Duration, atMost limit: Int64) -> Int64 {
        let seconds = min(max(duration.components.seconds, 0), limit / 1000 + 1)
        let value = seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        return min(limit, max(1, value))
    }
}
