"""Pool files and run settings.

A pool file (TOML) lists the workers in id order, the Conductor, and optional run settings:

    [conductor]
    backend = "embedded"            # openai | embedded | function
    temperature = 0.2

    [[workers]]
    name = "gpt-5"
    backend = "openai"              # any OpenAI-compatible endpoint
    model = "gpt-5"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"  # the key is read from this variable, never from the file
    price = { input = 1.25, output = 10.0 }   # USD per 1M tokens

    [run]
    max_steps = 5

With no pool file podium uses the embedded default (`podium/pools/default.toml`): the bundled
SmolLM2-135M-Instruct as the Conductor and as two differently configured workers.
"""

from __future__ import annotations

import os
import tomllib
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from podium.errors import ConfigError
from podium.redact import register, safe_url, url_credentials

Backend = Literal["openai", "anthropic", "gemini", "embedded", "function", "transformers"]
BACKENDS: tuple[str, ...] = ("openai", "anthropic", "gemini", "embedded", "function",
                             "transformers")
# How an OpenAI-compatible server is asked to continue a trailing assistant message
Prefill = Literal["message", "continue", "completions"]
PREFILLS: tuple[str, ...] = ("message", "continue", "completions")


# The largest count a setting takes (C's int: what servers and llama.cpp read); numbers must
# be finite (no nan or inf) everywhere.
MAX_COUNT = 2**31 - 1
MAX_REPLY_BYTES = 10_000_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Price(_Frozen):
    """USD per one million tokens, plus an optional flat price per call (a tool, an API
    billed by the request)."""

    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)
    per_call: float = Field(0.0, ge=0, description="USD per call, on top of the tokens.")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6 \
            + self.per_call


class ModelSpec(_Frozen):
    """One model endpoint: a worker, or the Conductor."""

    name: str = Field(description="What traces, tables and errors call this model.")
    backend: Backend = Field(description="openai | anthropic | gemini | embedded | function | "
                             "transformers (a checkpoint directory run in process).")
    model: str = Field("", description="Model name sent to the endpoint; for embedded, "
                       "'smollm2' (the bundled GGUF) or a path to a .gguf file; for "
                       "transformers, a model directory.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. "
                                 "http://localhost:8000/v1.")
    api_key_env: str | None = Field(None, description="Environment variable holding the key.")
    function: str | None = Field(None, description="For backend=function: 'module:callable'.")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_COUNT,
                                   description="Maximum new tokens per call.")
    stop: list[str] | None = None
    seed: int | None = Field(None, ge=-2**63, le=2**64 - 1)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra request "
                                       "fields passed through verbatim (e.g. top_k).")
    grammar_style: Literal["llama_cpp", "vllm"] | None = Field(None, description="How this "
                                                              "OpenAI-compatible server takes a "
                                                              "grammar (none: it cannot).")
    # provider profile: quirks are settings, not code branches
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="Request field that carries max_tokens (OpenAI reasoning "
        "models need max_completion_tokens).")
    reasoning_effort: str | None = Field(None, description="OpenAI reasoning effort: minimal, "
                                         "low, medium, high.")
    thinking: bool | None = Field(None, description="Thinking on/off: Qwen3-style "
                                  "chat_template_kwargs.enable_thinking (openai), extended "
                                  "thinking (anthropic), thinking (gemini).")
    thinking_budget: int | None = Field(None, ge=0, le=MAX_COUNT,
                                        description="Thinking tokens (anthropic "
                                        "budget_tokens, gemini thinking_budget).")
    prefill: Prefill = Field(
        "message", description="How an openai endpoint gets a trailing assistant message (a "
        "prefill): message (an ordinary message; the model answers in a new turn), continue "
        "(continue_final_message=true, add_generation_prompt=false: vLLM, SGLang, llama.cpp's "
        "llama-server), completions (rendered here with chat_template and continued on "
        "/v1/completions: python -m llama_cpp.server).")
    chat_template: str | None = Field(None, description="For prefill='completions': the "
                                      "model's chat template: its .gguf, its "
                                      "tokenizer_config.json, a Jinja file, or the Jinja text.")
    # reliability
    max_concurrency: int = Field(4, ge=1, le=MAX_COUNT,
                                 description="Concurrent calls to this model.")
    rpm: int | None = Field(None, ge=1, le=MAX_COUNT, description="Requests per minute allowed.")
    tpm: int | None = Field(None, ge=1, le=MAX_COUNT, description="Tokens per minute allowed "
                            "(prompt + completion).")
    retries: int = Field(4, ge=0, le=MAX_COUNT,
                         description="Retries on 429, 5xx, connection errors and "
                         "timeouts (never on auth or validation errors).")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles each retry, "
                             "with jitter; a server's Retry-After wins.")
    backoff_max_s: float = Field(30.0, ge=0, description="Longest retry delay.")
    empty_retries: int = Field(2, ge=0, le=MAX_COUNT,
                               description="Re-asks when the reply is empty.")
    connect_timeout_s: float = Field(10.0, gt=0, description="Connect timeout per call.")
    timeout_s: float = Field(600.0, gt=0, description="Longest a whole call may take (the "
                             "connection, the request and the whole reply, streamed or not).")
    max_reply_bytes: int = Field(MAX_REPLY_BYTES, ge=1, le=MAX_COUNT, description="backend="
                                 "openai: the largest reply taken, in bytes once decoded (a "
                                 "streamed reply: its text); a larger one is a worker error.")
    transport: Literal["aiohttp", "openai-sdk"] = Field(
        "aiohttp", description="backend=openai: how calls are sent: aiohttp (podium posts the "
        "request itself; a tenth of the SDK's CPU a call) or openai-sdk (through the openai "
        "SDK's AsyncOpenAI).")
    n_ctx: int = Field(4096, ge=256, le=MAX_COUNT,
                       description="Context window of an embedded model.")
    n_threads: int | None = Field(None, ge=1, le=1024, description="CPU threads of an "
                                  "embedded model (to generate and to read a prompt); default: "
                                  "$OMP_NUM_THREADS where set, else llama.cpp's own (half the "
                                  "cores to generate, all of them to read a prompt).")
    description: str = Field("", description="Shown to the Conductor only with "
                             "pool_display='descriptions'.")
    price: Price | None = None
    tools: bool = Field(False, description="This worker may act with the client's tools (the "
                        "step that writes the answer of a request with tools calls them); "
                        "backends openai, anthropic, gemini and function only.")

    @field_validator("name")
    @classmethod
    def _name_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name must not be empty")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url_is_a_url(cls, v: str | None) -> str | None:
        """A URL podium can call; credentials in it are registered as secrets (a password
        too short to register is still masked wherever podium shows the URL: `safe_url`)."""
        if v is None:
            return v
        try:
            parts = urllib.parse.urlsplit(v)
            parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
        except ValueError as e:
            raise ValueError(f"{safe_url(v)!r} is not a URL ({e}); write it as "
                             "http://host:port/v1 or https://host/v1") from None
        for secret in url_credentials(v):
            register(secret)  # scrubbed from every message from now on (podium.redact)
        return v

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        return self.price.cost(prompt_tokens, completion_tokens) if self.price else None

    def required_api_key(self, suggested_env: str) -> str:
        """The key of a backend that always needs one; ConfigError naming the fix."""
        if not self.api_key_env:
            raise ConfigError(
                f"Model {self.name!r} uses backend {self.backend!r} but has no api_key_env. Set "
                f"api_key_env = \"{suggested_env}\" (or the variable that holds your key) for "
                "it in the pool file."
            )
        return self.api_key()  # type: ignore[return-value]

    def api_key(self) -> str | None:
        """The key from `api_key_env`; ConfigError naming the variable when it is unset."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"Model {self.name!r} reads its API key from the environment variable "
                f"{self.api_key_env}, which is not set. Export it (export {self.api_key_env}=...) "
                f"or change api_key_env for this model in the pool file."
            )
        register(key)  # scrubbed from every message from now on (podium.redact)
        return key


class ConductorSpec(ModelSpec):
    name: str = "conductor"
    constrained: bool | None = Field(None, description="Constrain decoding to a valid workflow "
                                     "with a grammar; unset = on when the backend supports it.")


class RunSettings(_Frozen):
    """How a question is run. Every field is also a `[run]` key in the pool file."""

    prompt: str = Field("v1", description="Conductor prompt version (podium.conductor.prompt).")
    fewshots: str = Field("ood", description="Few-shot set: ood | short | none.")
    pool_display: Literal["masked", "names", "descriptions"] = Field(
        "masked", description="How the Conductor sees workers: masked ids (the paper) or names.")
    max_steps: int = Field(5, ge=1, le=MAX_COUNT,
                           description="Longest workflow accepted (the paper: 5).")
    max_subtask_chars: int = Field(160, ge=10, le=MAX_COUNT,
                                   description="Longest subtask a grammar-"
                                   "constrained Conductor may write (characters).")
    max_reason_chars: int = Field(240, ge=1, le=MAX_COUNT,
                                  description="Longest line of reasoning a grammar-"
                                  "constrained Conductor may write before its lists.")
    max_reason_lines: int = Field(3, ge=1, le=MAX_COUNT,
                                  description="Lines of reasoning a grammar-"
                                  "constrained Conductor may write before its lists.")
    access_mode: Literal["indices", "binary"] = Field(
        "binary", description="binary: only [] or 'all' (the paper's main model); indices: "
        "also lists of step positions (the paper's fine-grained ablation).")
    access_cover: bool = Field(True, description="With access_mode = indices: every step but "
                               "the last must be seen by a later step (the paper's rule).")
    recursion: int = Field(0, ge=0, le=MAX_COUNT,
                           description="Recursive Conductor rounds after the first.")
    recursion_template: str = Field("v1", description="Recursion prompt: v0 | v1 | v2.")
    recursion_format_error: Literal["zero", "keep"] = Field(
        "zero", description="A recursion round whose output is not a valid workflow: zero = a "
        "format error, no answer (the paper's scoring); keep = the previous answer stands.")
    max_prompt_tokens: int | None = Field(
        16000, ge=256, le=MAX_COUNT,
        description="Longest recursion-round Conductor prompt (estimated "
        "tokens); the previous answer is cropped only when the prompt would be longer. "
        "None: never crop.")
    previous_round_visibility: Literal["any_all", "per_step"] = Field(
        "any_all", description="any_all: every new step sees the previous round when any access "
        "entry is 'all' (reference code); per_step: only steps whose access is 'all'.")
    final_answer: Literal["last", "last_nonempty"] = Field(
        "last", description="The answer: the last step's response, or the last non-empty one.")
    on_step_error: Literal["continue", "stop"] = Field(
        "continue", description="After a failed step: run the rest, or stop the workflow.")
    fallback: bool = Field(True, description="If the Conductor's output does not parse, answer "
                           "with one step on fallback_worker (and say so).")
    fallback_worker: int = Field(0, ge=0, le=MAX_COUNT)
    worker_prefill: bool = Field(True, description="End each worker's messages with a short "
                                 "assistant prefill.")
    worker_messages: Literal["team", "question"] = Field(
        "team", description="team: a worker sees the team's layout (preamble, overall task, "
        "visible steps, subtask); question: the bare question only, as a black-box model is "
        "asked (podium eval --system openai:URL).")
    share_agent_subtasks: bool = Field(False, description="Show every worker the whole plan.")
    final_agent_knowledge: bool = Field(False, description="Tell the last worker its output is "
                                        "the final answer.")
    subpool_ids: Literal["original", "reindexed"] = Field(
        "original", description="With a sub-pool (--workers), show the chosen workers under "
        "their original ids (what a trained Conductor learned) or as 0..k-1.")
    cache: bool = Field(True, description="Reuse identical earlier calls from the response "
                        "cache (--no-cache turns it off).")
    cache_path: str | None = Field(None, description="Response cache file; default "
                                   "$PODIUM_CACHE_DIR or ~/.cache/podium, responses.sqlite.")
    max_calls: int | None = Field(None, ge=1, le=MAX_COUNT,
                                  description="Per-question cap on model calls "
                                  "(Conductor included).")
    max_tokens: int | None = Field(None, ge=1, le=MAX_COUNT,
                                   description="Per-question cap on tokens.")
    max_cost: float | None = Field(None, ge=0, description="Per-question cap on cost (USD).")
    show_budget: bool = Field(False, description="Show the Conductor the request's budget: "
                              "each worker's line says how many of its calls the budget pays "
                              "for at list price (podium.conductor.budget). Off: the paper's prompt.")
    hold_budget: bool = Field(False, description="A constrained Conductor with a request's "
                              "budget writes only plans whose list price fits it (the grammar "
                              "holds its worker ids; podium.conductor.budget). Off: the budget is shown "
                              "(show_budget) or checked, never enforced.")


class Pool(_Frozen):
    """A pool file read and checked: the Conductor, the workers in id order (a worker's
    index is its `Model id`), the `[run]` settings, and the file it came from."""

    conductor: ConductorSpec
    workers: tuple[ModelSpec, ...]
    run: RunSettings = RunSettings()
    source: str = "<default>"

    def worker(self, index: int) -> ModelSpec:
        return self.workers[index]


def _format_validation(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key '{where}'")
        elif e["type"] == "literal_error" and where.endswith("backend"):
            lines.append(f"'{where}' = {e.get('input')!r} is not a backend; use one of "
                         f"{', '.join(BACKENDS)}")
        elif e["type"] == "literal_error" and where.endswith("prefill"):
            lines.append(f"'{where}' = {e.get('input')!r} is not a prefill mode; use one of "
                         f"{', '.join(PREFILLS)} (continue for vLLM, SGLang and llama.cpp's "
                         "llama-server, completions for python -m llama_cpp.server)")
        else:
            lines.append(f"'{where}': {e['msg']}")
    return f"Pool file {source} is not valid: " + "; ".join(lines) + ". Fix these keys " \
        "(see docs/pools.md for every key)."


def pool_from_dict(data: dict[str, Any], source: str = "<dict>") -> Pool:
    """Validate a parsed pool file. ConfigError names every bad key."""
    data = dict(data)
    workers = data.get("workers")
    if not workers:
        raise ConfigError(f"Pool file {source} lists no workers. Add at least one [[workers]] "
                          f"table with a name and a backend.")
    if "conductor" not in data:
        raise ConfigError(f"Pool file {source} has no [conductor] table. Add one, e.g. "
                          f"[conductor] backend = \"embedded\".")
    try:
        pool = Pool(source=source, **data)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, source)) from None
    except TypeError as e:
        raise ConfigError(f"Pool file {source} is not valid: {e}.") from None
    names = [w.name for w in pool.workers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"Pool file {source} names workers {dupes} more than once; "
                          "give each worker a unique name.")
    for spec in (pool.conductor, *pool.workers):
        _check_backend_fields(spec, source)
    if pool.run.fallback_worker >= len(pool.workers):
        raise ConfigError(f"Pool file {source}: run.fallback_worker = {pool.run.fallback_worker} "
                          f"but the pool has only workers 0..{len(pool.workers) - 1}.")
    return pool


def _check_backend_fields(spec: ModelSpec, source: str) -> None:
    if spec.backend == "openai" and not spec.base_url:
        raise ConfigError(f"Model {spec.name!r} in {source} uses backend 'openai' but has no "
                          "base_url. Set base_url (e.g. https://api.openai.com/v1 or "
                          "http://localhost:8000/v1).")
    if spec.backend == "openai" and not spec.model:
        raise ConfigError(f"Model {spec.name!r} in {source} uses backend 'openai' but has no "
                          "model. Set model to the name the endpoint serves.")
    if spec.backend in ("anthropic", "gemini") and not spec.model:
        example = "claude-sonnet-4-5" if spec.backend == "anthropic" else "gemini-2.5-flash"
        raise ConfigError(f"Model {spec.name!r} in {source} uses backend {spec.backend!r} but "
                          f"has no model. Set model to the provider's model name (e.g. "
                          f"\"{example}\").")
    if spec.backend == "function" and not spec.function:
        raise ConfigError(f"Model {spec.name!r} in {source} uses backend 'function' but has no "
                          "function. Set function = \"package.module:callable\".")
    if spec.backend == "transformers" and not spec.model:
        raise ConfigError(f"Model {spec.name!r} in {source} uses backend 'transformers' but has "
                          "no model. Set model to a checkpoint directory (e.g. "
                          "runs/train/NAME/final).")
    _check_prefill_fields(spec, source)
    if spec.tools and spec.backend in ("embedded", "transformers"):
        raise ConfigError(f"Model {spec.name!r} in {source} sets tools = true, but backend "
                          f"{spec.backend!r} cannot call tools (its chat format has no tool "
                          "calls). Remove tools for it, or set it on a worker with backend "
                          "openai, anthropic, gemini or function.")


def _check_prefill_fields(spec: ModelSpec, source: str) -> None:
    if spec.prefill != "message" and spec.backend != "openai":
        raise ConfigError(f"Model {spec.name!r} in {source} sets prefill = {spec.prefill!r}, "
                          "which only an 'openai' backend takes (embedded and anthropic models "
                          "continue a prefill by themselves). Remove prefill for it.")
    if spec.prefill == "completions" and not spec.chat_template:
        raise ConfigError(f"Model {spec.name!r} in {source} sets prefill = \"completions\" but "
                          "has no chat_template. Set chat_template to the model's .gguf (the "
                          "file the server loads), its tokenizer_config.json or a .jinja file.")
    template = spec.chat_template
    if template and not ("{{" in template or "{%" in template) \
            and not Path(template).expanduser().is_file():
        raise ConfigError(f"Model {spec.name!r} in {source}: chat_template {template!r} is "
                          "neither Jinja text nor an existing file. Set it to the model's .gguf, "
                          "its tokenizer_config.json, a .jinja file or the template text.")
    if template and spec.prefill != "completions":
        raise ConfigError(f"Model {spec.name!r} in {source} sets chat_template, which is used "
                          "only with prefill = \"completions\". Set that, or remove "
                          "chat_template.")


def load_pool(path: str | Path | None = None) -> Pool:
    """Read a pool file, or the embedded default when `path` is None."""
    if path is None:
        text = resources.files("podium").joinpath("pools/default.toml").read_text("utf-8")
        return pool_from_dict(tomllib.loads(text), source="<embedded default>")
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"Pool file {p} does not exist. Pass an existing TOML file with "
                          "--pool, or leave --pool out to use the embedded default.")
    try:
        data = tomllib.loads(p.read_text("utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"Pool file {p} is not valid TOML: {e}. Fix the syntax at that line.") \
            from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"Pool file {p} is not UTF-8 text (byte {e.start}: {e.reason}). TOML "
                          "files must be UTF-8: save it as UTF-8.") from None
    return pool_from_dict(data, source=str(p))


def split_limits(team: Pool, processes: int, flag: str = "processes"
                 ) -> tuple[Pool, list[str]]:
    """`team` with each remote model's share of its limits for one of `processes` processes
    that call the same endpoints (`podium serve --processes`, the ranks of a training job):
    `max_concurrency`, `rpm` and `tpm` divided, rounded down, at least 1, so that the limits
    hold across the processes; and a note for each limit smaller than `processes`. In-process
    models (embedded, transformers, function) keep their limits: each process has its own."""
    if processes == 1:
        return team, []
    notes: list[str] = []

    def share(spec):
        if spec.backend not in ("openai", "anthropic", "gemini"):
            return spec
        update = {}
        for key in ("max_concurrency", "rpm", "tpm"):
            value = getattr(spec, key)
            if value is not None:
                update[key] = max(1, value // processes)
                if value < processes:
                    notes.append(f"{spec.name}'s {key} is {value}, below {flag} "
                                 f"{processes}: each process allows 1, {processes} in all")
        return spec.model_copy(update=update)

    return team.model_copy(update={"conductor": share(team.conductor),
                                   "workers": tuple(share(w) for w in team.workers)}), notes
