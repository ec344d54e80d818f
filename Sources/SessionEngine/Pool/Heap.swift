/// A binary min-heap: the order of the budget's queued fetches (``FetchBudget``) and of a shard's free numbers. A
/// deadline queue keeps a heap of its own whose keys know their places, so that a replaced or cancelled timer's key
/// moves or goes where it sits (``DeadlineQueue``).
struct Heap<Element: Comparable & Sendable>: Sendable {
    private var storage: [Element] = []

    var min: Element? { storage.first }
    var count: Int { storage.count }

    mutating func insert(_ element: Element) {
        storage.append(element)
        var child = storage.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard storage[child] < storage[parent] else { break }
            storage.swapAt(child, parent)
            child = parent
        }
    }

    @discardableResult
    mutating func removeMin() -> Element? {
        guard !storage.isEmpty else { return nil }
        storage.swapAt(0, storage.count - 1)
        let min = storage.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < storage.count, storage[left] < storage[smallest] { smallest = left }
            if right < storage.count, storage[right] < storage[smallest] { smallest = right }
            guard smallest != parent else { break }
            storage.swapAt(parent, smallest)
            parent = smallest
        }
        return min
    }
}
