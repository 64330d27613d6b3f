"""The Conductor's language: a workflow is an ordered list of steps.

A step names a worker by its pool index, gives it a subtask (an instruction in natural
language), and says which earlier steps' subtask/response pairs it may see:

* ``"all"``  every earlier step (the paper's binary form);
* ``()``     none (the paper's ``[]``);
* ``(0, 2)`` exactly those earlier steps (podium's extension; the paper's "positional" ablation).

A step depends on the steps it may see, so the executor can run independent steps concurrently
without changing what any worker is shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Access = Literal["all"] | tuple[int, ...]


def access_json(access: Access) -> str | list[int]:
    """An access entry as JSON: "all", or a list of step indices."""
    return "all" if access == "all" else list(access)


@dataclass(frozen=True)
class Step:
    """One step: the worker (its pool index) that runs it, its subtask, and which earlier
    steps it may see (`"all"`, `()` or a tuple of indices)."""

    worker: int
    subtask: str
    access: Access = ()

    def visible(self, index: int) -> tuple[int, ...]:
        """Indices of the earlier steps this step (at position `index`) may see, in step order
        (an index tuple written out of order or with repeats shows each step once, in order)."""
        if self.access == "all":
            return tuple(range(index))
        return tuple(sorted(set(self.access)))



@dataclass(frozen=True)
class Workflow:
    """The steps a Conductor wrote, in order; the last step's response is the answer
    (`run.final_answer`). Build one checked with `Workflow.of`."""

    steps: tuple[Step, ...]

    @classmethod
    def of(cls, steps: Iterable[Step | tuple]) -> Workflow:
        """Build and validate: `Workflow.of([(0, "solve", ()), (1, "check", "all")])`."""
        built = tuple(s if isinstance(s, Step) else Step(*s) for s in steps)
        wf = cls(built)
        wf.validate()
        return wf

    def __len__(self) -> int:
        return len(self.steps)

    def validate(self, num_workers: int | None = None) -> None:
        """Raise ValueError for a forward or self reference, or an out-of-range worker."""
        for i, step in enumerate(self.steps):
            if num_workers is not None and not 0 <= step.worker < num_workers:
                raise ValueError(f"step {i}: worker {step.worker} is not in 0..{num_workers - 1}")
            if step.access == "all":
                continue
            for j in step.access:
                if not 0 <= j < i:
                    raise ValueError(
                        f"step {i}: access entry {j} must name an earlier step (0..{i - 1})"
                    )

    def dependencies(self) -> list[tuple[int, ...]]:
        """For each step, the earlier steps it waits for (the steps it may see)."""
        return [step.visible(i) for i, step in enumerate(self.steps)]

    def to_json(self) -> list[dict]:
        return [
            {"worker": s.worker, "subtask": s.subtask, "access": access_json(s.access)}
            for s in self.steps
        ]

    def to_text(self) -> str:
        """The paper's three-list form, which `parse_workflow` reads back."""
        import json

        access = ['"all"' if s.access == "all" else json.dumps(list(s.access)) for s in self.steps]
        return (
            f"model_id = {json.dumps([s.worker for s in self.steps])}\n"
            f"subtasks = {json.dumps([s.subtask for s in self.steps])}\n"
            f"access_list = [{', '.join(access)}]"
        )
