"""The Conductor's language: types, prompt, parse, render, execute, grammar."""

from podium.workflow.parse import parse_workflow
from podium.workflow.types import Access, Step, Workflow

__all__ = ["Access", "Step", "Workflow", "parse_workflow"]
