/// A value kept in a box of its own, so that a struct holding it, usually as `nil`, is a word wider instead of the
/// value's size.
///
/// For large values that are rarely present in structs kept by the thousand: a pool holds one state machine per
/// account. Copies share the box, and setting a new value allocates a new one.
indirect enum OutOfLine<Value: Sendable & Hashable>: Sendable, Hashable {
    case boxed(Value)

    init(_ value: Value) {
        self = .boxed(value)
    }

    /// The boxed value.
    var value: Value {
        switch self {
        case .boxed(let value): value
        }
    }
}
