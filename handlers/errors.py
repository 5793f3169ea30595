"""Errors an operation raises; each carries the protocol `code` its reply shows."""

from __future__ import annotations


class HandlerError(Exception):
    code = "internal"
    # The NATS micro error code header (`Nats-Service-Error-Code`), HTTP-like.
    status = "500"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(HandlerError):
    code = "invalid_request"
    status = "400"


class NotFound(HandlerError):
    code = "not_found"
    status = "404"


class Conflict(HandlerError):
    code = "conflict"
    status = "409"


class VersionConflict(Conflict):
    """v4: a conditional write found the memory at another version (or superseded); the
    reply carries the memory's id and its version now."""

    def __init__(self, message: str, memory_id: str | None, current_version: int) -> None:
        super().__init__(message)
        self.memory_id = memory_id
        self.current_version = current_version


class TooLarge(HandlerError):
    code = "too_large"
    status = "413"


class Unavailable(HandlerError):
    code = "unavailable"
    status = "503"


class Forbidden(HandlerError):
    code = "forbidden"
    status = "403"


class Busy(Unavailable):
    """The handler is at capacity: the request was not run, so a retry is safe."""

    def __init__(self, running: int, waiting: int) -> None:
        super().__init__(
            f"The memory service is busy ({running} requests running, {waiting} waiting) and"
            " did not run this request; retry in a moment with backoff, or ask the operator"
            " to run more handlers."
        )
        self.running = running
        self.waiting = waiting
