// memory-bus for TypeScript: `const bus = await MemoryBus.connect({ servers, namespace })`,
// then `const mem = bus.agent({ workflowId, agentId })` and `await mem.add({ type, content })`.
// The wire protocol is docs/asyncapi.yaml (and docs/protocol.md) of the memory-bus repository.

export {
  AgentMemory,
  EventStream,
  MemoryBus,
  eventFilter,
  requestSubject,
  type Accepted,
  type AddOptions,
  type AgentOptions,
  type ApplyAction,
  type CaptureOptions,
  type ClearByTypeOptions,
  type CompactOptions,
  type ConnectOptions,
  type DescribeOptions,
  type DeleteOptions,
  type DurableOption,
  type GetOptions,
  type ListOptions,
  type PeopleOptions,
  type RecallOptions,
  type SearchOptions,
  type SubscribeOptions,
  type TimelineOptions,
  type UpdateOptions,
} from "./bus.js";
export {
  BusError,
  BusTimeout,
  Conflict,
  Forbidden,
  Internal,
  InvalidRequest,
  NotFound,
  TooLarge,
  Unavailable,
  errorFor,
  type ErrorDetails,
} from "./errors.js";
export { DURABLE_STREAM, ERROR_CODES, OPERATIONS, TRUST_LEVELS, type Trust } from "./protocol.js";
export { fromWire, toWire } from "./wire.js";
export type * from "./types.js";
