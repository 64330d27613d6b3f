"""Benchmark rows from the Hugging Face Hub: `HubSource` (one dataset at one commit) and
`hub_rows`, the one place podium calls `datasets.load_dataset`.

    datasets.load_dataset(repo, config, split=split, revision=commit)

The rows land in the Hugging Face cache ($HF_HOME, default ~/.cache/huggingface; or
$HF_DATASETS_CACHE) and later loads read them from there; with HF_HUB_OFFLINE=1 (or
HF_DATASETS_OFFLINE=1) `datasets` reads only the cache. Offline, `datasets` serves the newest
cached copy of a dataset whatever revision is asked for, so the rows are checked to come from
the pinned commit. From a repo whose loading script `datasets` no longer runs, one file
(`data_files`) is fetched at the commit with `huggingface_hub.hf_hub_download` (into the same
cache, offline-capable) and read as the offline file is. Every failure (no network, a
gated dataset, no `datasets` package, another revision in the cache) is a ConfigError naming
the dataset, the revision and the fixes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podium.errors import ConfigError

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class HubSource:
    """A benchmark on the Hub: `adapt` turns its rows into the rows of the offline file (the
    `--data-dir` layout), so both sources go through the task's one reader."""

    repo: str
    split: str
    revision: str | None  # a commit SHA; None: not pinned (docs/evaluation.md says which)
    config: str | None = None
    data_files: str | None = None  # one file of the repo, fetched and read without its script
    gated: bool = False
    adapt: Callable[[Rows], Rows] | None = None

    def describe(self, split: str | None = None) -> str:
        parts = [f"config {self.config}"] if self.config else []
        parts.append(f"file {self.data_files}" if self.data_files
                     else f"split {split or self.split}")
        revision = f"revision {self.revision}" if self.revision else "no pinned revision"
        return f"{self.repo} ({', '.join(parts)}; {revision})"


def hub_rows(source: HubSource, *, task: str, offline_fix: str,
             split: str | None = None) -> Rows:
    """The rows of `split` (default: the source's) as the offline file would give them;
    `offline_fix` says how to give the data without the Hub (for error messages)."""
    split = split or source.split
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(_failure(source, split, task, offline_fix, "the `datasets` package "
                                   "is not installed (pip install 'podium[eval]')")) from exc
    try:
        if source.data_files:
            from huggingface_hub import hf_hub_download

            from podium.tasks.common import read_records

            file = hf_hub_download(source.repo, source.data_files, repo_type="dataset",
                                   revision=source.revision)
            rows = read_records(file)
        else:
            dataset = datasets.load_dataset(source.repo, source.config, split=split,
                                            revision=source.revision)
            _check_revision(dataset, source, split, task, offline_fix)
            rows = dataset.to_list()
    except ConfigError:
        raise
    except Exception as exc:  # the libraries' many error types: all mean "not loadable here"
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300].rstrip(".")
        raise ConfigError(_failure(source, split, task, offline_fix, reason)) from exc
    return source.adapt(rows) if source.adapt is not None else rows


def _check_revision(dataset: Any, source: HubSource, split: str, task: str,
                    offline_fix: str) -> None:
    """The cache folder of a Hub dataset ends in the commit it was built from."""
    if source.revision is None:
        return
    files = [str(f.get("filename", "")) for f in getattr(dataset, "cache_files", None) or []]
    if files and not all(f"/{source.revision}/" in f.replace("\\", "/") for f in files):
        raise ConfigError(_failure(source, split, task, offline_fix, "the Hugging Face cache "
                                   "holds another revision of it (datasets serves that one "
                                   "offline)"))


def _failure(source: HubSource, split: str, task: str, offline_fix: str, reason: str) -> str:
    online = ("connect to the Hugging Face Hub once (the copy is then cached in $HF_HOME; "
              "HF_HUB_OFFLINE=1 then reads the cache without trying the network)")
    if source.gated:
        online = (f"accept the dataset's terms at https://huggingface.co/datasets/{source.repo}, "
                  "log in with `hf auth login` (or set HF_TOKEN) and connect once")
    return (f"{task}: cannot load {source.describe(split)} from the Hugging Face Hub: {reason}. "
            f"Either {online}, or {offline_fix}.")
