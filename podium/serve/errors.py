"""OpenAI-style error bodies: every failure the server answers is one of these.

    {"error": {"message": "...", "type": "...", "param": null, "code": "..."}}

`ApiError` is raised anywhere in a request's handling and turned into that body, with its
HTTP status and headers (`Retry-After` on 429, `WWW-Authenticate` on 401), by the app's
exception handler. Messages say what to change; they never echo a request's API key, and never
hold what the pool is made of (an endpoint's address, its error text): a run's error names the
step, its worker and the failure's kind, and its trace id (also in `podium_trace_id`, beside
`error`, and the `X-Podium-Trace-Id` header), whose trace has the details.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

# The `type` OpenAI gives each status (clients switch on status; `type` is for people).
TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
         404: "invalid_request_error", 405: "invalid_request_error",
         413: "invalid_request_error", 431: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
         502: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A request that ends in an error response."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None,
                 trace_id: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.trace_id = trace_id
        self.headers = {**({"X-Podium-Trace-Id": trace_id} if trace_id else {}),
                        **(headers or {})}

    def body(self) -> dict:
        body: dict = {"error": {"message": self.message, "type": TYPES.get(self.status, "error"),
                                "param": self.param, "code": self.code}}
        if self.trace_id:
            body["podium_trace_id"] = self.trace_id
        return body

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, *, param: str | None = None,
                code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)
