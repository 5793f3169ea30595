// Typed errors, one per protocol error code (docs/protocol.md, "Replies and errors"), as
// the Python SDK's bus/errors.py: each carries the protocol's `code`.

import type { ErrorCode } from "./types.js";

/** What an error reply carries beside `code` and `error` (v4: a `conflict`'s memory). */
export interface ErrorDetails {
  id?: string;
  currentVersion?: number;
}

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

/** A unique name already taken, or (v4) a write that lost a race: its `expectedVersion` no
 * longer held, it superseded a memory superseded already, or its `apply` met another on one
 * memory. Then `id` names the memory and `currentVersion` its version now (0: no current
 * memory holds the add's key); re-read it and decide again. */
export class Conflict extends BusError {
  readonly id: string | undefined;
  readonly currentVersion: number | undefined;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, "conflict");
    this.id = details.id;
    this.currentVersion = details.currentVersion;
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

type ErrorClass = new (message: string, details?: ErrorDetails) => BusError;

const BY_CODE: Record<ErrorCode, ErrorClass> = {
  invalid_request: InvalidRequest,
  not_found: NotFound,
  conflict: Conflict,
  too_large: TooLarge,
  forbidden: Forbidden,
  unavailable: Unavailable,
  internal: Internal,
};

/** The error of an error reply; an unknown code (a newer server's) is still a BusError. */
export function errorFor(code: string, message: string, details: ErrorDetails = {}): BusError {
  const cls = (BY_CODE as Record<string, ErrorClass>)[code];
  return cls !== undefined ? new cls(message, details) : new BusError(message, code);
}
