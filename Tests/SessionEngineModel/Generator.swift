import SessionEngine

/// The property harness's random source: SplitMix64, so every generated program is reproducible from one seed.
///
/// It is its own stream, separate from the engine's, so that changing the engine's jitter never changes which
/// programs a seed replays; it shares the engine's SplitMix64 algorithm.
package struct PropertyRandom: RandomNumberGenerator, Sendable {
    private var base: SplitMix64

    package init(seed: UInt64) {
        base = SplitMix64(seed: seed)
    }

    package mutating func next() -> UInt64 {
        base.next()
    }

    /// The seed of the `index`th program of a run: the run's seed itself for the first program, so a failing
    /// program's seed, given back as the run's seed, replays that program first.
    package static func programSeed(run seed: UInt64, index: Int) -> UInt64 {
        guard index > 0 else { return seed }
        var random = PropertyRandom(seed: seed ^ (UInt64(index) &* 0xD1B5_4A32_D192_ED03))
        return random.next()
    }
}

/// A recipe for random values: a function of the random source, with combinators to build larger recipes.
package struct Gen<Value: Sendable>: Sendable {
    package let generate: @Sendable (inout PropertyRandom) -> Value

    package init(_ generate: @escaping @Sendable (inout PropertyRandom) -> Value) {
        self.generate = generate
    }

    /// One value from a fresh generator seeded with `seed`.
    package func sample(seed: UInt64) -> Value {
        var random = PropertyRandom(seed: seed)
        return generate(&random)
    }

    package func map<Other: Sendable>(_ transform: @escaping @Sendable (Value) -> Other) -> Gen<Other> {
        Gen<Other> { random in transform(generate(&random)) }
    }

    package func flatMap<Other: Sendable>(_ transform: @escaping @Sendable (Value) -> Gen<Other>) -> Gen<Other> {
        Gen<Other> { random in transform(generate(&random)).generate(&random) }
    }

    /// An array of exactly `count` values.
    package func array(count: Int) -> Gen<[Value]> {
        Gen<[Value]> { random in (0..<count).map { _ in generate(&random) } }
    }

    package static func constant(_ value: Value) -> Gen<Value> {
        Gen { _ in value }
    }

    /// One of the elements, uniformly.
    package static func element(of elements: [Value]) -> Gen<Value> {
        precondition(!elements.isEmpty, "no elements to choose from")
        return Gen { random in elements[Int.random(in: 0..<elements.count, using: &random)] }
    }

    /// One of the generators, chosen with the given relative weights.
    package static func frequency(_ weighted: [(Int, Gen<Value>)]) -> Gen<Value> {
        let total = weighted.reduce(0) { $0 + $1.0 }
        precondition(total > 0, "the weights must not all be zero")
        return Gen { random in
            var pick = Int.random(in: 0..<total, using: &random)
            for (weight, generator) in weighted {
                if pick < weight { return generator.generate(&random) }
                pick -= weight
            }
            return weighted[weighted.count - 1].1.generate(&random)
        }
    }
}

extension Gen where Value == Int {
    package static func int(in range: ClosedRange<Int>) -> Gen<Int> {
        Gen { random in Int.random(in: range, using: &random) }
    }
}

extension Gen where Value == Bool {
    package static var bool: Gen<Bool> {
        Gen { random in Bool.random(using: &random) }
    }
}
