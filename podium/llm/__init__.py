"""Talking to models: the client protocol and its backends (OpenAI-compatible, embedded, function)."""

from podium.llm.base import ChatClient, ChatResponse, Message
from podium.llm.registry import build_client, build_clients

__all__ = ["ChatClient", "ChatResponse", "Message", "build_client", "build_clients"]
