"""podium's hand-written parts beside the maintained library that could replace them, measured
in the same run: what each costs where podium uses it.

* GGUF header: `podium.llm.chat_template.gguf_metadata` (reads the chat template and the
  BOS/EOS tokens, skipping everything else) against `gguf.GGUFReader` (the `gguf` package,
  which maps the file and builds an array for every field and tensor), on the bundled
  SmolLM2-135M GGUF. Both must give the same template.
* chat-template rendering: `podium.llm.chat_template.ChatTemplate.render` (jinja2, set up as
  Hugging Face sets it up) against `transformers`' `render_jinja_template`, the same template
  and messages: the first render in a fresh process (the import included, as a client
  process that renders one prompt pays it) and the steady render. Both must give the same
  prompt.

    .venv/bin/python benchmarks/hand_written.py [--out benchmarks/results/hand_written.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MESSAGES = [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "Let me think."}]


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def fresh(code: str) -> float:
    """Seconds a fresh interpreter takes to run `code` (imports included)."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hand_written.json"))
    args = parser.parse_args()

    import gguf
    from transformers.utils.chat_template_utils import render_jinja_template

    from podium.llm.chat_template import gguf_metadata, load_chat_template
    from podium.llm.embedded import bundled_gguf

    path = bundled_gguf()
    ours_s, meta = timed(lambda: gguf_metadata(path), args.repeats)

    def library():
        reader = gguf.GGUFReader(str(path))
        return reader.fields["tokenizer.chat_template"].contents()

    lib_s, template = timed(library, args.repeats)
    assert template == meta["tokenizer.chat_template"]

    tpl = load_chat_template(str(path))
    history = MESSAGES[:-1]
    render_s, ours = timed(lambda: tpl.render(MESSAGES), args.repeats * 20)
    hf_s, theirs = timed(lambda: render_jinja_template(
        [history], chat_template=tpl.text, add_generation_prompt=True,
        bos_token=tpl.bos_token, eos_token=tpl.eos_token)[0][0], args.repeats * 20)
    assert ours == theirs + MESSAGES[-1]["content"], (ours, theirs)
    first_ours = statistics.median(fresh(
        "from podium.llm.chat_template import ChatTemplate;"
        f"ChatTemplate({tpl.text!r}).render({MESSAGES!r})") for _ in range(3))
    first_hf = statistics.median(fresh(
        "from transformers.utils.chat_template_utils import render_jinja_template;"
        f"render_jinja_template([{history!r}], chat_template={tpl.text!r}, "
        "add_generation_prompt=True)") for _ in range(3))

    rows = [("GGUF header (chat template, BOS/EOS)", "podium gguf_metadata", ours_s,
             "gguf.GGUFReader", lib_s),
            ("chat template, one render", "podium ChatTemplate.render", render_s,
             "transformers render_jinja_template", hf_s),
            ("chat template, fresh process (import + render)", "podium", first_ours,
             "transformers", first_hf)]
    def ms(s: float) -> str:
        return f"{s * 1000:.1f} ms" if s >= 0.001 else f"{s * 1e6:.0f} µs"

    print(f"{'what':<48} {'podium':>10} {'library':>10}  library")
    for what, _, a, lib, b in rows:
        print(f"{what:<48} {ms(a):>10} {ms(b):>10}  {lib}")
    print("(medians; the same template and prompt from both, checked)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([{"what": w, "podium": p, "podium_s": a, "library": lib,
                                     "library_s": b} for w, p, a, lib, b in rows], indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
