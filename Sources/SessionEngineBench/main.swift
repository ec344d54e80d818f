// The benchmark runner; see BENCHMARKS.md.
print("SessionEngineBench")
