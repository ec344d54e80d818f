internal import CSessionEngineCurl
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
/// The bytes go over a libcurl stream (`CSessionEngineCurl`), a plain TCP connection or TLS with the server's
/// certificate and name verified; hiredis writes the commands and reads the replies. Every call blocks, bounded by the
/// command's timeout, so they run on a serial queue of the connection's own and never on the concurrency pool's
/// threads. A command waits its turn, at most `maximumWaiting` of them; one whose deadline has passed when its turn
/// comes is not sent. A command that fails to get a reply drops the connection, and the next one connects again
/// (and authenticates, when configured).
final class RedisConnection: Sendable {
    struct Endpoint: Sendable {
        let host: String
        let port: Int
        let username: String?
        let password: String?
        let tls: RedisFleetCoordinator.Configuration.TLS?
        let connectTimeout: Duration
        let commandTimeout: Duration
    }

    /// The stream, its reader and the buffer replies are received into, touched only on `queue`.
    private final class Handle: @unchecked Sendable {
        var stream: OpaquePointer?
        var reader: OpaquePointer?
        var buffer = [UInt8](repeating: 0, count: 16_384)

        func close() {
            se_curl_stream_close(stream)
            se_redis_reader_free(reader)
            stream = nil
            reader = nil
        }
    }

    /// The most a reply may take on the wire; the coordinator's scripts return a few hundred bytes.
    static let largestReply = 1 << 20

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
        handle.close()
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
        // The command, and the AUTH of a connection made for it, within one command timeout.
        let commandDeadline = ContinuousClock.now.advanced(by: endpoint.commandTimeout)
        if handle.stream == nil, case .failure(let error) = connect(authenticatingBefore: commandDeadline) {
            return .failure(error)
        }
        let result = exchange(arguments, before: commandDeadline)
        if case .failure = result { handle.close() }
        return result
    }

    /// Connects, within the connect timeout, and authenticates before `deadline`.
    private func connect(authenticatingBefore deadline: ContinuousClock.Instant) -> Result<Void, RedisCoordinatorError>
    {
        var error = [CChar](repeating: 0, count: 200)
        // An address with colons is IPv6, which a URL writes in brackets; the host was checked to hold nothing a
        // URL would read as a path, a user or a port.
        let host = endpoint.host.contains(":") ? "[\(endpoint.host)]" : endpoint.host
        let url = "\(endpoint.tls == nil ? "http" : "https")://\(host):\(endpoint.port)"
        let tls = endpoint.tls
        // A trust's bundle is `nil` for exactly the system's; the configuration refused one libcurl cannot take.
        let bundle = tls?.trust.bundle
        let stream = url.withCString { url in
            bundle.withBytesOrNone { pem in
                withOptionalCString(tls?.certificateFile) { certificate in
                    withOptionalCString(tls?.keyFile) { key in
                        var options = se_curl_stream_options(
                            url: url,
                            connect_timeout_ms: Int(Self.milliseconds(endpoint.connectTimeout, atMost: 60_000)),
                            ca_pem: pem.baseAddress, ca_pem_length: pem.count,
                            ca_include_system: tls?.trust.includesSystem == true ? 1 : 0, certificate_file: certificate,
                            key_file: key)
                        return se_curl_stream_open(&options, &error, error.count)
                    }
                }
            }
        }
        guard let stream else {
            let reason = RedisConnection.text(of: error)
            return .failure(
                RedisCoordinatorError(.connectionFailed, reason: "\(endpoint.host):\(endpoint.port): \(reason)"))
        }
        guard let reader = se_redis_reader_create() else {
            se_curl_stream_close(stream)
            return .failure(RedisCoordinatorError(.libraryMissing, reason: "hiredis could not make a reader"))
        }
        handle.stream = stream
        handle.reader = reader
        guard let password = endpoint.password else { return .success(()) }
        var auth: [[UInt8]] = [Array("AUTH".utf8)]
        if let username = endpoint.username { auth.append(Array(username.utf8)) }
        auth.append(Array(password.utf8))
        switch exchange(auth, before: deadline) {
        case .success(.status):
            return .success(())
        case .success:
            // The server's words are left out: a reply to AUTH is no place to look for anything but "OK".
            handle.close()
            return .failure(
                RedisCoordinatorError(.authenticationFailed, reason: "the server refused the username or password"))
        case .failure(let failure):
            handle.close()
            return .failure(failure)
        }
    }

    /// Sends a command on the open connection and reads its reply, the two before `deadline`. A server that sends
    /// more than the reply (a hostile one) loses the connection after it, so nothing it sent answers a later command.
    private func exchange(_ arguments: [[UInt8]], before deadline: ContinuousClock.Instant) -> Result<
        RedisValue, RedisCoordinatorError
    > {
        guard let stream = handle.stream, let reader = handle.reader else {
            return .failure(RedisCoordinatorError(.connectionLost, reason: "no connection"))
        }
        let timedOut = RedisCoordinatorError(.connectionLost, reason: "no reply within the command timeout")
        /// The milliseconds left before the deadline, or `nil` once it has passed.
        func left() -> Int? {
            let remaining = ContinuousClock.now.duration(to: deadline)
            return remaining > .zero ? Int(Self.milliseconds(remaining, atMost: 60_000)) : nil
        }
        func failure(_ code: Int, _ error: [CChar]) -> RedisCoordinatorError {
            guard code != Int(SE_CURL_STREAM_TIMED_OUT) else { return timedOut }
            let reason = RedisConnection.text(of: error)
            return RedisCoordinatorError(.connectionLost, reason: reason.isEmpty ? "no reply" : reason)
        }
        var error = [CChar](repeating: 0, count: 200)
        var command: UnsafeMutablePointer<CChar>?
        let length = Self.withArguments(arguments) { argv, lengths in
            se_redis_format(Int32(arguments.count), argv, lengths, &command)
        }
        guard length >= 0, let command else {
            return .failure(RedisCoordinatorError(.libraryMissing, reason: "hiredis could not write the command"))
        }
        defer { se_redis_free_command(command) }
        guard let sendWithin = left() else { return .failure(timedOut) }
        let sent = command.withMemoryRebound(to: UInt8.self, capacity: length) {
            se_curl_stream_send(stream, $0, length, sendWithin, &error, error.count)
        }
        guard sent == 0 else { return .failure(failure(Int(sent), error)) }
        var received = 0
        while true {
            var reply: UnsafeMutablePointer<se_redis_reply>?
            guard se_redis_reader_reply(reader, &reply, &error, error.count) == 0 else {
                return .failure(
                    RedisCoordinatorError(.unexpectedReply, reason: "not the Redis protocol: \(Self.text(of: error))"))
            }
            if let reply {
                defer { se_redis_free_reply(reply) }
                var extra: UnsafeMutablePointer<se_redis_reply>?
                if se_redis_reader_reply(reader, &extra, &error, error.count) != 0 || extra != nil {
                    se_redis_free_reply(extra)
                    handle.close()
                }
                return Self.copy(reply.pointee, depth: 0)
            }
            guard received < Self.largestReply else {
                return .failure(RedisCoordinatorError(.unexpectedReply, reason: "the reply is larger than a decision"))
            }
            guard let receiveWithin = left() else { return .failure(timedOut) }
            let failed = handle.buffer.withUnsafeMutableBufferPointer { buffer -> RedisCoordinatorError? in
                let count = se_curl_stream_receive(
                    stream, buffer.baseAddress!, buffer.count, receiveWithin, &error, error.count)
                guard count > 0 else { return failure(count, error) }
                received += count
                guard se_redis_reader_feed(reader, buffer.baseAddress!, count) == 0 else {
                    return RedisCoordinatorError(.unexpectedReply, reason: "the reply could not be read")
                }
                return nil
            }
            if let failed { return .failure(failed) }
        }
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

    /// Calls `body` with the text as a C string, or with `nil`.
    private func withOptionalCString<T>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
        guard let text else { return body(nil) }
        return text.withCString { body($0) }
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
