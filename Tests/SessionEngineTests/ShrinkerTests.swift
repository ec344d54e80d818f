import SessionEngine
import SessionEngineModel
import Testing

@Suite struct ShrinkerTests {
    /// An operation whose simpler forms are smaller weights, or two parts.
    struct Weight: Shrinkable, Hashable {
        var value: Int

        var simplerForms: [[Weight]] {
            guard value > 0 else { return [] }
            let half = Weight(value: value / 2)
            return [[Weight(value: 0)], [half], [half, Weight(value: value - value / 2)]]
        }
    }

    static func program(seed: UInt64) -> [Weight] {
        var random = SplitMix64(seed: seed)
        return (0..<Int(random.next() % 30)).map { _ in Weight(value: Int(random.next() % 9)) }
    }

    /// Fails while at least two weights are 3 or more.
    static func fails(_ program: [Weight]) -> Bool {
        program.filter { $0.value >= 3 }.count >= 2
    }

    @Test func asyncAndSynchronousShrinkingTryTheSameCandidatesAndFindTheSameProgram() async {
        for seed in 1...40 as ClosedRange<UInt64> {
            let program = Self.program(seed: seed)
            guard Self.fails(program) else { continue }
            var synchronousCandidates: [[Weight]] = []
            let synchronous = Shrinker.shrink(program, budget: 300) { (candidate: [Weight]) -> Bool in
                synchronousCandidates.append(candidate)
                return Self.fails(candidate)
            }
            var asyncCandidates: [[Weight]] = []
            let asynchronous = await Shrinker.shrink(program, budget: 300) { (candidate: [Weight]) async -> Bool in
                asyncCandidates.append(candidate)
                return Self.fails(candidate)
            }
            #expect(synchronousCandidates == asyncCandidates)
            #expect(synchronous.operations == asynchronous.operations)
            #expect(synchronous.attempts == asynchronous.attempts && synchronous.reductions == asynchronous.reductions)
            // Two weights that no simpler form keeps at 3 or more.
            #expect(synchronous.operations.count == 2 && Self.fails(synchronous.operations))
            #expect(synchronous.operations.allSatisfy { $0.value == 3 || $0.value == 4 })
        }
    }

    @Test func shrinkingStopsAtItsBudget() {
        let program = (0..<20).map { Weight(value: 8 - $0 % 3) }
        for budget in [0, 1, 2, 5] {
            var tried = 0
            let result = Shrinker.shrink(program, budget: budget) { (candidate: [Weight]) -> Bool in
                tried += 1
                return Self.fails(candidate)
            }
            #expect(tried == budget && result.attempts == budget)
            #expect(Self.fails(result.operations))
        }
    }
}
