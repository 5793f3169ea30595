// Typed errors, one per protocol error code (docs/protocol.md, "Replies and errors"), as
// the Python SDK's bus/errors.py: each carries the protocol's `code`.

import type { ErrorCode } from "./types.js";

/** A memory operation failed; `code` is the protocol's error code (or `timeout`). */
export class BusError extends Error {
  readonly code: ErrorCode | "timeout" | (string & {});

  constructor(message: string, code: ErrorCode | "timeout" | (string & {}) = "internal") {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

export class InvalidRequest extends BusError {
  constructor(message: string) {
    super(message, "invalid_request");
  }
}

export class NotFound extends BusError {
  constructor(message: string) {
    super(message, "not_found");
  }
}

export class Conflict extends BusError {
  constructor(message: string) {
    super(message, "conflict");
  }
}

export class TooLarge extends BusError {
  constructor(message: string) {
    super(message, "too_large");
  }
}

export class Forbidden extends BusError {
  constructor(message: string) {
    super(message, "forbidden");
  }
}

/** A dependency (Redis, the embedder, or the handlers themselves) is down; safe to retry. */
export class Unavailable extends BusError {
  constructor(message: string) {
    super(message, "unavailable");
  }
}

export class Internal extends BusError {
  constructor(message: string) {
    super(message, "internal");
  }
}

/** No reply in time. */
export class BusTimeout extends BusError {
  constructor(message: string) {
    super(message, "timeout");
  }
}

const BY_CODE: Record<ErrorCode, new (message: string) => BusError> = {
  invalid_request: InvalidRequest,
  not_found: NotFound,
  conflict: Conflict,
  too_large: TooLarge,
  forbidden: Forbidden,
  unavailable: Unavailable,
  internal: Internal,
};

/** The error of an error reply; an unknown code (a newer server's) is still a BusError. */
export function errorFor(code: string, message: string): BusError {
  const cls = (BY_CODE as Record<string, new (message: string) => BusError>)[code];
  return cls !== undefined ? new cls(message) : new BusError(message, code);
}
