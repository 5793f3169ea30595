// The client agents import: `MemoryBus.connect(...)`, then one `AgentMemory` per agent. It
// mirrors the Python SDK (bus/client.py and the modules it is made of): identity fields
// filled by the handle, trust in the subject, durable writes through JetStream on `memq.`,
// replies checked for `success`.

import { randomUUID } from "node:crypto";

import { jetstream, JetStreamApiError, type JetStreamClient } from "@nats-io/jetstream";
import {
  connect,
  RequestError,
  TimeoutError,
  type Msg,
  type NatsConnection,
  type NodeConnectionOptions,
  type Subscription,
} from "@nats-io/transport-node";

import {
  BusError,
  BusTimeout,
  errorFor,
  Internal,
  InvalidRequest,
  Unavailable,
} from "./errors.js";
import {
  DEFAULT_NAMESPACE,
  DURABLE_PREFIX,
  DURABLE_STREAM,
  FULL_TRUST,
  GENERAL_SCOPE_TOKEN,
  NAMESPACE_PATTERN,
  OPERATIONS,
  PREFIX,
  SHAPES,
  TRUST_LEVELS,
  type Trust,
} from "./protocol.js";
import type {
  AddReply,
  AddRequest,
  ApplyAdd,
  ApplyDelete,
  ApplyReply,
  ApplySupersede,
  ApplyUpdate,
  CaptureRequest,
  ClearByTypeReply,
  ClearByTypeRequest,
  CompactListReply,
  CompactRequest,
  CompactTimelineReply,
  Context,
  DeleteReply,
  DescribeReply,
  DescribeRequest,
  DurableOperationName,
  Event,
  GetReply,
  GetRequest,
  HistoryReply,
  ListReply,
  ListRequest,
  OperationName,
  Operations,
  PeopleReply,
  PeopleRequest,
  RecallReply,
  RecallRequest,
  ReconcileFact,
  ReconcileReply,
  SearchReply,
  SearchRequest,
  TimelineReply,
  TimelineRequest,
  UpdateReply,
  UpdateRequest,
} from "./types.js";
import type { Spec } from "./shape.js";
import { fromWire, toWire } from "./wire.js";

/** How often a durable publish is sent again (same Nats-Msg-Id, so never applied twice)
 * when JetStream's acknowledgement does not come in time. */
const DURABLE_ATTEMPTS = 3;
/** How soon a durable publish that found no stream is sent again (within the timeout). */
const NO_STREAM_RETRY_MS = 250;
/** How soon a first connection that failed is tried again (within `connectWithinMs`). */
const CONNECT_RETRY_MS = 250;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** JetStream's acknowledgement of a durable write: it is stored in the stream and will be
 * applied (at most once), even through handler crashes and NATS or Redis restarts. Its
 * outcome comes as an event carrying `requestId` (or a `rejected` event). */
export interface Accepted {
  /** The Nats-Msg-Id. */
  requestId: string;
  stream: string;
  seq: number;
  /** JetStream had this requestId already (a retried publish): nothing new was stored. */
  duplicate: boolean;
}

export interface ConnectOptions {
  /** NATS server URLs (an array, or one string, comma-separated). Default nats://127.0.0.1:4222. */
  servers?: string | string[];
  /** The namespace (tenant) token, `[A-Za-z0-9_-]{1,64}`. Default `default`. */
  namespace?: string;
  /** The trust level requests carry in their subject (full, inner, familiar, public); NATS
   * permissions decide whether this user may use it. Default `full`. */
  trust?: Trust;
  /** How long a request waits for its reply, in milliseconds. Default 5000. */
  timeoutMs?: number;
  /** How long the first connection may take, in milliseconds (the client reconnects for
   * ever after it). Default 10000. */
  connectWithinMs?: number;
  /** An agent given reduced trust connects with its own user and inbox prefix. */
  user?: string;
  pass?: string;
  token?: string;
  inboxPrefix?: string;
  /** Any other option of @nats-io/transport-node's `connect`. */
  natsOptions?: Partial<NodeConnectionOptions>;
  /** Use this connection instead (the bus then does not close it). */
  nc?: NatsConnection;
}

export interface AgentOptions {
  workflowId?: string;
  agentId?: string;
  /** Requests carry it as `context.session_id`; writes record it; `recall` uses it. */
  sessionId?: string;
  /** Adds go into this workspace, reads look only inside it (unless told otherwise). */
  workspace?: string;
  /** The rest of the `context` block every request of the handle carries. */
  context?: Omit<Context, "sessionId">;
}

export interface SubscribeOptions {
  /** Events of general memories (no workflow). */
  general?: boolean;
  /** Only events of this memory type, or of this action (added, updated, deleted). */
  type?: string;
  action?: string;
}

type Obj = Record<string, unknown>;
/** Fields the handle sets itself, as the Python SDK's handle does. */
type Identity = "workflowId" | "agentId" | "context";
/** The request of `op` as a handle takes it: without the fields the handle sets (and with
 * its session, for `recall`, optional). */
export type OwnRequest<O extends OperationName> = Operations[O]["request"] extends { sessionId: string }
  ? Omit<Operations[O]["request"], Identity | "sessionId"> & { sessionId?: string }
  : Omit<Operations[O]["request"], Identity>;

export interface DurableOption {
  /** Through JetStream (`memq.<ns>.<op>`): resolves to `Accepted` once the stream has it. */
  durable?: boolean;
  /** The Nats-Msg-Id of a durable write (new by default): a retry with it is applied once. */
  requestId?: string;
}

export type AddOptions = Omit<AddRequest, Identity> & DurableOption;
/** `delete`'s options: v4 `erase` (full trust only), and how to send it. */
export type DeleteOptions = DurableOption & { erase?: boolean };
export type UpdateOptions = Omit<UpdateRequest, Identity> & DurableOption;
export type CaptureOptions = Omit<CaptureRequest, Identity> & DurableOption;
/** `get`'s options beside its ids: (v4) `keys`, names given by keyed adds. */
export type GetOptions = Pick<GetRequest, "keys">;
export type SearchOptions = Omit<SearchRequest, Identity>;
export type DescribeOptions = Omit<DescribeRequest, Identity>;
export type ListOptions = Omit<ListRequest, Identity>;
export type TimelineOptions = Omit<TimelineRequest, Identity | "anchor">;
export type PeopleOptions = Omit<PeopleRequest, Identity>;
export type ClearByTypeOptions = Omit<ClearByTypeRequest, Identity | "type">;
export type CompactOptions = Omit<CompactRequest, Identity>;
export type RecallOptions = Omit<RecallRequest, Identity | "sessionId" | "message" | "messages"> & {
  /** The turn's text, or a burst of short messages. */
  message: string | string[];
  /** Default: the handle's. */
  sessionId?: string;
};
export type ApplyAction = ApplyAdd | ApplyUpdate | ApplySupersede | ApplyDelete;

function isObj(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function replySpec(op: OperationName): Spec {
  const { replies } = OPERATIONS[op];
  return replies.length === 1 ? replies[0]! : ["u", replies];
}

function operation(op: string): OperationName {
  if (!Object.hasOwn(OPERATIONS, op)) {
    throw new InvalidRequest(`Unknown operation ${JSON.stringify(op)}; one of: ${Object.keys(OPERATIONS).join(", ")}`);
  }
  return op as OperationName;
}

/** `mem.<ns>.<op>[.<trust>]`, or `memq.` for a durable write. */
export function requestSubject(ns: string, op: string, trust: Trust = FULL_TRUST, durable = false): string {
  return `${durable ? DURABLE_PREFIX : PREFIX}.${ns}.${op}${trust === FULL_TRUST ? "" : `.${trust}`}`;
}

/** A subscription subject for events; unspecified parts are wildcards. */
export function eventFilter(ns: string, workflowId?: string | null, options: SubscribeOptions = {}): string {
  const scope = options.general ? GENERAL_SCOPE_TOKEN : (workflowId ?? "*");
  return `${PREFIX}.${ns}.events.${scope}.${options.type ?? "*"}.${options.action ?? "*"}`;
}

function serverList(servers: string | string[]): string[] {
  const all = Array.isArray(servers) ? servers : [servers];
  return all.flatMap((s) => s.split(",")).map((s) => s.trim()).filter((s) => s.length > 0);
}

/** A connection to the memory bus for one namespace. */
export class MemoryBus {
  readonly nc: NatsConnection;
  readonly namespace: string;
  readonly trust: Trust;
  readonly timeoutMs: number;
  readonly #owns: boolean;
  #js: JetStreamClient | undefined;

  private constructor(nc: NatsConnection, namespace: string, trust: Trust, timeoutMs: number, owns: boolean) {
    this.nc = nc;
    this.namespace = namespace;
    this.trust = trust;
    this.timeoutMs = timeoutMs;
    this.#owns = owns;
  }

  /** Connect to NATS (or reuse `nc`). The first connection must succeed within
   * `connectWithinMs`, else `Unavailable`; the client reconnects for ever after it. */
  static async connect(options: ConnectOptions = {}): Promise<MemoryBus> {
    const namespace = options.namespace ?? DEFAULT_NAMESPACE;
    const trust = options.trust ?? FULL_TRUST;
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!NAMESPACE_PATTERN.test(namespace)) {
      throw new InvalidRequest(`Namespace ${JSON.stringify(namespace)} must match [A-Za-z0-9_-]{1,64}`);
    }
    if (!(TRUST_LEVELS as readonly string[]).includes(trust)) {
      throw new InvalidRequest(`Unknown trust ${JSON.stringify(trust)}; one of: ${TRUST_LEVELS.join(", ")}`);
    }
    if (options.nc !== undefined) return new MemoryBus(options.nc, namespace, trust, timeoutMs, false);
    const servers = serverList(options.servers ?? "nats://127.0.0.1:4222");
    const natsOptions: NodeConnectionOptions = {
      maxReconnectAttempts: -1,
      ...options.natsOptions,
      servers,
      ...(options.user !== undefined && { user: options.user }),
      ...(options.pass !== undefined && { pass: options.pass }),
      ...(options.token !== undefined && { token: options.token }),
      ...(options.inboxPrefix !== undefined && { inboxPrefix: options.inboxPrefix }),
    };
    const within = options.connectWithinMs ?? 10_000;
    const giveUp = Date.now() + within;
    for (;;) {
      try {
        const nc = await connect(natsOptions);
        return new MemoryBus(nc, namespace, trust, timeoutMs, true);
      } catch (err) {
        if (Date.now() + CONNECT_RETRY_MS >= giveUp) {
          throw new Unavailable(
            `NATS at ${servers.join(",")} did not answer within ${within}ms (${String(err)}): start it` +
              " (make up) or point the client at the right server.",
          );
        }
        await delay(CONNECT_RETRY_MS);
      }
    }
  }

  /** Drain and close the connection (unless it was given to `connect`). */
  async close(): Promise<void> {
    if (this.#owns && !this.nc.isClosed()) await this.nc.drain();
  }

  /** A handle bound, for good, to one agent in one workflow (and, optionally, one session
   * and one workspace). */
  agent(options: AgentOptions = {}): AgentMemory {
    return new AgentMemory(this, options);
  }

  /** Send one operation and return its reply (camelCase, defaults filled in); an error
   * reply throws the `BusError` of its code. The body is sent as given: no identity. */
  async request<O extends OperationName>(op: O, body: Operations[O]["request"]): Promise<Operations[O]["reply"]> {
    const name = operation(op);
    const subject = requestSubject(this.namespace, name, this.trust);
    const data = encoder.encode(JSON.stringify(toWire(body, OPERATIONS[name].request)));
    let msg: Msg;
    try {
      msg = await this.nc.request(subject, data, { timeout: this.timeoutMs });
    } catch (err) {
      if (err instanceof RequestError && err.isNoResponders()) {
        throw new Unavailable("No memory handlers are running (no responders); start them and retry.");
      }
      if (err instanceof TimeoutError) throw new BusTimeout(`No reply to ${name} within ${this.timeoutMs}ms; retry.`);
      throw err;
    }
    let reply: unknown;
    try {
      reply = JSON.parse(decoder.decode(msg.data));
    } catch {
      throw new Internal(`The reply to ${name} is not JSON: ${decoder.decode(msg.data).slice(0, 200)}`);
    }
    if (!isObj(reply) || reply.success !== true) {
      const envelope = isObj(reply) ? reply : {};
      // v4: a `conflict` over a memory's version names it and its version now.
      const details = {
        ...(typeof envelope.id === "string" && { id: envelope.id }),
        ...(typeof envelope.current_version === "number" && { currentVersion: envelope.current_version }),
      };
      throw errorFor(String(envelope.code ?? "internal"), String(envelope.error ?? ""), details);
    }
    return fromWire(reply, replySpec(name)) as Operations[O]["reply"];
  }

  /** Send a write (add, update, delete, capture, import) through the JetStream stream
   * MEMBUS_WRITES: once this resolves the write is not lost, and it is applied at most
   * once. `requestId` (the Nats-Msg-Id; new by default) makes a retry idempotent too; the
   * write's event carries it. */
  async durable<O extends DurableOperationName>(
    op: O,
    body: Operations[O]["request"],
    requestId?: string,
  ): Promise<Accepted> {
    const name = operation(op);
    if (!OPERATIONS[name].durable) throw new InvalidRequest(`${name} cannot be sent durably`);
    this.#js ??= jetstream(this.nc, { timeout: this.timeoutMs });
    const id = requestId ?? randomUUID().replaceAll("-", "");
    const subject = requestSubject(this.namespace, name, this.trust, true);
    const data = encoder.encode(JSON.stringify(toWire(body, OPERATIONS[name].request)));
    // No responder is also what a cluster answers while the stream elects a new leader:
    // asked again until the timeout, then it is a missing stream.
    const giveUp = Date.now() + this.timeoutMs;
    for (let attempt = 1; ; ) {
      try {
        const ack = await this.#js.publish(subject, data, { msgID: id, timeout: this.timeoutMs });
        return { requestId: id, stream: ack.stream, seq: ack.seq, duplicate: Boolean(ack.duplicate) };
      } catch (err) {
        if (err instanceof Error && err.name === "JetStreamNotEnabled") {
          if (Date.now() < giveUp) {
            await delay(NO_STREAM_RETRY_MS);
            continue;
          }
          throw new Unavailable(
            `No JetStream stream takes ${subject}: the handlers create ${DURABLE_STREAM} when they` +
              " start; start one (with JetStream on) and retry.",
          );
        }
        if (err instanceof JetStreamApiError) {
          throw new Unavailable(`JetStream refused the ${name}: ${err.message}; retry.`);
        }
        if (err instanceof TimeoutError) {
          if (attempt++ < DURABLE_ATTEMPTS) continue;
          throw new BusTimeout(
            `JetStream did not acknowledge ${name} within ${this.timeoutMs}ms, ${DURABLE_ATTEMPTS} times;` +
              ` retry with requestId ${JSON.stringify(id)} (never applied twice).`,
          );
        }
        throw err;
      }
    }
  }

  /** Follow events: of one workflow, of general memories (`general`), or (neither) of all,
   * as an async iterator. Close it to unsubscribe. */
  subscribe(workflowId?: string | null, options: SubscribeOptions = {}): EventStream {
    return new EventStream(this.nc, eventFilter(this.namespace, workflowId, options));
  }
}

/** An async iterator of `Event`s; `close()` unsubscribes. Events that come while nobody
 * waits are kept until read. */
export class EventStream implements AsyncIterable<Event> {
  readonly subject: string;
  readonly #nc: NatsConnection;
  readonly #sub: Subscription;
  readonly #queue: Msg[] = [];
  readonly #waiters: Array<(msg: Msg | null) => void> = [];
  #ended = false;

  constructor(nc: NatsConnection, subject: string) {
    this.subject = subject;
    this.#nc = nc;
    this.#sub = nc.subscribe(subject, {
      callback: (err, msg) => (err ? this.#end() : this.#push(msg)),
    });
    void this.#sub.closed.then(() => this.#end());
  }

  #push(msg: Msg): void {
    const waiter = this.#waiters.shift();
    if (waiter !== undefined) waiter(msg);
    else this.#queue.push(msg);
  }

  #end(): void {
    this.#ended = true;
    for (const waiter of this.#waiters.splice(0)) waiter(null);
  }

  #take(timeoutMs?: number): Promise<Msg | null> {
    const queued = this.#queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.#ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const waiter = (msg: Msg | null): void => {
        clearTimeout(timer);
        resolve(msg);
      };
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
              reject(new BusTimeout(`No event on ${this.subject} within ${timeoutMs}ms`));
            }, timeoutMs);
      this.#waiters.push(waiter);
    });
  }

  /** Resolves once the server has the subscription: events published after it reach it. */
  async ready(): Promise<void> {
    await this.#nc.flush();
  }

  /** The next event, or `BusTimeout` after `timeoutMs`. */
  async next(timeoutMs = 5000): Promise<Event> {
    const msg = await this.#take(timeoutMs);
    if (msg === null) throw new BusError(`The subscription to ${this.subject} is closed`, "unavailable");
    return decodeEvent(msg);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Event> {
    for (;;) {
      const msg = await this.#take();
      if (msg === null) return;
      yield decodeEvent(msg);
    }
  }

  async close(): Promise<void> {
    if (!this.#sub.isClosed()) this.#sub.unsubscribe();
    this.#end();
  }
}

function decodeEvent(msg: Msg): Event {
  return fromWire(JSON.parse(decoder.decode(msg.data)), "Event") as Event;
}

/** One agent's memory tool: `workflowId` and `agentId` are fixed when it is made. */
export class AgentMemory {
  readonly bus: MemoryBus;
  readonly workflowId: string | undefined;
  readonly agentId: string | undefined;
  readonly sessionId: string | undefined;
  readonly workspace: string | undefined;
  /** The `context` block every request of this handle carries. */
  readonly context: Context | undefined;

  constructor(bus: MemoryBus, options: AgentOptions = {}) {
    this.bus = bus;
    this.workflowId = options.workflowId;
    this.agentId = options.agentId;
    this.sessionId = options.sessionId;
    this.workspace = options.workspace;
    const context = { ...options.context, ...(options.sessionId !== undefined && { sessionId: options.sessionId }) };
    this.context = Object.keys(context).length > 0 ? context : undefined;
  }

  /** The body of `op` with this handle's identity, where the operation's request has the
   * field: `workflow_id`, `agent_id` and `context` always the handle's; `workspace` and
   * `session_id` the handle's unless given. */
  #identified(op: OperationName, body: Obj): Obj {
    const fields = SHAPES[OPERATIONS[op].request]!.fields;
    const out: Obj = { ...body };
    const own: Array<[string, string, unknown, boolean]> = [
      ["workflow_id", "workflowId", this.workflowId, true],
      ["agent_id", "agentId", this.agentId, true],
      ["context", "context", this.context, true],
      ["workspace", "workspace", this.workspace, false],
      ["session_id", "sessionId", this.sessionId, false],
    ];
    for (const [wire, key, value, fixed] of own) {
      if (wire in fields && value !== undefined && (fixed || out[key] === undefined || out[key] === null)) {
        out[key] = value;
      }
    }
    return out;
  }

  /** Any operation, with this handle's identity filled in (see `MemoryBus.request`). */
  request<O extends OperationName>(op: O, body: OwnRequest<O>): Promise<Operations[O]["reply"]> {
    const full = this.#identified(operation(op), body as Obj) as Operations[O]["request"];
    return this.bus.request(op, full);
  }

  /** A write by request/reply, or through JetStream with `durable: true`. */
  async #write(op: DurableOperationName, options: object): Promise<unknown> {
    const { durable, requestId, ...body } = options as Obj & DurableOption;
    if (durable) {
      return this.bus.durable(op, this.#identified(op, body) as unknown as Operations[typeof op]["request"], requestId);
    }
    return this.request(op, body as unknown as OwnRequest<typeof op>);
  }

  /** Store a memory. A repeat of live content (same type and scope) is not stored twice:
   * the reply's `duplicateOf` names the memory whose `mentionCount` went up. (v4) `key`
   * names it: an add with a key that a current memory of the store holds replaces that
   * memory in place (same id, `version` + 1, reply `replaced: true`); `expectedVersion`
   * makes it conditional (0: only if no memory holds the key yet), else `Conflict`. With
   * `durable: true` it goes through JetStream and resolves to `Accepted`. */
  add(options: AddOptions & { durable: true }): Promise<Accepted>;
  add(options: AddOptions & { durable?: false }): Promise<AddReply>;
  add(options: AddOptions): Promise<AddReply | Accepted>;
  add(options: AddOptions): Promise<AddReply | Accepted> {
    return this.#write("add", options) as Promise<AddReply | Accepted>;
  }

  /** Change one memory; `ttlS: 0` makes it permanent; `validUntil: null` opens that bound.
   * An unknown id is `NotFound` (durably: a `rejected` event). With `expectedVersion`
   * (v4), only if the memory is still at that version, else `Conflict` (its
   * `currentVersion` says where it is now). */
  update(options: UpdateOptions & { durable: true }): Promise<Accepted>;
  update(options: UpdateOptions & { durable?: false }): Promise<UpdateReply>;
  update(options: UpdateOptions): Promise<UpdateReply | Accepted>;
  update(options: UpdateOptions): Promise<UpdateReply | Accepted> {
    return this.#write("update", options) as Promise<UpdateReply | Accepted>;
  }

  /** Delete memories; ids not found come back in `missing`. `erase: true` (full trust only)
   * also takes their text out of everything the service keeps; the reply counts it
   * (`erased`, `erasedMessages`). */
  delete(ids: string | string[], options: DeleteOptions & { durable: true }): Promise<Accepted>;
  delete(ids: string | string[], options?: DeleteOptions & { durable?: false }): Promise<DeleteReply>;
  delete(ids: string | string[], options?: DeleteOptions): Promise<DeleteReply | Accepted>;
  delete(ids: string | string[], options: DeleteOptions = {}): Promise<DeleteReply | Accepted> {
    const body = { ids: typeof ids === "string" ? [ids] : ids, ...options };
    return this.#write("delete", body) as Promise<DeleteReply | Accepted>;
  }

  /** Store one tool run as a `trace`. */
  capture(options: CaptureOptions & { durable: true }): Promise<Accepted>;
  capture(options: CaptureOptions & { durable?: false }): Promise<AddReply>;
  capture(options: CaptureOptions): Promise<AddReply | Accepted>;
  capture(options: CaptureOptions): Promise<AddReply | Accepted> {
    return this.#write("capture", options) as Promise<AddReply | Accepted>;
  }

  /** Memories ranked by relevance, importance and recency. */
  search(options: SearchOptions): Promise<SearchReply> {
    return this.request("search", options);
  }

  /** What is there (counts by type, tags, dates), no content: before searching. */
  describe(options: DescribeOptions = {}): Promise<DescribeReply> {
    return this.request("describe", options);
  }

  /** Memories newest first, a page at a time; `mode: "compact"` gives previews. */
  list(options?: ListOptions & { mode?: "full" }): Promise<ListReply>;
  list(options: ListOptions & { mode: "compact" }): Promise<CompactListReply>;
  list(options?: ListOptions): Promise<ListReply | CompactListReply>;
  list(options: ListOptions = {}): Promise<ListReply | CompactListReply> {
    return this.request("list", options);
  }

  /** Memories by id, in request order, then (v4) by key: ids not found come back in
   * `missing`, keys no current memory holds in `missingKeys`. */
  get(ids?: string | string[] | null, options: GetOptions = {}): Promise<GetReply> {
    const body = {
      ...(ids !== undefined && ids !== null && { ids: typeof ids === "string" ? [ids] : ids }),
      ...(options.keys !== undefined && options.keys !== null && { keys: options.keys }),
    };
    return this.request("get", body);
  }

  /** Before a model turn: the memories to put in the prompt (`reply.block` is ready text),
   * leaving out what this session was given in its last turns. */
  async recall(options: RecallOptions): Promise<RecallReply> {
    const { message, ...rest } = options;
    const sessionId = rest.sessionId ?? this.sessionId;
    if (sessionId === undefined) {
      throw new InvalidRequest(
        "recall needs a session: bus.agent({ ..., sessionId }) or recall({ ..., sessionId })",
      );
    }
    const text = typeof message === "string" ? { message } : { messages: message };
    return this.request("recall", { ...rest, ...text, sessionId });
  }

  /** What happened to one memory, oldest first. Unknown id: `NotFound`. */
  history(id: string): Promise<HistoryReply> {
    return this.request("history", { id });
  }

  /** The memories just before and after `anchor` in this agent's scope, oldest first. */
  timeline(anchor: string, options?: TimelineOptions & { mode?: "compact" }): Promise<CompactTimelineReply>;
  timeline(anchor: string, options: TimelineOptions & { mode: "full" }): Promise<TimelineReply>;
  timeline(anchor: string, options: TimelineOptions = {}): Promise<TimelineReply | CompactTimelineReply> {
    return this.request("timeline", { ...options, anchor });
  }

  /** Who the memories in scope name, most recently mentioned first. */
  people(options: PeopleOptions = {}): Promise<PeopleReply> {
    return this.request("people", options);
  }

  /** For facts an extractor proposes: the nearest current memories and what to do with
   * each (`noop`, `supersede`, `add`). Writes nothing. */
  reconcile(facts: Array<string | ReconcileFact>, options: { limit?: number } = {}): Promise<ReconcileReply> {
    const listed = facts.map((f) => (typeof f === "string" ? { content: f } : f));
    return this.request("reconcile", { ...options, facts: listed });
  }

  /** Several writes at once, all or none (`{ action: "add" | "update" | "supersede" |
   * "delete", ... }`); an update, supersede or delete with `expectedVersion` (v4) applies
   * only at that version, else the whole batch is `Conflict`. */
  apply(actions: ApplyAction[]): Promise<ApplyReply> {
    return this.request("apply", { actions });
  }

  /** Delete every memory of a type in this workflow (or the general ones); repeated until
   * nothing remains, as each call does a bounded share. */
  async clearByType(type: string, options: ClearByTypeOptions = {}): Promise<ClearByTypeReply> {
    return this.#repeat("clear_by_type", { ...options, type });
  }

  /** Keep the `keep` best current memories of a type and delete the rest. */
  async compact(options: CompactOptions): Promise<ClearByTypeReply> {
    return this.#repeat("compact", options);
  }

  async #repeat(op: "clear_by_type" | "compact", body: object): Promise<ClearByTypeReply> {
    let reply = await this.request(op, body as OwnRequest<typeof op>);
    let deleted = reply.deleted;
    while (reply.remaining > 0) {
      reply = await this.request(op, body as OwnRequest<typeof op>);
      deleted += reply.deleted;
    }
    return { ...reply, deleted, remaining: 0 };
  }

  /** Follow this agent's workflow (or general memories, for an agent without one). */
  subscribe(options: Omit<SubscribeOptions, "general"> = {}): EventStream {
    return this.bus.subscribe(this.workflowId, { ...options, general: this.workflowId === undefined });
  }
}
