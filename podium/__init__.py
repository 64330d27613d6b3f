"""podium: train and run a Conductor, a small LLM that writes workflows for a team of LLMs.

    import asyncio, podium

    async def main():
        async with podium.Pipeline(podium.load_pool()) as pipe:   # the embedded default
            result = await pipe.ask("What is 17 * 3?")
        print(result.answer)

    asyncio.run(main())
"""

from podium.conductor.parse import parse_workflow
from podium.config import ModelSpec, Pool, RunSettings, load_pool
from podium.errors import ConfigError, PodiumError, WorkerError, WorkflowParseError
from podium.pipeline import Pipeline, RunResult
from podium.workflow.types import Step, Workflow

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ModelSpec",
    "Pipeline",
    "PodiumError",
    "Pool",
    "RunResult",
    "RunSettings",
    "Step",
    "WorkerError",
    "Workflow",
    "WorkflowParseError",
    "load_pool",
    "parse_workflow",
]
