"""Typed errors of the client: one per protocol error code, each carrying that `code`."""

from __future__ import annotations

import asyncio


class BusError(Exception):
    """A memory operation failed; `code` is the protocol's error code."""

    code: str = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidRequest(BusError):
    code = "invalid_request"


class NotFound(BusError):
    code = "not_found"


class Conflict(BusError):
    """A unique name taken, or (v4) a conditional write that found the memory changed: then
    `id` is the memory and `current_version` its version now (0: no current memory holds
    the key a keyed add expected); otherwise both are None."""

    code = "conflict"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        id: str | None = None,
        current_version: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.id = id
        self.current_version = current_version


class TooLarge(BusError):
    code = "too_large"


class Forbidden(BusError):
    code = "forbidden"


class Unavailable(BusError):
    """A dependency (Redis, the embedder, or the handlers themselves) is down; safe to retry."""

    code = "unavailable"


class Internal(BusError):
    code = "internal"


class BusTimeout(BusError, asyncio.TimeoutError):
    """No reply in time. Also an `asyncio.TimeoutError`, so generic timeout handling works."""

    code = "timeout"


_BY_CODE: dict[str, type[BusError]] = {
    cls.code: cls
    for cls in (InvalidRequest, NotFound, Conflict, TooLarge, Forbidden, Unavailable, Internal)
}


def error_for(
    code: str, message: str, id: str | None = None, current_version: int | None = None
) -> BusError:
    if code == Conflict.code:
        return Conflict(message, id=id, current_version=current_version)
    cls = _BY_CODE.get(code)
    # An unknown code from a newer server still raises a BusError with that code.
    return cls(message) if cls is not None else BusError(message, code=code)
