import Foundation
import SessionEngine

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A misbehaving loopback server: it accepts every connection and closes it at once, without reading or answering;
/// a proxy that drops its clients, for a test.
///
/// It listens on 127.0.0.1, on a port the system picks, and accepts on a thread of its own until ``stop()``.
final class ClosingServer: Sendable {
    /// The port it listens on.
    let port: Int
    private let descriptor: Int32
    private let accepted = SanitizedMutex(0)

    /// How many connections it accepted and closed.
    var connections: Int { accepted.withLock { $0 } }

    /// Starts listening and accepting.
    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw NetworkTestFailure("socket() failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && listen(descriptor, 16) == 0
                    && getsockname(descriptor, address, &length) == 0
            }
        }
        guard listening else {
            close(descriptor)
            throw NetworkTestFailure("could not listen on 127.0.0.1: errno \(errno)")
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in
            while true {
                let client = accept(descriptor, nil, nil)
                if client < 0 {
                    if errno == EINTR { continue }
                    // Shut down: the thread closes the descriptor itself, so no other thread's new descriptor can
                    // take its number while it still accepts on it.
                    close(descriptor)
                    return
                }
                accepted.withLock { $0 += 1 }
                close(client)
            }
        }
        thread.start()
    }

    /// Stops accepting: the accepting thread's `accept` fails, and the thread closes the socket and ends.
    func stop() {
        shutdown(descriptor, Int32(SHUT_RDWR))
    }
}
