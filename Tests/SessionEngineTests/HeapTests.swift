import Testing

@testable import SessionEngine

/// The one min-heap of the package: the budget's queue, a shard's free numbers, a deadline queue's keys.
@Suite struct HeapTests {
    @Test func theHeapYieldsItsElementsInOrder() {
        var random = SplitMix64(seed: 11)
        var heap = Heap<Int>()
        var values: [Int] = []
        for _ in 0..<500 {
            let value = Int(random.next() % 1000)
            values.append(value)
            heap.insert(value)
        }
        var drained: [Int] = []
        while let value = heap.removeMin() { drained.append(value) }
        #expect(drained == values.sorted())
    }

    /// An element that knows its name, so the places the heap reports can be kept by name, as a deadline queue keeps
    /// its keys' places by slot.
    private struct Named: Comparable {
        var value: Int
        var name: Int

        static func < (one: Named, other: Named) -> Bool {
            (one.value, one.name) < (other.value, other.name)
        }
    }

    /// Random inserts, replacements and removals at reported places: after every call each element's reported place
    /// holds it, and the elements drain in order.
    @Test func theReportedPlacesFollowEveryMoveOfInsertsReplacementsAndRemovals() throws {
        var random = SplitMix64(seed: 12)
        var heap = Heap<Named>()
        var places: [Int: Int] = [:]
        var held: [Int: Int] = [:]
        let moved: (inout [Int: Int], Named, Int) -> Void = { places, element, index in places[element.name] = index }
        for step in 0..<3_000 {
            let name = Int(random.next() % 64)
            let value = Int(random.next() % 100)
            switch (held[name], random.next() % 3) {
            case (nil, _):
                heap.insert(Named(value: value, name: name), places: &places, moved: moved)
                held[name] = value
            case (.some, 0):
                let place = try #require(places[name])
                places[name] = nil
                let removed = heap.remove(at: place, places: &places, moved: moved)
                #expect(removed.name == name)
                held[name] = nil
            case (.some, _):
                let place = try #require(places[name])
                heap.replace(at: place, with: Named(value: value, name: name), places: &places, moved: moved)
                held[name] = value
            }
            #expect(heap.count == held.count, "step \(step)")
            var copy = heap
            var drained: [Named] = []
            while let element = copy.removeMin() { drained.append(element) }
            #expect(drained == held.map { Named(value: $0.value, name: $0.key) }.sorted(), "step \(step)")
            // Each reported place holds its element: a removal at that place, from a copy, returns it.
            for (name, place) in places {
                var probe = heap
                // A byte, not `Void`: see `Heap.NoPlaces`.
                var none: UInt8 = 0
                let found = probe.remove(at: place, places: &none) { _, _, _ in }
                #expect(found.name == name, "step \(step): \(name) is not at \(place)")
            }
        }
    }
}
