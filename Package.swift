// swift-tools-version: 6.0
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "SessionEngine",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        // The client: the engine, the credential, its headers and the HTTP fetcher. No signing code, no secret.
        .library(name: "SessionEngine", targets: ["SessionEngine"]),
        // The backend: the signer, the verifier that stands in for the service, and their SHA-256 and HMAC.
        .library(name: "SessionEngineBackend", targets: ["SessionEngineBackend"]),
        .library(name: "SessionEngineTestKit", targets: ["SessionEngineTestKit"]),
        // A fleet's coordinator on Redis, through the system's hiredis 0.14 loaded at run time.
        .library(name: "SessionEngineRedis", targets: ["SessionEngineRedis"]),
        .executable(name: "SessionEngineDemo", targets: ["SessionEngineDemo"]),
        .executable(name: "SessionEngineBench", targets: ["SessionEngineBench"]),
        // Explores the engine's interleavings on a controlled executor; exits non-zero on any failure.
        .executable(name: "SessionEngineSchedules", targets: ["SessionEngineSchedules"]),
    ],
    targets: [
        .target(
            name: "SessionEngine",
            dependencies: ["CSessionEngineSanitizer", "CSessionEngineCurl"],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SessionEngineBackend",
            dependencies: ["SessionEngine", "CSessionEngineSHA256"],
            swiftSettings: strictSettings
        ),
        // SHA-256 compression on the CPU's SHA instructions (SHA-NI, ARMv8 SHA-2), chosen at run time.
        .target(name: "CSessionEngineSHA256"),
        // The bounded HTTPS transfer on the system's libcurl, loaded at run time (no headers needed to build).
        .target(name: "CSessionEngineCurl"),
        // The Redis protocol of the system's hiredis 0.14, loaded at run time (no headers needed to build).
        .target(name: "CSessionEngineRedis"),
        .target(
            name: "SessionEngineRedis",
            dependencies: ["SessionEngine", "CSessionEngineCurl", "CSessionEngineRedis"],
            swiftSettings: strictSettings
        ),
        // Inline thread-sanitizer annotations for the package's lock; nothing without the sanitizer.
        .target(name: "CSessionEngineSanitizer"),
        // Test support for hosts: a manual clock, a scripted fetcher, a service stand-in, gates and waiting for an idle
        // engine.
        .target(
            name: "SessionEngineTestKit",
            dependencies: ["SessionEngine", "SessionEngineBackend"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "SessionEngineDemo",
            dependencies: ["SessionEngine", "SessionEngineBackend", "SessionEngineTestKit", "SessionEngineRedis"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "SessionEngineBench",
            dependencies: ["SessionEngine", "SessionEngineBackend", "SessionEngineTestKit", "SessionEngineRedis"],
            swiftSettings: strictSettings
        ),
        // Runs every job of a program on one thread it controls, in an order a strategy chooses; used only by
        // SessionEngineSchedules, since it intercepts the concurrency runtime's global enqueue for the whole process.
        .target(name: "CSessionEngineExplorer", path: "Tests/CSessionEngineExplorer"),
        .target(
            name: "SessionEngineExplorer",
            dependencies: ["CSessionEngineExplorer"],
            path: "Tests/SessionEngineExplorer",
            swiftSettings: strictSettings
        ),
        // The model harness: random programs against the real engine, a reference model and the engine's invariants;
        // shared by the test suite and SessionEngineSchedules.
        .target(
            name: "SessionEngineModel",
            dependencies: ["SessionEngine", "SessionEngineBackend", "SessionEngineTestKit"],
            path: "Tests/SessionEngineModel",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "SessionEngineSchedules",
            dependencies: [
                "SessionEngine", "SessionEngineBackend", "SessionEngineTestKit", "SessionEngineExplorer",
                "SessionEngineModel",
            ],
            path: "Tests/SessionEngineSchedules",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SessionEngineTests",
            dependencies: [
                "SessionEngine", "SessionEngineBackend", "SessionEngineTestKit", "SessionEngineModel",
                "SessionEngineRedis",
            ],
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
