// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "SessionDaemon",
    platforms: [.macOS(.v15)],
    dependencies: [
        // SwiftPM names a path dependency after its folder, whatever the folder's clone is called ("main",
        // "SessionEngine-pr-42"), so `package: "SessionEngine"` below would be an unknown package. `name:` declares the
        // package's name for resolving `.product(name:package:)`. In your own daemon, depend on the URL instead, as
        // the root README does (no release tag is published yet; once one is, use `from:` and its version), whose
        // identity is the URL's last path component:
        // .package(url: "https://github.com/appnorth/swift-session-engine.git", branch: "main")
        // with .product(name: "SessionEngine", package: "swift-session-engine")
        .package(name: "SessionEngine", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "SessionDaemon",
            dependencies: [.product(name: "SessionEngine", package: "SessionEngine")]
        )
    ],
    swiftLanguageModes: [.v6]
)
