"""Typed failures of a model call. Messages carry the provider's own words, never a secret."""

from __future__ import annotations

from typing import Any

from .messages import ChatMessage


class ChatClientError(Exception):
    """A model call failed. `status_code` is the HTTP status when there was one."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        request_body: dict[str, Any] | None = None,
        request_sha256: str = "",
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.request_body = request_body
        self.request_sha256 = request_sha256
        """The sha256 of the bytes `request_body` was sent as (`wire.encode_body`)."""
        self.attempts = attempts
        self.raw: tuple[tuple[float, str], ...] = ()

    def __str__(self) -> str:
        if self.status_code is not None and self.status_code >= 400:
            return f"HTTP {self.status_code}: {self.message}"
        return self.message


class ProviderHTTPError(ChatClientError):
    """The provider answered with a non-2xx status."""


class ProviderConnectionError(ChatClientError):
    """No usable answer: connection refused, a timeout, or the connection dropped mid-stream."""


class StreamError(ChatClientError):
    """The stream itself was broken: a malformed chunk, an error event, or no finish.

    `partial` keeps what streamed before the break (text and reasoning only).
    """

    def __init__(self, message: str, *, partial: ChatMessage | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.partial = partial
