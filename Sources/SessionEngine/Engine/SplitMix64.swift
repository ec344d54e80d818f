/// A small, fast, seedable random number generator (SplitMix64), so jitter is reproducible from a seed.
///
/// Tests share it for their own reproducible randomness.
package struct SplitMix64: RandomNumberGenerator, Sendable, Hashable {
    private var state: UInt64

    /// Creates a generator from a seed.
    package init(seed: UInt64) {
        state = seed
    }

    /// The next 64 random bits.
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniformly distributed number in `0..<1`.
    package mutating func nextUnit() -> Double {
        Double(next() >> 11) * 0x1.0p-53
    }

    /// A seed from text that is the same in every process (Swift's `Hasher` is not): FNV-1a over its UTF-8 bytes,
    /// starting from the offset basis mixed with `seed`.
    ///
    /// - Parameters:
    ///   - text: The text.
    ///   - seed: Mixed into the offset basis; 0 gives plain FNV-1a.
    /// - Returns: The hash.
    package static func seed(from text: String, mixedWith seed: UInt64 = 0) -> UInt64 {
        text.utf8.reduce(seed ^ 0xCBF2_9CE4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01B3 }
    }
}
