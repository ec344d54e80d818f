/// A binary min-heap: the order of the budget's queued fetches (``FetchBudget``), of a shard's free numbers, and of a
/// deadline queue's keys (``DeadlineQueue``).
///
/// The deadline queue's keys know their places, so that a replaced or cancelled timer's key moves or goes where it
/// sits: the operations that take a `moved` function tell it each element they put at a new index, with the index,
/// and keep a table of places the caller passes (`places`) beside the heap.
struct Heap<Element: Comparable & Sendable>: Sendable {
    private var storage: [Element] = []

    /// The least element, if any.
    var min: Element? { storage.first }
    /// How many elements the heap holds.
    var count: Int { storage.count }

    /// Adds `element`.
    mutating func insert(_ element: Element) {
        var none = NoPlaces()
        insert(element, places: &none) { _, _, _ in }
    }

    /// Removes and returns the least element, if any.
    @discardableResult
    mutating func removeMin() -> Element? {
        guard !storage.isEmpty else { return nil }
        var none = NoPlaces()
        return remove(at: 0, places: &none) { _, _, _ in }
    }

    /// The places of a heap whose caller keeps none. A byte, not an empty value: the thread sanitizer's check of an
    /// `inout` access to a value of no size reads an address that points nowhere and crashes the process (Swift
    /// 6.3.1, `swift build --sanitize=thread`; `HeapTests` under the sanitizer found it).
    private struct NoPlaces {
        var unused: UInt8 = 0
    }

    /// Adds `element`, telling `moved` the index of every element it places, `element`'s own included.
    mutating func insert<Places>(
        _ element: Element, places: inout Places, moved: (inout Places, Element, Int) -> Void
    ) {
        storage.append(element)
        moved(&places, element, storage.count - 1)
        siftUp(storage.count - 1, &places, moved)
    }

    /// Puts `element` at `index` in place of the element there, which leaves the heap, and tells `moved` the index of
    /// every element it places, `element`'s own included.
    mutating func replace<Places>(
        at index: Int, with element: Element, places: inout Places, moved: (inout Places, Element, Int) -> Void
    ) {
        let earlier = element < storage[index]
        storage[index] = element
        moved(&places, element, index)
        if earlier { siftUp(index, &places, moved) } else { siftDown(index, &places, moved) }
    }

    /// Removes the element at `index` and returns it, telling `moved` the index of every other element it places.
    @discardableResult
    mutating func remove<Places>(
        at index: Int, places: inout Places, moved: (inout Places, Element, Int) -> Void
    ) -> Element {
        let removed = storage[index]
        let last = storage.removeLast()
        guard index < storage.count else { return removed }
        // The last element fills the hole, and moves up or down from there (after a move up, the element in the hole
        // is its old parent, already before every element below it).
        storage[index] = last
        moved(&places, last, index)
        siftUp(index, &places, moved)
        siftDown(index, &places, moved)
        return removed
    }

    private mutating func siftUp<Places>(
        _ start: Int, _ places: inout Places, _ moved: (inout Places, Element, Int) -> Void
    ) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard storage[child] < storage[parent] else { return }
            swap(child, parent, &places, moved)
            child = parent
        }
    }

    private mutating func siftDown<Places>(
        _ start: Int, _ places: inout Places, _ moved: (inout Places, Element, Int) -> Void
    ) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var first = parent
            if left < storage.count, storage[left] < storage[first] { first = left }
            if right < storage.count, storage[right] < storage[first] { first = right }
            guard first != parent else { return }
            swap(parent, first, &places, moved)
            parent = first
        }
    }

    private mutating func swap<Places>(
        _ one: Int, _ other: Int, _ places: inout Places, _ moved: (inout Places, Element, Int) -> Void
    ) {
        storage.swapAt(one, other)
        moved(&places, storage[one], one)
        moved(&places, storage[other], other)
    }
}
