// Placeholder; replaced by the engine.
enum SessionEnginePlaceholder {}
