"""`podium.redact`: a registered key is masked in every encoding a JSON or URL layer writes it
in, whole or streamed in pieces; URLs are shown without their credentials; and the record
where a backend's bytes become podium's (`ChatResponse`) scrubs every string it holds."""

from __future__ import annotations

import json
import logging
import time

import pytest
from support import registered_alone

from podium.llm.base import ChatResponse, InvalidReply
from podium.redact import ScrubbedStream, safe_url, scrub

KEY = "sk-redact/0123456789abcdefKEY"


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    registered_alone(monkeypatch, KEY)


def escaped(text: str, upper: bool = False) -> str:
    return "".join((f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}") for c in text)


@pytest.mark.parametrize("written", [
    KEY,
    escaped(KEY),
    escaped(KEY, upper=True),
    json.dumps(KEY)[1:-1].replace("/", "\\/"),  # as PHP's json_encode writes it
    KEY[:5] + escaped(KEY[5:12]) + KEY[12:],  # some characters escaped, some not
    "".join(f"%{ord(c):02X}" for c in KEY),
    KEY.replace("/", "%2f"),
])
def test_every_encoding_of_the_key_is_masked(written):
    assert scrub(f"error: {written} (see docs)") == "error: *** (see docs)"


def test_other_text_with_escapes_is_left_alone():
    text = 'a \\u0041 and 100% and \\/ and ' + KEY[:-1]
    assert scrub(text) == text


def test_a_key_escaped_and_split_across_stream_pieces_is_masked_whole():
    written = "the key is " + escaped(KEY) + " ok \\n done"
    for size in (1, 3, 7, 50):
        out: list[str] = []
        stream = ScrubbedStream(out.append)
        for start in range(0, len(written), size):
            stream.add(written[start:start + size])
        stream.close()
        assert "".join(out) == "the key is *** ok \\n done", size


def test_ordinary_text_with_backslashes_streams_at_once():
    out: list[str] = []
    stream = ScrubbedStream(out.append)
    for piece in ('print("a\\n")', " and 50% ", "more"):
        stream.add(piece)
    assert out == ['print("a\\n")', " and 50% ", "more"]


def test_scrubbing_plain_text_stays_cheap():
    text = "ordinary reply text " * 50_000  # 1 MB
    start = time.perf_counter()
    for _ in range(20):
        scrub(text)
    assert (time.perf_counter() - start) / 20 < 0.05


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pw@host/v1", "https://***@host/v1"),
    ("http://token@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
    ("http://host:8000/v1", "http://host:8000/v1"),
    ("http://u:p@[::1", "***@[::1"),
    (None, None),
])
def test_safe_url_masks_the_userinfo(url, shown):
    assert safe_url(url) == shown


def test_a_reply_record_scrubs_every_string_it_holds():
    reply = ChatResponse(text=escaped(KEY), model=KEY, request_id=f"req-{KEY}",
                         finish_reason=KEY, extra={"meta": {"echo": [KEY, 1]}, KEY: True},
                         retries=({"error": f"failed for {KEY}"},))
    assert KEY not in repr(reply) and "\\u0073" not in repr(reply)
    assert reply.model == "***" and reply.request_id == "req-***" and reply.finish_reason == "***"
    assert reply.extra == {"meta": {"echo": ["***", 1]}, "***": True}
    assert reply.retries == ({"error": "failed for ***"},)


@pytest.mark.parametrize("fields", [
    {"text": 5}, {"text": ["a"]}, {"text": "a", "prompt_tokens": -1},
    {"text": "a", "completion_tokens": float("nan")}, {"text": "a", "prompt_tokens": 2.5},
    {"text": "a", "prompt_tokens": "12"}, {"text": "a", "reasoning_tokens": True},
    {"text": "a", "model": {"name": "x"}},
])
def test_a_reply_record_refuses_what_is_not_a_reply(fields):
    with pytest.raises(InvalidReply):
        ChatResponse(**fields)


def test_a_log_record_is_scrubbed_whoever_logs_it():
    """An HTTP library logging a reply's headers at DEBUG (an echoed X-Request-Id)."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    log = logging.getLogger("httpcore2.test_redact")
    log.addHandler(handler := Keep(logging.DEBUG))
    log.setLevel(logging.DEBUG)
    try:
        log.debug("headers %r", [(b"X-Request-Id", KEY.encode())])
        try:
            raise ValueError(f"bad {KEY}")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    assert records and not any(KEY in r for r in records), records
    assert "***" in records[0] and "ValueError: bad ***" in records[1]
