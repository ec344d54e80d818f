extension Optional where Wrapped == [UInt8] {
    /// Calls `body` with the bytes, or with an empty buffer whose base address is `nil`: how a C function of the
    /// package's libcurl glue is told "none" (certificate authorities in PEM, for one).
    package func withBytesOrNone<T>(_ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        guard let bytes = self else { return body(UnsafeBufferPointer(start: nil, count: 0)) }
        return bytes.withUnsafeBufferPointer { body($0) }
    }
}
