/// A value kept in a box of its own, so that a struct holding it, usually as `nil`, is a word wider instead of the
/// value's size.
///
/// For large values that are rarely present, or rarely change, in what is kept by the thousand: a pool holds one
/// engine, with its state machine and store, per account. Copies share the box, and setting a new value allocates a
/// new one.
indirect enum OutOfLine<Value: Sendable>: Sendable {
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

extension OutOfLine: Equatable where Value: Equatable {}
extension OutOfLine: Hashable where Value: Hashable {}
