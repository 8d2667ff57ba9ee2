"""Benchmark suites: the kernel shapes of real models, run on a GPU with a watchdog."""
