import Dispatch
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The fetcher's own HTTP/1.1 transfer for plain `http` endpoints, over a non-blocking socket it owns.
///
/// It needs nothing but sockets, so plain `http` works wherever the fetcher does, and it is bounded the same way as
/// ``CurlTransfer``, which `https` uses: it reads the head (at most 16 KiB), refuses a compressed body or a
/// declared length past 64 KiB before reading any of it, then reads at most 64 KiB of body and closes the socket the
/// moment the limit, the deadline or a cancellation is reached. Its memory is the limit plus one 16 KiB read.
enum PlainHTTPTransfer {
    /// How often a blocked read looks at the deadline and at cancellation, in milliseconds.
    static let pollInterval = 20

    /// Sends the request and reads a response that passes ``ResponsePolicy``.
    ///
    /// The socket work runs on a thread of its own, so no cooperative thread blocks; the caller is resumed as soon
    /// as the outcome is known, and the thread closes the socket within ``pollInterval`` of a timeout or a
    /// cancellation.
    ///
    /// - Throws: ``SessionError`` for every refusal and failure, `CancellationError` when the caller is cancelled.
    static func perform(
        _ request: CheckedHTTPRequest,
        timeout: Duration,
        requiresNoStore: Bool,
        timeoutError: SessionError
    ) async throws -> HTTPTransferResult {
        let control = TransferControl()
        let deadline = ContinuousClock.now + timeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                control.install(continuation)
                DispatchQueue.global().async {
                    var connection = Connection(deadline: deadline, control: control, timeoutError: timeoutError)
                    do throws(SessionError) {
                        let result = try connection.exchange(request, requiresNoStore: requiresNoStore)
                        control.finish(.success(result))
                    } catch {
                        control.finish(.failure(error))
                    }
                    connection.close()
                }
            }
        } onCancel: {
            control.finish(.failure(CancellationError()))
        }
    }

    /// One connection: a socket, a read buffer, a deadline.
    private struct Connection {
        let deadline: ContinuousClock.Instant
        let control: TransferControl
        let timeoutError: SessionError
        private var socket: Int32 = -1
        private var buffer: [UInt8] = []
        private var start = 0
        private var atEnd = false

        init(deadline: ContinuousClock.Instant, control: TransferControl, timeoutError: SessionError) {
            self.deadline = deadline
            self.control = control
            self.timeoutError = timeoutError
        }

        mutating func close() {
            if socket >= 0 {
                _ = systemClose(socket)
                socket = -1
            }
        }

        private var available: Int { buffer.count - start }

        mutating func exchange(_ request: CheckedHTTPRequest, requiresNoStore: Bool) throws(SessionError)
            -> HTTPTransferResult
        {
            try connect(host: request.host, port: request.port)
            try send(request.bytes)
            var head = try readHead()
            var informational = 0
            while (100..<200).contains(head.status) && head.status != 101 {
                informational += 1
                guard informational <= ResponsePolicy.maximumInformationalResponses else {
                    throw ResponsePolicy.protocolError("sent too many informational responses")
                }
                head = try readHead()
            }
            let framing = try ResponsePolicy.check(head, requiresNoStore: requiresNoStore)
            let body = try readBody(framing)
            return HTTPTransferResult(head: head, body: body)
        }

        // MARK: - Socket

        private mutating func connect(host: String, port: Int) throws(SessionError) {
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = streamSocketType
            hints.ai_flags = AI_NUMERICSERV
            var list: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else {
                throw SessionError.fetchFailed("the backend's host name could not be resolved")
            }
            defer { freeaddrinfo(list) }
            var lastError: Int32 = 0
            var candidate: UnsafeMutablePointer<addrinfo>? = first
            while let info = candidate {
                candidate = info.pointee.ai_next
                let fd = systemSocket(info.pointee.ai_family, streamSocketType, info.pointee.ai_protocol)
                guard fd >= 0 else {
                    lastError = errno
                    continue
                }
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK)
                #if canImport(Darwin)
                    var one: Int32 = 1
                    _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
                #endif
                socket = fd
                if systemConnect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return }
                lastError = errno
                if lastError == EINPROGRESS {
                    try wait(for: Int16(POLLOUT))
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    if error == 0 { return }
                    lastError = error
                }
                close()
            }
            throw SessionError.fetchFailed(
                lastError == ECONNREFUSED
                    ? "the backend could not be reached (connection refused)"
                    : "the backend could not be reached (errno \(lastError))"
            )
        }

        private mutating func send(_ bytes: [UInt8]) throws(SessionError) {
            var offset = 0
            while offset < bytes.count {
                let sent = bytes.withUnsafeBytes { raw in
                    systemSend(socket, raw.baseAddress! + offset, raw.count - offset, sendFlags)
                }
                if sent > 0 {
                    offset += sent
                } else if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    try wait(for: Int16(POLLOUT))
                } else {
                    throw SessionError.fetchFailed("the connection to the backend failed while sending the request")
                }
            }
        }

        /// Waits until the socket is ready, the deadline passes or the fetch is decided elsewhere.
        private func wait(for events: Int16) throws(SessionError) {
            while true {
                guard !control.isFinished else { throw SessionError.fetchFailed("the fetch was abandoned") }
                let remaining = ContinuousClock.now.duration(to: deadline)
                guard remaining > .zero else { throw timeoutError }
                let slice = min(PlainHTTPTransfer.pollInterval, Int(remaining.timeInterval * 1000) + 1)
                var descriptor = pollfd(fd: socket, events: events, revents: 0)
                let ready = poll(&descriptor, 1, Int32(slice))
                if ready > 0 { return }
                if ready < 0 && errno != EINTR {
                    throw SessionError.fetchFailed("the connection to the backend failed")
                }
            }
        }

        /// Reads once more into the buffer; `false` when the server closed the connection.
        private mutating func fill() throws(SessionError) -> Bool {
            guard !atEnd else { return false }
            if start > 32 * 1024 {
                buffer.removeFirst(start)
                start = 0
            }
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                guard !control.isFinished else { throw SessionError.fetchFailed("the fetch was abandoned") }
                guard ContinuousClock.now < deadline else { throw timeoutError }
                let count = chunk.withUnsafeMutableBytes { raw in systemReceive(socket, raw.baseAddress!, raw.count, 0)
                }
                if count > 0 {
                    buffer.append(contentsOf: chunk[0..<count])
                    return true
                }
                if count == 0 {
                    atEnd = true
                    return false
                }
                guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else {
                    throw SessionError.fetchFailed("the connection to the backend failed while reading the response")
                }
                try wait(for: Int16(POLLIN))
            }
        }

        // MARK: - HTTP/1.1

        private mutating func readHead() throws(SessionError) -> HTTPResponseHead {
            var searched = start
            while true {
                if let end = Self.find([0x0D, 0x0A, 0x0D, 0x0A], in: buffer, from: max(start, searched - 3)) {
                    let text = String(decoding: buffer[start..<end], as: UTF8.self)
                    start = end + 4
                    return try Self.parseHead(text)
                }
                searched = buffer.count
                guard available <= ResponsePolicy.maximumHeadSize else {
                    throw ResponsePolicy.protocolError("sent a response head larger than 16 KiB")
                }
                guard try fill() else {
                    throw ResponsePolicy.protocolError("closed the connection before the response head ended")
                }
            }
        }

        private static func parseHead(_ text: String) throws(SessionError) -> HTTPResponseHead {
            var lines = text.components(separatedBy: "\r\n")
            let statusLine = lines.removeFirst()
            guard let (version, status) = HTTPResponseHead.statusLine(statusLine), version == "1.1" || version == "1.0"
            else {
                throw ResponsePolicy.protocolError("sent a malformed status line")
            }
            var fields: [(name: String, value: String)] = []
            for line in lines {
                guard let field = HTTPResponseHead.field(line) else {
                    throw ResponsePolicy.protocolError("sent a malformed header line")
                }
                fields.append(field)
            }
            return HTTPResponseHead(status: status, fields: fields)
        }

        private mutating func readBody(_ framing: BodyFraming) throws(SessionError) -> [UInt8] {
            let limit = ResponsePolicy.maximumBodySize
            switch framing {
            case .length(let length):
                while available < length {
                    guard try fill() else {
                        throw ResponsePolicy.protocolError("closed the connection before the body ended")
                    }
                }
                return Array(buffer[start..<start + length])
            case .untilClose:
                while try fill() {
                    guard available <= limit else { throw ResponsePolicy.tooLarge(declared: false) }
                }
                guard available <= limit else { throw ResponsePolicy.tooLarge(declared: false) }
                return Array(buffer[start...])
            case .chunked:
                var body: [UInt8] = []
                while true {
                    let line = try readLine()
                    let sizeText = line.split(separator: ";", maxSplits: 1).first.map { $0.trimmingASCIISpaces() } ?? ""
                    guard !sizeText.isEmpty, sizeText.utf8.count <= 16, let declared = UInt64(sizeText, radix: 16)
                    else {
                        throw ResponsePolicy.protocolError("sent a malformed chunk size")
                    }
                    guard declared <= UInt64(limit - body.count) else { throw ResponsePolicy.tooLarge(declared: false) }
                    let size = Int(declared)
                    if size == 0 { break }
                    while available < size + 2 {
                        guard try fill() else {
                            throw ResponsePolicy.protocolError("closed the connection inside a chunk")
                        }
                    }
                    guard buffer[start + size] == 0x0D, buffer[start + size + 1] == 0x0A else {
                        throw ResponsePolicy.protocolError("sent a chunk longer than its declared size")
                    }
                    body.append(contentsOf: buffer[start..<start + size])
                    start += size + 2
                }
                var trailers = 0
                while true {
                    let line = try readLine()
                    if line.isEmpty { break }
                    trailers += line.utf8.count
                    guard trailers <= ResponsePolicy.maximumHeadSize else {
                        throw ResponsePolicy.protocolError("sent trailers larger than 16 KiB")
                    }
                }
                return body
            }
        }

        /// One CRLF-terminated line of at most 1 KiB, without its terminator.
        private mutating func readLine() throws(SessionError) -> String {
            while true {
                if let end = Self.find([0x0D, 0x0A], in: buffer, from: start) {
                    let line = String(decoding: buffer[start..<end], as: UTF8.self)
                    start = end + 2
                    return line
                }
                guard available <= 1024 else {
                    throw ResponsePolicy.protocolError("sent a chunk line longer than 1 KiB")
                }
                guard try fill() else {
                    throw ResponsePolicy.protocolError("closed the connection inside the chunked body")
                }
            }
        }

        private static func find(_ needle: [UInt8], in haystack: [UInt8], from: Int) -> Int? {
            guard haystack.count >= needle.count, from <= haystack.count - needle.count else { return nil }
            var index = from
            while index <= haystack.count - needle.count {
                if haystack[index] == needle[0] && haystack[index..<index + needle.count].elementsEqual(needle) {
                    return index
                }
                index += 1
            }
            return nil
        }
    }
}

#if canImport(Darwin)
    private let streamSocketType = SOCK_STREAM
    private let sendFlags: Int32 = 0
#else
    private let streamSocketType = Int32(SOCK_STREAM.rawValue)
    private let sendFlags = Int32(MSG_NOSIGNAL)
#endif

private func systemSocket(_ family: Int32, _ type: Int32, _ proto: Int32) -> Int32 { socket(family, type, proto) }
private func systemConnect(_ fd: Int32, _ address: UnsafeMutablePointer<sockaddr>!, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
private func systemSend(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int, _ flags: Int32) -> Int {
    send(fd, bytes, count, flags)
}
private func systemReceive(_ fd: Int32, _ bytes: UnsafeMutableRawPointer, _ count: Int, _ flags: Int32) -> Int {
    recv(fd, bytes, count, flags)
}
private func systemClose(_ fd: Int32) -> Int32 { close(fd) }
