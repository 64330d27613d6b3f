"""Benchmarks: one module per task (load items, format the question, grade the answer)."""
