/// An actor that holds nothing: engines run on its serial executor (``SessionEngine/unownedExecutor``), so that each
/// engine is not a default actor with a queue of its own.
///
/// Its executor is a default actor's, enqueued and run by the concurrency runtime as any actor's is, so an engine on
/// it behaves as an actor of its own would, but for taking turns with the engines that share it.
actor ExecutorActor {}
