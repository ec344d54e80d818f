import CSessionEngineSHA256

/// An incremental SHA-256 hash computation (FIPS 180-4).
///
/// Feed the message with any number of `update` calls, then call ``finalize()`` once to obtain the
/// ``SHA256Digest``. The value type holds only the eight chaining words, a fixed-size 64-byte pending block and a
/// length counter, so hashing never allocates. Because the type is a value, copying a partially updated hasher
/// forks the computation, which lets a shared prefix be absorbed once and reused.
///
/// The compression function runs on the CPU's SHA-256 instructions where it has them (see ``Implementation``) and
/// in portable Swift otherwise.
package struct SHA256: Sendable {
    /// The chaining state after the absorbed full blocks.
    var state: State
    /// The compression function this hasher uses.
    let implementation: Implementation
    /// Bytes received but not yet compressed; only the first `pendingCount` bytes are meaningful.
    var pending: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)
    /// The number of meaningful bytes in `pending`, always below 64.
    var pendingCount: Int
    /// The total number of message bytes received so far.
    var totalLength: UInt64

    /// Creates a hasher with the standard SHA-256 initial state and an empty message.
    ///
    /// - Parameter implementation: The compression function to use; the process's ``Implementation/active`` one
    ///   unless a test compares implementations.
    package init(using implementation: Implementation = .active) {
        self.implementation = implementation
        state = .initial
        pending = (0, 0, 0, 0, 0, 0, 0, 0)
        pendingCount = 0
        totalLength = 0
    }

    /// Appends the bytes of a raw buffer to the message.
    ///
    /// Whole 64-byte blocks are compressed straight from `buffer`; only a partial block is copied aside.
    package mutating func update(_ buffer: UnsafeRawBufferPointer) {
        guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
        let count = buffer.count
        totalLength &+= UInt64(truncatingIfNeeded: count)
        var offset = 0
        let alreadyPending = pendingCount
        if alreadyPending > 0 {
            let take = min(64 - alreadyPending, count)
            withUnsafeMutableBytes(of: &pending) { block in
                (block.baseAddress! + alreadyPending).copyMemory(from: base, byteCount: take)
            }
            offset = take
            if alreadyPending + take < 64 {
                pendingCount = alreadyPending + take
                return
            }
            let block = pending
            withUnsafeBytes(of: block) { state.compress($0.baseAddress!, blocks: 1, using: implementation) }
            pendingCount = 0
        }
        let fullBlocks = (count - offset) / 64
        if fullBlocks > 0 {
            state.compress(base + offset, blocks: fullBlocks, using: implementation)
            offset += fullBlocks * 64
        }
        let rest = count - offset
        if rest > 0 {
            withUnsafeMutableBytes(of: &pending) { block in
                block.baseAddress!.copyMemory(from: base + offset, byteCount: rest)
            }
            pendingCount = rest
        }
    }

    /// Appends the bytes of an array to the message.
    package mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Appends the UTF-8 encoding of a string to the message.
    ///
    /// Native strings are hashed in place from their contiguous UTF-8 storage without copying.
    package mutating func update(_ string: String) {
        var string = string
        string.withUTF8 { update(UnsafeRawBufferPointer($0)) }
    }

    /// Applies the final padding and returns the digest of everything passed to `update`.
    ///
    /// The method consumes the hasher: the padded state is not a valid starting point for more input. To keep
    /// hashing after taking an intermediate digest, finalize a copy instead.
    package consuming func finalize() -> SHA256Digest {
        let count = pendingCount
        let length = totalLength
        let block = pending
        let implementation = implementation
        withUnsafeBytes(of: block) { bytes in
            state.absorbFinalBlocks(
                UnsafeRawBufferPointer(rebasing: bytes[0..<count]),
                totalLength: length,
                using: implementation
            )
        }
        return SHA256Digest(state: state)
    }

    /// Returns the SHA-256 digest of a raw buffer in one shot.
    ///
    /// - Parameters:
    ///   - buffer: The message.
    ///   - implementation: The compression function to use; the process's active one by default.
    package static func hash(
        _ buffer: UnsafeRawBufferPointer,
        using implementation: Implementation = .active
    ) -> SHA256Digest {
        var state = State.initial
        state.absorbMessage(buffer, prefixLength: 0, using: implementation)
        return SHA256Digest(state: state)
    }

    /// Returns the SHA-256 digest of a byte array in one shot.
    ///
    /// - Parameters:
    ///   - bytes: The message.
    ///   - implementation: The compression function to use; the process's active one by default.
    package static func hash(_ bytes: [UInt8], using implementation: Implementation = .active) -> SHA256Digest {
        bytes.withUnsafeBytes { hash($0, using: implementation) }
    }

    /// Returns the SHA-256 digest of a string's UTF-8 encoding in one shot.
    ///
    /// - Parameters:
    ///   - string: The message.
    ///   - implementation: The compression function to use; the process's active one by default.
    package static func hash(_ string: String, using implementation: Implementation = .active) -> SHA256Digest {
        var string = string
        return string.withUTF8 { hash(UnsafeRawBufferPointer($0), using: implementation) }
    }
}

extension SHA256 {
    /// An implementation of the SHA-256 compression function.
    ///
    /// The hardware one runs on the SHA extensions (SHA-NI) on x86_64 and on the ARMv8 SHA-2 instructions on arm64,
    /// found at run time. The portable one is plain Swift: the fallback on other CPUs, and the reference the
    /// hardware one is tested against. Setting the environment variable `SESSIONENGINE_PORTABLE_SHA256` to a value
    /// other than an empty string or `0` before the first hash makes the portable one ``active``.
    package enum Implementation: Sendable, Hashable, CustomStringConvertible {
        /// The compression function in portable Swift.
        case portable
        /// The compression function on this CPU's SHA-256 instructions.
        case hardware

        /// The implementation the process uses: ``hardware`` when the CPU has the instructions and the environment
        /// does not force the portable path, ``portable`` otherwise.
        ///
        /// After the first read this costs one relaxed atomic load.
        @inline(__always)
        package static var active: Implementation {
            se_sha256_active_backend() == SE_SHA256_BACKEND_PORTABLE ? .portable : .hardware
        }

        /// Every implementation this CPU can run, the portable one first.
        package static var available: [Implementation] {
            se_sha256_hardware_backend() == SE_SHA256_BACKEND_PORTABLE ? [.portable] : [.portable, .hardware]
        }

        /// The instructions behind the implementation, such as `x86 SHA-NI`.
        package var description: String {
            switch self {
            case .portable:
                return "portable Swift"
            case .hardware:
                switch se_sha256_hardware_backend() {
                case SE_SHA256_BACKEND_X86_SHA_NI: return "x86 SHA-NI"
                case SE_SHA256_BACKEND_ARMV8_SHA2: return "ARMv8 SHA-2"
                default: return "hardware (not available on this CPU)"
                }
            }
        }
    }
}

extension SHA256 {
    /// The eight 32-bit chaining words of a SHA-256 computation.
    ///
    /// The words are stored in order with no padding, the `uint32_t[8]` the hardware compression reads and writes.
    struct State: Sendable {
        var a: UInt32
        var b: UInt32
        var c: UInt32
        var d: UInt32
        var e: UInt32
        var f: UInt32
        var g: UInt32
        var h: UInt32

        /// The initial hash value H(0) from FIPS 180-4, section 5.3.3.
        static var initial: State {
            State(
                a: 0x6a09_e667, b: 0xbb67_ae85, c: 0x3c6e_f372, d: 0xa54f_f53a,
                e: 0x510e_527f, f: 0x9b05_688c, g: 0x1f83_d9ab, h: 0x5be0_cd19
            )
        }

        /// Absorbs a complete message that follows `prefixLength` already absorbed bytes, including the padding.
        ///
        /// Whole blocks are compressed straight from `message`; the tail and padding are built in a stack block.
        ///
        /// - Parameters:
        ///   - message: The remaining message bytes.
        ///   - prefixLength: The number of bytes absorbed before `message`; a multiple of 64.
        ///   - implementation: The compression function to use.
        mutating func absorbMessage(
            _ message: UnsafeRawBufferPointer,
            prefixLength: UInt64,
            using implementation: Implementation
        ) {
            let count = message.count
            let fullBlocks = count / 64
            if fullBlocks > 0 {
                compress(message.baseAddress!, blocks: fullBlocks, using: implementation)
            }
            let tail = UnsafeRawBufferPointer(rebasing: message[(fullBlocks * 64)...])
            absorbFinalBlocks(
                tail,
                totalLength: prefixLength &+ UInt64(truncatingIfNeeded: count),
                using: implementation
            )
        }

        /// Compresses the last partial block with the padding and the message length (one or two blocks).
        ///
        /// - Parameters:
        ///   - tail: The unabsorbed message bytes; fewer than 64.
        ///   - totalLength: The length of the whole message in bytes.
        ///   - implementation: The compression function to use.
        mutating func absorbFinalBlocks(
            _ tail: UnsafeRawBufferPointer,
            totalLength: UInt64,
            using implementation: Implementation
        ) {
            var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
            let tailCount = tail.count
            withUnsafeMutableBytes(of: &block) { bytes in
                if let source = tail.baseAddress, tailCount > 0 {
                    bytes.baseAddress!.copyMemory(from: source, byteCount: tailCount)
                }
                bytes[tailCount] = 0x80
                if tailCount >= 56 {
                    compress(UnsafeRawPointer(bytes.baseAddress!), blocks: 1, using: implementation)
                    bytes.initializeMemory(as: UInt8.self, repeating: 0)
                }
                bytes.storeBytes(of: (totalLength &<< 3).bigEndian, toByteOffset: 56, as: UInt64.self)
                compress(UnsafeRawPointer(bytes.baseAddress!), blocks: 1, using: implementation)
            }
        }

        /// Compresses `blocks` consecutive 64-byte blocks starting at `pointer`, which need not be aligned.
        ///
        /// - Parameters:
        ///   - pointer: The first block.
        ///   - blocks: The number of blocks.
        ///   - implementation: The compression function to use; ``Implementation/hardware`` only when it is
        ///     among ``Implementation/available``.
        @inline(__always)
        mutating func compress(_ pointer: UnsafeRawPointer, blocks: Int, using implementation: Implementation) {
            switch implementation {
            case .hardware:
                withUnsafeMutableBytes(of: &self) { words in
                    se_sha256_compress_hardware(
                        words.baseAddress!.assumingMemoryBound(to: UInt32.self), pointer, blocks)
                }
            case .portable:
                compressPortably(pointer, blocks: blocks)
            }
        }

        /// Compresses `blocks` consecutive 64-byte blocks starting at `pointer` in portable Swift.
        mutating func compressPortably(_ pointer: UnsafeRawPointer, blocks: Int) {
            var pointer = pointer
            for _ in 0..<blocks {
                compress(
                    words: (
                        loadBigEndian(pointer, 0), loadBigEndian(pointer, 4),
                        loadBigEndian(pointer, 8), loadBigEndian(pointer, 12),
                        loadBigEndian(pointer, 16), loadBigEndian(pointer, 20),
                        loadBigEndian(pointer, 24), loadBigEndian(pointer, 28),
                        loadBigEndian(pointer, 32), loadBigEndian(pointer, 36),
                        loadBigEndian(pointer, 40), loadBigEndian(pointer, 44),
                        loadBigEndian(pointer, 48), loadBigEndian(pointer, 52),
                        loadBigEndian(pointer, 56), loadBigEndian(pointer, 60)
                    )
                )
                pointer += 64
            }
        }

        /// Compresses one block given as its sixteen message words, already converted from big-endian byte order.
        ///
        /// The 64 rounds are unrolled and the message schedule is kept in a rolling window of sixteen locals, so
        /// the whole computation stays in registers and on the stack.
        @inline(__always)
        mutating func compress(words: Block) {
            var (w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15) = words
            var a = self.a
            var b = self.b
            var c = self.c
            var d = self.d
            var e = self.e
            var f = self.f
            var g = self.g
            var h = self.h
            var bXorC = b ^ c
            step(a, b, c, &d, e, f, g, &h, 0x428a_2f98 &+ w0, &bXorC)
            step(h, a, b, &c, d, e, f, &g, 0x7137_4491 &+ w1, &bXorC)
            step(g, h, a, &b, c, d, e, &f, 0xb5c0_fbcf &+ w2, &bXorC)
            step(f, g, h, &a, b, c, d, &e, 0xe9b5_dba5 &+ w3, &bXorC)
            step(e, f, g, &h, a, b, c, &d, 0x3956_c25b &+ w4, &bXorC)
            step(d, e, f, &g, h, a, b, &c, 0x59f1_11f1 &+ w5, &bXorC)
            step(c, d, e, &f, g, h, a, &b, 0x923f_82a4 &+ w6, &bXorC)
            step(b, c, d, &e, f, g, h, &a, 0xab1c_5ed5 &+ w7, &bXorC)
            step(a, b, c, &d, e, f, g, &h, 0xd807_aa98 &+ w8, &bXorC)
            step(h, a, b, &c, d, e, f, &g, 0x1283_5b01 &+ w9, &bXorC)
            step(g, h, a, &b, c, d, e, &f, 0x2431_85be &+ w10, &bXorC)
            step(f, g, h, &a, b, c, d, &e, 0x550c_7dc3 &+ w11, &bXorC)
            step(e, f, g, &h, a, b, c, &d, 0x72be_5d74 &+ w12, &bXorC)
            step(d, e, f, &g, h, a, b, &c, 0x80de_b1fe &+ w13, &bXorC)
            step(c, d, e, &f, g, h, a, &b, 0x9bdc_06a7 &+ w14, &bXorC)
            step(b, c, d, &e, f, g, h, &a, 0xc19b_f174 &+ w15, &bXorC)
            w0 = w0 &+ sigma1(w14) &+ w9 &+ sigma0(w1)
            step(a, b, c, &d, e, f, g, &h, 0xe49b_69c1 &+ w0, &bXorC)
            w1 = w1 &+ sigma1(w15) &+ w10 &+ sigma0(w2)
            step(h, a, b, &c, d, e, f, &g, 0xefbe_4786 &+ w1, &bXorC)
            w2 = w2 &+ sigma1(w0) &+ w11 &+ sigma0(w3)
            step(g, h, a, &b, c, d, e, &f, 0x0fc1_9dc6 &+ w2, &bXorC)
            w3 = w3 &+ sigma1(w1) &+ w12 &+ sigma0(w4)
            step(f, g, h, &a, b, c, d, &e, 0x240c_a1cc &+ w3, &bXorC)
            w4 = w4 &+ sigma1(w2) &+ w13 &+ sigma0(w5)
            step(e, f, g, &h, a, b, c, &d, 0x2de9_2c6f &+ w4, &bXorC)
            w5 = w5 &+ sigma1(w3) &+ w14 &+ sigma0(w6)
            step(d, e, f, &g, h, a, b, &c, 0x4a74_84aa &+ w5, &bXorC)
            w6 = w6 &+ sigma1(w4) &+ w15 &+ sigma0(w7)
            step(c, d, e, &f, g, h, a, &b, 0x5cb0_a9dc &+ w6, &bXorC)
            w7 = w7 &+ sigma1(w5) &+ w0 &+ sigma0(w8)
            step(b, c, d, &e, f, g, h, &a, 0x76f9_88da &+ w7, &bXorC)
            w8 = w8 &+ sigma1(w6) &+ w1 &+ sigma0(w9)
            step(a, b, c, &d, e, f, g, &h, 0x983e_5152 &+ w8, &bXorC)
            w9 = w9 &+ sigma1(w7) &+ w2 &+ sigma0(w10)
            step(h, a, b, &c, d, e, f, &g, 0xa831_c66d &+ w9, &bXorC)
            w10 = w10 &+ sigma1(w8) &+ w3 &+ sigma0(w11)
            step(g, h, a, &b, c, d, e, &f, 0xb003_27c8 &+ w10, &bXorC)
            w11 = w11 &+ sigma1(w9) &+ w4 &+ sigma0(w12)
            step(f, g, h, &a, b, c, d, &e, 0xbf59_7fc7 &+ w11, &bXorC)
            w12 = w12 &+ sigma1(w10) &+ w5 &+ sigma0(w13)
            step(e, f, g, &h, a, b, c, &d, 0xc6e0_0bf3 &+ w12, &bXorC)
            w13 = w13 &+ sigma1(w11) &+ w6 &+ sigma0(w14)
            step(d, e, f, &g, h, a, b, &c, 0xd5a7_9147 &+ w13, &bXorC)
            w14 = w14 &+ sigma1(w12) &+ w7 &+ sigma0(w15)
            step(c, d, e, &f, g, h, a, &b, 0x06ca_6351 &+ w14, &bXorC)
            w15 = w15 &+ sigma1(w13) &+ w8 &+ sigma0(w0)
            step(b, c, d, &e, f, g, h, &a, 0x1429_2967 &+ w15, &bXorC)
            w0 = w0 &+ sigma1(w14) &+ w9 &+ sigma0(w1)
            step(a, b, c, &d, e, f, g, &h, 0x27b7_0a85 &+ w0, &bXorC)
            w1 = w1 &+ sigma1(w15) &+ w10 &+ sigma0(w2)
            step(h, a, b, &c, d, e, f, &g, 0x2e1b_2138 &+ w1, &bXorC)
            w2 = w2 &+ sigma1(w0) &+ w11 &+ sigma0(w3)
            step(g, h, a, &b, c, d, e, &f, 0x4d2c_6dfc &+ w2, &bXorC)
            w3 = w3 &+ sigma1(w1) &+ w12 &+ sigma0(w4)
            step(f, g, h, &a, b, c, d, &e, 0x5338_0d13 &+ w3, &bXorC)
            w4 = w4 &+ sigma1(w2) &+ w13 &+ sigma0(w5)
            step(e, f, g, &h, a, b, c, &d, 0x650a_7354 &+ w4, &bXorC)
            w5 = w5 &+ sigma1(w3) &+ w14 &+ sigma0(w6)
            step(d, e, f, &g, h, a, b, &c, 0x766a_0abb &+ w5, &bXorC)
            w6 = w6 &+ sigma1(w4) &+ w15 &+ sigma0(w7)
            step(c, d, e, &f, g, h, a, &b, 0x81c2_c92e &+ w6, &bXorC)
            w7 = w7 &+ sigma1(w5) &+ w0 &+ sigma0(w8)
            step(b, c, d, &e, f, g, h, &a, 0x9272_2c85 &+ w7, &bXorC)
            w8 = w8 &+ sigma1(w6) &+ w1 &+ sigma0(w9)
            step(a, b, c, &d, e, f, g, &h, 0xa2bf_e8a1 &+ w8, &bXorC)
            w9 = w9 &+ sigma1(w7) &+ w2 &+ sigma0(w10)
            step(h, a, b, &c, d, e, f, &g, 0xa81a_664b &+ w9, &bXorC)
            w10 = w10 &+ sigma1(w8) &+ w3 &+ sigma0(w11)
            step(g, h, a, &b, c, d, e, &f, 0xc24b_8b70 &+ w10, &bXorC)
            w11 = w11 &+ sigma1(w9) &+ w4 &+ sigma0(w12)
            step(f, g, h, &a, b, c, d, &e, 0xc76c_51a3 &+ w11, &bXorC)
            w12 = w12 &+ sigma1(w10) &+ w5 &+ sigma0(w13)
            step(e, f, g, &h, a, b, c, &d, 0xd192_e819 &+ w12, &bXorC)
            w13 = w13 &+ sigma1(w11) &+ w6 &+ sigma0(w14)
            step(d, e, f, &g, h, a, b, &c, 0xd699_0624 &+ w13, &bXorC)
            w14 = w14 &+ sigma1(w12) &+ w7 &+ sigma0(w15)
            step(c, d, e, &f, g, h, a, &b, 0xf40e_3585 &+ w14, &bXorC)
            w15 = w15 &+ sigma1(w13) &+ w8 &+ sigma0(w0)
            step(b, c, d, &e, f, g, h, &a, 0x106a_a070 &+ w15, &bXorC)
            w0 = w0 &+ sigma1(w14) &+ w9 &+ sigma0(w1)
            step(a, b, c, &d, e, f, g, &h, 0x19a4_c116 &+ w0, &bXorC)
            w1 = w1 &+ sigma1(w15) &+ w10 &+ sigma0(w2)
            step(h, a, b, &c, d, e, f, &g, 0x1e37_6c08 &+ w1, &bXorC)
            w2 = w2 &+ sigma1(w0) &+ w11 &+ sigma0(w3)
            step(g, h, a, &b, c, d, e, &f, 0x2748_774c &+ w2, &bXorC)
            w3 = w3 &+ sigma1(w1) &+ w12 &+ sigma0(w4)
            step(f, g, h, &a, b, c, d, &e, 0x34b0_bcb5 &+ w3, &bXorC)
            w4 = w4 &+ sigma1(w2) &+ w13 &+ sigma0(w5)
            step(e, f, g, &h, a, b, c, &d, 0x391c_0cb3 &+ w4, &bXorC)
            w5 = w5 &+ sigma1(w3) &+ w14 &+ sigma0(w6)
            step(d, e, f, &g, h, a, b, &c, 0x4ed8_aa4a &+ w5, &bXorC)
            w6 = w6 &+ sigma1(w4) &+ w15 &+ sigma0(w7)
            step(c, d, e, &f, g, h, a, &b, 0x5b9c_ca4f &+ w6, &bXorC)
            w7 = w7 &+ sigma1(w5) &+ w0 &+ sigma0(w8)
            step(b, c, d, &e, f, g, h, &a, 0x682e_6ff3 &+ w7, &bXorC)
            w8 = w8 &+ sigma1(w6) &+ w1 &+ sigma0(w9)
            step(a, b, c, &d, e, f, g, &h, 0x748f_82ee &+ w8, &bXorC)
            w9 = w9 &+ sigma1(w7) &+ w2 &+ sigma0(w10)
            step(h, a, b, &c, d, e, f, &g, 0x78a5_636f &+ w9, &bXorC)
            w10 = w10 &+ sigma1(w8) &+ w3 &+ sigma0(w11)
            step(g, h, a, &b, c, d, e, &f, 0x84c8_7814 &+ w10, &bXorC)
            w11 = w11 &+ sigma1(w9) &+ w4 &+ sigma0(w12)
            step(f, g, h, &a, b, c, d, &e, 0x8cc7_0208 &+ w11, &bXorC)
            w12 = w12 &+ sigma1(w10) &+ w5 &+ sigma0(w13)
            step(e, f, g, &h, a, b, c, &d, 0x90be_fffa &+ w12, &bXorC)
            w13 = w13 &+ sigma1(w11) &+ w6 &+ sigma0(w14)
            step(d, e, f, &g, h, a, b, &c, 0xa450_6ceb &+ w13, &bXorC)
            w14 = w14 &+ sigma1(w12) &+ w7 &+ sigma0(w15)
            step(c, d, e, &f, g, h, a, &b, 0xbef9_a3f7 &+ w14, &bXorC)
            w15 = w15 &+ sigma1(w13) &+ w8 &+ sigma0(w0)
            step(b, c, d, &e, f, g, h, &a, 0xc671_78f2 &+ w15, &bXorC)
            self.a &+= a
            self.b &+= b
            self.c &+= c
            self.d &+= d
            self.e &+= e
            self.f &+= f
            self.g &+= g
            self.h &+= h
        }
    }

    /// One 64-byte message block as sixteen 32-bit words.
    typealias Block = (
        UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
        UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32
    )
}

/// Loads the big-endian 32-bit word at `offset` bytes past `pointer`.
@inline(__always)
private func loadBigEndian(_ pointer: UnsafeRawPointer, _ offset: Int) -> UInt32 {
    UInt32(bigEndian: pointer.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
}

/// Rotates `x` right by `count` bits.
@inline(__always)
private func rotateRight(_ x: UInt32, _ count: UInt32) -> UInt32 {
    (x &>> count) | (x &<< (32 &- count))
}

/// The small sigma-0 function of the message schedule, `ROTR7(x) ^ ROTR18(x) ^ SHR3(x)`.
@inline(__always)
private func sigma0(_ x: UInt32) -> UInt32 {
    rotateRight(rotateRight(x, 11) ^ x, 7) ^ (x &>> 3)
}

/// The small sigma-1 function of the message schedule, `ROTR17(x) ^ ROTR19(x) ^ SHR10(x)`.
@inline(__always)
private func sigma1(_ x: UInt32) -> UInt32 {
    rotateRight(rotateRight(x, 2) ^ x, 17) ^ (x &>> 10)
}

/// One SHA-256 round with the working variables renamed instead of shifted.
///
/// `kw` is the round constant plus the schedule word. Only `d` and `h` change: `d` becomes the next `e` and `h`
/// becomes the next `a`. `bXorC` carries `b ^ c` from round to round: this round's `a ^ b` is the next round's
/// `b ^ c`, so the majority function costs three operations instead of four. The big sigma functions use the nested
/// rotation form, which needs fewer register copies than three independent rotations.
@inline(__always)
private func step(
    _ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: inout UInt32,
    _ e: UInt32, _ f: UInt32, _ g: UInt32, _ h: inout UInt32, _ kw: UInt32, _ bXorC: inout UInt32
) {
    // Σ1(e) = ROTR6(e) ^ ROTR11(e) ^ ROTR25(e) and Σ0(a) = ROTR2(a) ^ ROTR13(a) ^ ROTR22(a).
    let bigSigma1 = rotateRight(rotateRight(rotateRight(e, 14) ^ e, 5) ^ e, 6)
    let choose = g ^ (e & (f ^ g))
    let t1 = h &+ kw &+ choose &+ bigSigma1
    let bigSigma0 = rotateRight(rotateRight(rotateRight(a, 9) ^ a, 11) ^ a, 2)
    let aXorB = a ^ b
    let majority = (aXorB & bXorC) ^ b
    bXorC = aXorB
    d &+= t1
    h = t1 &+ bigSigma0 &+ majority
}
