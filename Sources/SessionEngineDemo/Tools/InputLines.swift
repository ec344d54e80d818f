import Foundation
import SessionEngine

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Standard input read one line at a time, each held only up to ``maximumLength`` bytes, so that the tools' memory
/// stays flat whatever the input's size.
///
/// `readLine()` keeps a whole line however long it is, and a tool that collects every line keeps the whole input: a
/// stray file or a stuck producer could grow a tool to gigabytes. Here the input is read in blocks into one buffer of
/// at most ``maximumLength`` bytes; a line longer than that is skipped to its newline and reported as
/// ``Line/tooLong``, without its bytes, since a line of an operator's input may hold a signature or a secret.
///
/// Before it waits for more input it flushes standard output, so that a producer that waits for each answer (a
/// co-process, a terminal) sees it.
struct InputLines {
    /// One line of input.
    enum Line {
        /// A line within the bound, without its `\n` or `\r\n`; invalid UTF-8 is repaired as `readLine()` does.
        case text(String)
        /// A line longer than ``InputLines/maximumLength`` bytes; it was read to its end and dropped.
        case tooLong
    }

    /// The longest line kept, in bytes, without its newline: 64 KiB, the largest credential response
    /// `HTTPCredentialFetcher` accepts, so any credential a backend can return fits on one line.
    static let maximumLength = HTTPCredentialFetcher.maximumResponseSize

    /// What a longer line is refused with; it names the bound, never the line.
    static let tooLongReason =
        "the line is longer than \(maximumLength) bytes, more than any credential; it was skipped and is not shown"

    /// The file descriptor read.
    private let descriptor: Int32
    /// The block last read, and how far it has been consumed.
    private var block: [UInt8]
    private var position = 0
    private var filled = 0
    /// The line being assembled, never longer than ``maximumLength``.
    private var line: [UInt8] = []
    private var atEnd = false

    /// Reads `descriptor`, standard input by default.
    init(descriptor: Int32 = STDIN_FILENO) {
        self.descriptor = descriptor
        self.block = [UInt8](repeating: 0, count: 64 << 10)
        self.line.reserveCapacity(Self.maximumLength)
    }

    /// The next line, or nil at the end of the input.
    ///
    /// A last line without a newline counts as a line.
    ///
    /// - Throws: An ``InputProblem`` when the input cannot be read.
    mutating func next() throws(InputProblem) -> Line? {
        line.removeAll(keepingCapacity: true)
        var tooLong = false
        var sawBytes = false
        while true {
            if position == filled {
                if atEnd { break }
                try refill()
                continue
            }
            sawBytes = true
            let newline = block.withUnsafeBytes { bytes -> Int? in
                guard let base = bytes.baseAddress else { return nil }
                let found = memchr(base + position, Int32(UInt8(ascii: "\n")), filled - position)
                return found.map { UnsafeRawPointer($0) - base }
            }
            let end = newline ?? filled
            if !tooLong {
                if line.count + (end - position) > Self.maximumLength + 1 {
                    // One byte over is kept for a `\r` before the newline; past that the line is dropped.
                    tooLong = true
                    line.removeAll(keepingCapacity: true)
                } else {
                    line.append(contentsOf: block[position..<end])
                }
            }
            position = newline.map { $0 + 1 } ?? filled
            if newline != nil { break }
        }
        guard sawBytes else { return nil }
        if !tooLong, line.last == UInt8(ascii: "\r") { line.removeLast() }
        if tooLong || line.count > Self.maximumLength { return .tooLong }
        return .text(String(decoding: line, as: UTF8.self))
    }

    /// Reads the next block, flushing standard output first; at the end of the input sets ``atEnd``.
    private mutating func refill() throws(InputProblem) {
        fflush(nil)
        while true {
            let count = block.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                throw InputProblem(describedReason: "standard input could not be read (errno \(errno))")
            }
            position = 0
            filled = count
            atEnd = count == 0
            return
        }
    }
}
