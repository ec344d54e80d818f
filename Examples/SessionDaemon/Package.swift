// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "SessionDaemon",
    platforms: [.macOS(.v15)],
    dependencies: [
        // SwiftPM names a path dependency after its folder, whatever the folder's clone is called ("main",
        // "SessionEngine-pr-42"), so `package: "SessionEngine"` below would be an unknown package. `name:` declares the
        // package's name for resolving `.product(name:package:)`. In your own daemon, depend on the release instead:
        // .package(url: "https://github.com/…/SessionEngine.git", from: "1.0.0")
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
