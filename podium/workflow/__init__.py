"""The workflow language and how it runs: types, the messages a step's worker gets, the
executor. (The Conductor, which writes workflows, is `podium.conductor`.)"""

from podium.workflow.types import Access, Step, Workflow

__all__ = ["Access", "Step", "Workflow"]
