"""How one step's rollouts are spread over the processes of a training job.

A step is `questions_per_step` questions x `generations` rollouts, a question's rollouts
consecutive (TRL's `RepeatSampler`). TRL deals that generation batch to the processes in
contiguous slices: process r holds rollouts [r x m, (r + 1) x m), m = the batch / processes,
and splits its slice into `accumulation` micro-batches of `per_device_batch`. A group (one
question's rollouts) therefore lies whole in one process when m is a multiple of
`generations`, and is otherwise cut into *pieces*, one per process it spans. Rewards are
gathered over every process before TRL normalises them by group, so group advantages are
exact whatever the cut; what works on a process's own rows must work on pieces:

* the recursion fine-tune pairs round-0 and round-1 rollouts within each piece (the last
  `fraction` x piece rollouts continue the first ones), so every piece needs a whole number of
  pairs, and `normalisation = "per_round"` (which standardises each round over the whole
  group inside the reward) needs whole groups;
* explored plans (`[rollout] explore`) are drawn per piece, `explore` x piece rollouts of each,
  distinct within the piece.

`layout_of` reads the layout from the config and the launch (or from `grpo.processes` in a dry
run), `check` refuses a layout that cannot work with the error naming the fix, and `line` is
the layout as `podium train` prints it at the start of every run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from podium.errors import ConfigError
from podium.train.config import TrainConfig

CPU_LAUNCH = ("on CPU, `torchrun --nproc_per_node N -m podium.cli.main train ...` starts N "
              "processes (`accelerate launch --cpu --num_processes N` starts one unless MPI "
              "is set up)")


@dataclass(frozen=True)
class Launch:
    """What the launcher started: processes in all, on how many nodes, and this one's rank."""

    processes: int = 1
    nodes: int = 1
    rank: int = 0

    @staticmethod
    def note() -> str | None:
        """What to say about a launch that may not be what was meant: `accelerate launch --cpu`
        runs one process whatever --num_processes says, unless it goes through MPI."""
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" \
                and "WORLD_SIZE" not in os.environ:
            return f"accelerate launched one CPU process; {CPU_LAUNCH}"
        return None

    @classmethod
    def from_env(cls) -> Launch:
        """torchrun's variables (also set by `accelerate launch`, which runs torchrun)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        return cls(world, max(1, world // max(local, 1)), int(os.environ.get("RANK", "0")))


@dataclass(frozen=True)
class Layout:
    processes: int
    nodes: int
    group: int  # rollouts per question
    completions: int  # rollouts per step
    per_device: int  # rollouts per forward/backward pass
    accumulation: int  # passes per process per step

    @property
    def per_process(self) -> int:
        return self.completions // self.processes

    def pieces(self, rank: int) -> list[int]:
        """The sizes of the runs of one question's rollouts in process `rank`'s slice."""
        start, end = rank * self.per_process, (rank + 1) * self.per_process
        out, at = [], start
        while at < end:
            stop = min(end, (at // self.group + 1) * self.group)
            out.append(stop - at)
            at = stop
        return out

    @property
    def whole_groups(self) -> bool:
        return self.per_process % self.group == 0

    def line(self) -> str:
        nodes = f" on {self.nodes} node(s)" if self.nodes > 1 else ""
        sizes = sorted({p for r in range(self.processes) for p in self.pieces(r)})
        groups = ("whole groups" if self.whole_groups else "groups split over processes "
                  "in pieces of " + "/".join(map(str, sizes)))
        return (f"{self.processes} process(es){nodes} x {self.per_process} rollouts each "
                f"({self.per_device} per pass x {self.accumulation} accumulated; {groups})")


def layout_of(config: TrainConfig, launch: Launch | None = None, *,
              dry_run: bool = False) -> Layout:
    """The layout of `config` under `launch` (default: the running one); a dry run outside a
    launcher lays out `grpo.processes` processes. ConfigError when the step does not divide
    into the passes."""
    g = config.grpo
    launch = launch or Launch.from_env()
    processes = launch.processes
    if dry_run and processes == 1 and g.processes:
        processes = g.processes
    completions = g.questions_per_step * g.generations
    per_device = g.per_device_batch or g.generations
    if completions % (per_device * processes):
        raise ConfigError(f"questions_per_step x generations ({completions}) must be a multiple "
                          f"of per_device_batch x processes ({per_device} x {processes}); "
                          "change grpo.per_device_batch (or the number of processes).")
    nodes = launch.nodes if processes == launch.processes else 1
    return Layout(processes, nodes, g.generations, completions, per_device,
                  completions // (per_device * processes))


def check(config: TrainConfig, layout: Layout, *, dry_run: bool = False) -> None:
    """Refuse a launch (unless `dry_run`) or a layout that cannot work, naming the fix."""
    g, rec = config.grpo, config.recursion
    if g.processes and not dry_run and layout.processes != g.processes:
        raise ConfigError(f"This launch started {layout.processes} process(es) and the config "
                          f"asks for {g.processes} (grpo.processes): launch {g.processes} "
                          f"({CPU_LAUNCH}), or set grpo.processes to match.")
    if not rec.fraction or layout.whole_groups:
        return
    if rec.normalisation == "per_round":
        raise ConfigError(
            f"recursion.normalisation = 'per_round' standardises each round over a whole group, "
            f"and with {layout.processes} processes each holds {layout.per_process} rollouts, "
            f"so groups of {layout.group} are split: make per_device_batch x accumulation a "
            f"multiple of grpo.generations (fewer processes or more questions_per_step), or use "
            f"normalisation = 'joint'.")
    for rank in range(layout.processes):
        for piece in layout.pieces(rank):
            pairs = piece * rec.fraction
            if abs(pairs - round(pairs)) > 1e-9 or round(pairs) < 1:
                raise ConfigError(
                    f"The recursion fine-tune pairs round-0 and round-1 rollouts within each "
                    f"process's share of a group; with {layout.processes} processes of "
                    f"{layout.per_process} rollouts, process {rank} holds a piece of "
                    f"{piece} rollouts of one question, and recursion.fraction x {piece} = "
                    f"{pairs:g} is not a whole number of pairs. Make each process hold whole "
                    f"groups (per_device_batch x accumulation a multiple of grpo.generations) "
                    f"or pieces whose recursion.fraction share is whole.")


def pieces_of(prompts: list[str], group: int, offset: int = 0) -> list[tuple[int, int]]:
    """(start, length) of each piece of a group in a process's rollouts `prompts`, the first
    of which is rollout `offset` of the step (rank x rollouts per process): a piece ends where
    the prompt changes or a group ends (`group` 0: where the prompt changes)."""
    out: list[tuple[int, int]] = []
    for i, p in enumerate(prompts):
        if out and prompts[i - 1] == p and not (group and (offset + i) % group == 0):
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out
