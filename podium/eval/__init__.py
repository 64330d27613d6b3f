"""Evaluation: run a system over a task (resumable), summarise, report."""
