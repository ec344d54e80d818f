import SessionEngine

/// What a subscriber that came while `published` went out must have received: first the latest state change
/// published before it came (the engine's initial state, sequence 0, when none was), then every event published
/// after that, once each and in order, to the end.
///
/// - Parameters:
///   - received: The subscriber's events, to the end of its stream.
///   - published: Every event the engine published, in order; its initial state may be left out.
/// - Returns: Why `received` is not that; `nil` when it is.
func subscriberMissedOrRepeated(_ received: [SessionEvent], of published: [SessionEvent]) -> String? {
    guard let first = received.first else { return "the subscriber received nothing" }
    let rest = received.dropFirst()
    let start = rest.first.flatMap { next in published.firstIndex { $0.sequence == next.sequence } } ?? published.count
    if rest.map(\.sequence) != published[start...].map(\.sequence) {
        return "after its first event it received \(rest.map(\.sequence)), not \(published[start...].map(\.sequence))"
    }
    let latestChange = published[..<start].last { $0.state != nil }
    guard first.state != nil, latestChange.map({ first == $0 }) ?? (first.sequence == 0) else {
        return "it started from #\(first.sequence), not the latest state change #\(latestChange?.sequence ?? 0)"
    }
    return nil
}
