"""OpenAI-style error bodies: every failure the server answers is one of these.

    {"error": {"message": "...", "type": "...", "param": null, "code": "..."}}

`ApiError` is raised anywhere in a request's handling and turned into that body, with its
HTTP status and headers (`Retry-After` on 429, `WWW-Authenticate` on 401), by the app's
exception handler. Messages say what to change; they never echo a request's API key.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

# The `type` OpenAI gives each status (clients switch on status; `type` is for people).
TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
         404: "invalid_request_error", 405: "invalid_request_error",
         413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
         502: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A request that ends in an error response."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, *, param: str | None = None,
                code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)
