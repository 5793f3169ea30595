// Generated from contracts/ by clients/typescript/scripts/gen_types.py: do not edit by hand.
// The messages of the wire protocol, with fields in camelCase (snake_case on the wire).
// Request types are what a client writes (server defaults optional); reply types are
// what the SDK returns (fields with a default always present).

export interface AddReply {
  /** Default: `true`. */
  success: boolean;
  id: string;
  /** Wire: `workflow_id`. */
  workflowId: string | null;
  importance: number;
  /** RFC 3339 date-time. Wire: `expires_at`. */
  expiresAt: string | null;
  /** Default: `null`. Wire: `duplicate_of`. */
  duplicateOf: string | null;
  /** Default: `1`. Wire: `mention_count`. */
  mentionCount: number;
  /** Default: `[]`. */
  superseded: string[];
  /** Default: `[]`. */
  missing: string[];
  redacted?: string[];
  /** Default: `1`. */
  version: number;
  /** Default: `false`. */
  replaced: boolean;
}

export interface AddRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** Not empty. Default: `null`. */
  content?: string | null;
  /** At most 32 items. Default: `[]`. */
  tags?: string[];
  /** 0.0..1.0. Default: `null`. */
  importance?: number | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `null`. */
  scope?: "general" | "workflow" | null;
  /** 0..3155760000. Default: `null`. Wire: `ttl_s`. */
  ttlS?: number | null;
  /** 60..3155760000. Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS?: number | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** At most 1024 characters. Default: `null`. */
  source?: string | null;
  /** Default: `null`. */
  metadata?: Record<string, unknown> | null;
  /** 1..4096 items. Default: `null`. */
  embedding?: number[] | null;
  /** Default: `"exact"`. */
  dedup?: "exact" | "none" | "semantic";
  /** > 0.0, <= 1.0. Default: `null`. Wire: `dedup_threshold`. */
  dedupThreshold?: number | null;
  /** 1..256 characters. Default: `null`. */
  title?: string | null;
  /** At most 32 items. Default: `[]`. */
  facts?: string[];
  /** Default: `null`. */
  narrative?: string | null;
  /** At most 32 items. Default: `[]`. Wire: `related_files`. */
  relatedFiles?: string[];
  /** At most 32 items. Default: `[]`. Wire: `related_people`. */
  relatedPeople?: string[];
  /** At most 10 items. Default: `[]`. */
  supersedes?: string[];
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** Default: `null`. */
  store?: "private" | "shared" | "social" | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 1..256 characters; pattern `^[^\x00-\x1f\x7f-\x9f]*$`. Default: `null`. */
  key?: string | null;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
}

export interface Applied {
  index: number;
  id: string;
  action: "add" | "delete" | "supersede" | "update";
}

/** Add a memory (the fields of `add`; `supersedes` and semantic dedup are refused: use a `supersede` action). */
export interface ApplyAdd {
  action: "add";
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** Not empty. Default: `null`. */
  content?: string | null;
  /** At most 32 items. Default: `[]`. */
  tags?: string[];
  /** 0.0..1.0. Default: `null`. */
  importance?: number | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `null`. */
  scope?: "general" | "workflow" | null;
  /** 0..3155760000. Default: `null`. Wire: `ttl_s`. */
  ttlS?: number | null;
  /** 60..3155760000. Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS?: number | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** At most 1024 characters. Default: `null`. */
  source?: string | null;
  /** Default: `null`. */
  metadata?: Record<string, unknown> | null;
  /** 1..4096 items. Default: `null`. */
  embedding?: number[] | null;
  /** Default: `"exact"`. */
  dedup?: "exact" | "none" | "semantic";
  /** > 0.0, <= 1.0. Default: `null`. Wire: `dedup_threshold`. */
  dedupThreshold?: number | null;
  /** 1..256 characters. Default: `null`. */
  title?: string | null;
  /** At most 32 items. Default: `[]`. */
  facts?: string[];
  /** Default: `null`. */
  narrative?: string | null;
  /** At most 32 items. Default: `[]`. Wire: `related_files`. */
  relatedFiles?: string[];
  /** At most 32 items. Default: `[]`. Wire: `related_people`. */
  relatedPeople?: string[];
  /** At most 10 items. Default: `[]`. */
  supersedes?: string[];
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** Default: `null`. */
  store?: "private" | "shared" | "social" | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 1..256 characters; pattern `^[^\x00-\x1f\x7f-\x9f]*$`. Default: `null`. */
  key?: string | null;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
}

/** Delete memory `id`. */
export interface ApplyDelete {
  action: "delete";
  /** 1..64 characters. */
  id: string;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
}

export interface ApplyReply {
  /** Default: `true`. */
  success: boolean;
  results: Applied[];
  redacted?: string[];
}

/** Several writes of one namespace applied atomically: all, or none when any one is refused (v3). `workflow_id`, `workspace` and `agent_id` are each action's default. */
export interface ApplyRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..50 items. */
  actions: Array<ApplyAdd | ApplyUpdate | ApplySupersede | ApplyDelete>;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
}

/** Add a memory that supersedes memory `id` (the fields of `add`). */
export interface ApplySupersede {
  action: "supersede";
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** Not empty. Default: `null`. */
  content?: string | null;
  /** At most 32 items. Default: `[]`. */
  tags?: string[];
  /** 0.0..1.0. Default: `null`. */
  importance?: number | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `null`. */
  scope?: "general" | "workflow" | null;
  /** 0..3155760000. Default: `null`. Wire: `ttl_s`. */
  ttlS?: number | null;
  /** 60..3155760000. Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS?: number | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** At most 1024 characters. Default: `null`. */
  source?: string | null;
  /** Default: `null`. */
  metadata?: Record<string, unknown> | null;
  /** 1..4096 items. Default: `null`. */
  embedding?: number[] | null;
  /** Default: `"exact"`. */
  dedup?: "exact" | "none" | "semantic";
  /** > 0.0, <= 1.0. Default: `null`. Wire: `dedup_threshold`. */
  dedupThreshold?: number | null;
  /** 1..256 characters. Default: `null`. */
  title?: string | null;
  /** At most 32 items. Default: `[]`. */
  facts?: string[];
  /** Default: `null`. */
  narrative?: string | null;
  /** At most 32 items. Default: `[]`. Wire: `related_files`. */
  relatedFiles?: string[];
  /** At most 32 items. Default: `[]`. Wire: `related_people`. */
  relatedPeople?: string[];
  /** At most 10 items. Default: `[]`. */
  supersedes?: string[];
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** Default: `null`. */
  store?: "private" | "shared" | "social" | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 1..256 characters; pattern `^[^\x00-\x1f\x7f-\x9f]*$`. Default: `null`. */
  key?: string | null;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
  /** 1..64 characters. */
  id: string;
}

/** Change memory `id` (the fields of `update`). */
export interface ApplyUpdate {
  action: "update";
  /** Default: `null`. */
  context?: Context | null;
  /** 1..64 characters. */
  id: string;
  /** Not empty. Default: `null`. */
  content?: string | null;
  /** At most 32 items. Default: `null`. */
  tags?: string[] | null;
  /** 0.0..1.0. Default: `null`. */
  importance?: number | null;
  /** 0..3155760000. Default: `null`. Wire: `ttl_s`. */
  ttlS?: number | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** RFC 3339 date-time. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
}

export interface ArchiveStateRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  workspace: string;
  /** 1..128 characters. */
  name: string;
}

export interface ArchiveWorkspaceRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  name: string;
}

/** The record of one tool run, published by an agent runtime after the call: stored as a `trace` memory (never folded by dedup). */
export interface CaptureRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  tool: string;
  /** Default: `{}`. */
  args?: Record<string, unknown>;
  /** Default: `""`. */
  output?: string;
  /** Default: `false`. */
  error?: boolean;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** At least 0.0. Default: `null`. Wire: `duration_ms`. */
  durationMs?: number | null;
}

/** A field's value before and after a change (null where it had none). */
export interface Change {
  /** Default: `null`. */
  old: unknown;
  /** Default: `null`. */
  new: unknown;
}

export interface ClearByTypeReply {
  /** Default: `true`. */
  success: boolean;
  deleted: number;
  /** Default: `0`. */
  remaining: number;
}

export interface ClearByTypeRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"workflow"`. */
  scope?: "general" | "workflow";
}

export interface CompactListReply {
  /** Default: `true`. */
  success: boolean;
  count: number;
  total: number;
  /** Default: `"compact"`. */
  mode: "compact";
  memories: CompactMemory[];
  /** Default: `false`. */
  truncated: boolean;
}

export interface CompactMemory {
  id: string;
  type: string;
  preview: string;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `0.0`. */
  importance: number;
  /** Default: `null`. Wire: `workflow_id`. */
  workflowId: string | null;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
}

/** Keep the best `keep` current memories of a type in scope, delete the rest (v3). */
export interface CompactRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** 0..100000. */
  keep: number;
  by: "accesses" | "importance" | "recency";
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
}

export interface CompactTimelineReply {
  /** Default: `true`. */
  success: boolean;
  /** Default: `"compact"`. */
  mode: "compact";
  memories: CompactMemory[];
  /** Wire: `anchor_index`. */
  anchorIndex: number;
  /** Default: `false`. */
  truncated: boolean;
}

/** What the calling agent is doing; any request may carry it. It never changes what a request does, except that writes record `session_id`; handlers log `session_id`. */
export interface Context {
  /** Pattern `^[A-Za-z0-9_.:-]{1,128}$`. Default: `null`. Wire: `session_id`. */
  sessionId?: string | null;
  /** At most 4096 characters. Default: `null`. */
  goal?: string | null;
  /** At most 4096 characters. Default: `null`. */
  memory?: string | null;
  /** At most 4096 characters. Default: `null`. */
  constraints?: string | null;
}

/** A save point: what was going on, so that any later session can resume from it. */
export interface CreateStateRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  workspace: string;
  /** 1..128 characters. */
  name: string;
  /** Wire: `conversation_context`. */
  conversationContext: string;
  /** At most 4096 characters. Wire: `active_task`. */
  activeTask: string;
  /** At most 32 items. Wire: `active_files`. */
  activeFiles: string[];
  /** At most 32 items. Wire: `next_steps`. */
  nextSteps: string[];
  /** At most 4096 characters. Default: `null`. */
  description?: string | null;
  /** At most 32 items. Default: `[]`. */
  tags?: string[];
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
}

export interface CreateWorkspaceRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  name: string;
  /** At most 4096 characters. */
  description: string;
  /** At most 1024 characters. Wire: `root_folder`. */
  rootFolder: string;
  /** At most 4096 characters. */
  purpose: string;
  /** At most 32 items. Default: `[]`. */
  workflows?: string[];
  /** At most 32 items. Default: `[]`. Wire: `key_files`. */
  keyFiles?: string[];
  /** Default: `{}`. */
  preferences?: Record<string, unknown>;
}

export interface DeleteReply {
  /** Default: `true`. */
  success: boolean;
  deleted: number;
  missing: string[];
  erased?: number;
  /** Wire: `erased_messages`. */
  erasedMessages?: number;
  /** Wire: `scan_complete`. */
  scanComplete?: boolean;
}

export interface DeleteRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..100 items. */
  ids: string[];
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** Default: `false`. */
  erase?: boolean;
}

export interface DescribeReply {
  /** Default: `true`. */
  success: boolean;
  total: number;
  /** Wire: `by_type`. */
  byType: Record<string, number>;
  tags: string[];
  scope: "both" | "general" | "workflow";
  /** Wire: `workflow_id`. */
  workflowId: string | null;
  /** Wire: `workflow_count`. */
  workflowCount: number;
  /** Wire: `general_count`. */
  generalCount: number;
  /** RFC 3339 date-time. */
  oldest: string | null;
  /** RFC 3339 date-time. */
  newest: string | null;
  embedder: string;
  dimension: number;
  /** Default: `0`. Wire: `superseded_count`. */
  supersededCount: number;
  /** Default: `false`. Wire: `tags_truncated`. */
  tagsTruncated: boolean;
  /** Default: `0`. Wire: `idle_count`. */
  idleCount: number | null;
}

export interface DescribeRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
}

/**
 * Why a request failed; the error reply's `error` says how to recover. Error replies carry the same as the NATS micro headers `Nats-Service-Error-Code` (the number) and `Nats-Service-Error` (the message). Codes are only ever added: a client reads one it does not know as a failure all the same.
 * - `invalid_request` (400): malformed JSON, unknown field, wrong type, out of range, unknown memory type, bad namespace token, too deep nesting
 * - `not_found` (404): `update` of an id that names no live memory (`get`/`delete` report ids in `missing`)
 * - `conflict` (409): a unique name already taken; (v4) a write whose `expected_version` no longer holds, a supersede of a memory superseded already, an `apply` whose actions meet on one memory: the reply then also carries `id` and `current_version` (see Versions)
 * - `too_large` (413): body over 256 KiB, `content` over 32 KiB (UTF-8 bytes), `metadata` over 8 KiB
 * - `forbidden` (403): trust `public`; a store the caller cannot see; a workspace or state operation below full trust
 * - `unavailable` (503): the handler is busy (see Load shedding), Redis unreachable, embedder failed, or this handler embeds with another model than the namespace (see Embedders); safe to retry
 * - `internal` (500): anything else; the message carries a correlation id that is also the `request_id` in the handler's logs
 */
export type ErrorCode = "invalid_request" | "not_found" | "conflict" | "too_large" | "forbidden" | "unavailable" | "internal";

export interface ErrorReply {
  /** Default: `false`. */
  success: boolean;
  code: ErrorCode;
  error: string;
  id?: string;
  /** Wire: `current_version`. */
  currentVersion?: number;
}

export interface Event {
  action: string;
  id: string;
  type: string;
  /** Wire: `workflow_id`. */
  workflowId: string | null;
  /** Wire: `agent_id`. */
  agentId: string | null;
  /** RFC 3339 date-time. */
  at: string;
  preview: string;
  workspace?: string;
  /** Default: `"private"`. */
  store: "private" | "shared" | "social";
  /** Wire: `request_id`. */
  requestId?: string;
  /** Default: `1`. */
  version: number;
  erased?: boolean;
}

export interface ExportReply {
  /** Default: `true`. */
  success: boolean;
  memories: ExportedMemory[];
  cursor: string | null;
  /** Default: `[]`. */
  pending: string[];
  embedder: string;
  dimension: number;
}

/** A page of the namespace's live memories, whole (PROTOCOL v2 "Export and import"): start with the default cursor and pass each reply's `cursor` on until it is null. */
export interface ExportRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Pattern `^[0-9]{1,20}$`. Default: `"0"`. */
  cursor?: string;
  /** 1..100 items. Default: `null`. */
  ids?: string[] | null;
  /** 1..1000. Default: `200`. */
  limit?: number;
  /** Default: `false`. */
  embeddings?: boolean;
}

/** A memory as `export` gives it: everything `import` needs to write it back. */
export interface ExportedMemory {
  id: string;
  type: string;
  content: string;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `0.0`. */
  importance: number;
  /** Default: `null`. Wire: `workflow_id`. */
  workflowId: string | null;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. */
  source: string | null;
  /** Default: `{}`. */
  metadata: Record<string, unknown>;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
  /** RFC 3339 date-time. Default: `null`. Wire: `expires_at`. */
  expiresAt: string | null;
  /** Default: `0`. Wire: `access_count`. */
  accessCount: number;
  /** RFC 3339 date-time. Default: `null`. Wire: `last_accessed_at`. */
  lastAccessedAt: string | null;
  /** Default: `1`. Wire: `mention_count`. */
  mentionCount: number;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
  /** Default: `null`. */
  title: string | null;
  /** Default: `[]`. */
  facts: string[];
  /** Default: `null`. */
  narrative: string | null;
  /** Default: `[]`. Wire: `related_files`. */
  relatedFiles: string[];
  /** Default: `[]`. Wire: `related_people`. */
  relatedPeople: string[];
  /** Default: `null`. Wire: `superseded_by`. */
  supersededBy: string | null;
  /** Default: `null`. */
  workspace: string | null;
  /** Default: `"private"`. */
  store: "private" | "shared" | "social";
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil: string | null;
  /** Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS: number | null;
  /** Default: `1`. */
  version: number;
  /** Default: `null`. */
  key: string | null;
  /** Default: `""`. Wire: `content_hash`. */
  contentHash: string;
  /** Default: `null`. */
  embedding: number[] | null;
  /** Default: `null`. Wire: `embedding_of`. */
  embeddingOf: string | null;
}

export interface GetReply {
  /** Default: `true`. */
  success: boolean;
  memories: Memory[];
  missing: string[];
  /** Default: `false`. */
  truncated: boolean;
  /** Default: `[]`. Wire: `missing_keys`. */
  missingKeys: string[];
}

export interface GetRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..100 items. Default: `null`. */
  ids?: string[] | null;
  /** 1..100 items. Default: `null`. */
  keys?: string[] | null;
}

export interface HistoryEntry {
  event: string;
  /** RFC 3339 date-time. */
  at: string;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
  /** Default: `{}`. */
  changes: Record<string, Change>;
  /** Default: `null`. */
  reason: string | null;
}

export interface HistoryReply {
  /** Default: `true`. */
  success: boolean;
  id: string;
  entries: HistoryEntry[];
  /** Default: `false`. */
  truncated: boolean;
}

export interface HistoryRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..64 characters. */
  id: string;
}

export interface ImportReply {
  /** Default: `true`. */
  success: boolean;
  /** Default: `[]`. */
  created: string[];
  /** Default: `[]`. */
  existing: string[];
  /** Default: `[]`. */
  expired: string[];
}

/** Write exported memories as they were: same ids, times, expiry and counters. A memory whose id exists already is left as it is, so running an import twice changes nothing. */
export interface ImportRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..100 items. */
  memories: ImportedMemory[];
}

/** One memory of an `import`: an `export` line, checked like an `add`. */
export interface ImportedMemory {
  /** Pattern `^[0-9A-Za-z_-]{1,64}$`. */
  id: string;
  /** Pattern `^[a-z0-9_]{1,64}$`. */
  type: string;
  /** Not empty. */
  content: string;
  /** At most 32 items. Default: `[]`. */
  tags?: string[];
  /** 0.0..1.0. Default: `0.5`. */
  importance?: number;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** At most 1024 characters. Default: `null`. */
  source?: string | null;
  /** Default: `{}`. */
  metadata?: Record<string, unknown>;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string | Date;
  /** RFC 3339 date-time. Default: `null`. Wire: `updated_at`. */
  updatedAt?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `expires_at`. */
  expiresAt?: string | Date | null;
  /** 0..9007199254740991. Default: `0`. Wire: `access_count`. */
  accessCount?: number;
  /** RFC 3339 date-time. Default: `null`. Wire: `last_accessed_at`. */
  lastAccessedAt?: string | Date | null;
  /** 1..9007199254740991. Default: `1`. Wire: `mention_count`. */
  mentionCount?: number;
  /** Pattern `^[A-Za-z0-9_.:-]{1,128}$`. Default: `null`. Wire: `session_id`. */
  sessionId?: string | null;
  /** 1..256 characters. Default: `null`. */
  title?: string | null;
  /** At most 32 items. Default: `[]`. */
  facts?: string[];
  /** Default: `null`. */
  narrative?: string | null;
  /** At most 32 items. Default: `[]`. Wire: `related_files`. */
  relatedFiles?: string[];
  /** At most 32 items. Default: `[]`. Wire: `related_people`. */
  relatedPeople?: string[];
  /** Pattern `^[0-9A-Za-z_-]{1,64}$`. Default: `null`. Wire: `superseded_by`. */
  supersededBy?: string | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** Default: `"private"`. */
  store?: "private" | "shared" | "social";
  /** At most 64 characters. Default: `null`. Wire: `content_hash`. */
  contentHash?: string | null;
  /** 1..4096 items. Default: `null`. */
  embedding?: number[] | null;
  /** At most 64 characters. Default: `null`. Wire: `embedding_of`. */
  embeddingOf?: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 60..3155760000. Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS?: number | null;
  /** 1..9007199254740991. Default: `1`. */
  version?: number;
  /** 1..256 characters; pattern `^[^\x00-\x1f\x7f-\x9f]*$`. Default: `null`. */
  key?: string | null;
}

/** `list_workspaces` and `list_states`: oldest first. */
export interface ListDataReply {
  /** Default: `true`. */
  success: boolean;
  data: NamedItem[];
  truncated?: boolean;
}

export interface ListReply {
  /** Default: `true`. */
  success: boolean;
  count: number;
  total: number;
  /** Default: `"full"`. */
  mode: "full";
  memories: Memory[];
  /** Default: `false`. */
  truncated: boolean;
}

export interface ListRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Default: `"full"`. */
  mode?: "compact" | "full";
  /** At most 64 items. Default: `null`. */
  types?: string[] | null;
  /** At most 32 items. Default: `null`. */
  tags?: string[] | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** 1..200. Default: `20`. */
  limit?: number;
  /** 0..10000. Default: `0`. */
  offset?: number;
  /** 1..1000000. Default: `null`. Wire: `max_tokens`. */
  maxTokens?: number | null;
  /** At most 32 items. Default: `null`. */
  people?: string[] | null;
  /** Default: `false`. Wire: `include_superseded`. */
  includeSuperseded?: boolean;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `as_of`. */
  asOf?: string | Date | null;
}

export interface ListStatesRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  workspace: string;
  /** Default: `false`. Wire: `include_archived`. */
  includeArchived?: boolean;
}

export interface ListWorkspacesRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** Default: `false`. Wire: `include_archived`. */
  includeArchived?: boolean;
}

export interface LoadStateRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  workspace: string;
  /** 1..128 characters. */
  name: string;
}

export interface LoadWorkspaceRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  name: string;
}

/** A stored memory as replies show it (never with its embedding). */
export interface Memory {
  id: string;
  type: string;
  content: string;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `0.0`. */
  importance: number;
  /** Default: `null`. Wire: `workflow_id`. */
  workflowId: string | null;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. */
  source: string | null;
  /** Default: `{}`. */
  metadata: Record<string, unknown>;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
  /** RFC 3339 date-time. Default: `null`. Wire: `expires_at`. */
  expiresAt: string | null;
  /** Default: `0`. Wire: `access_count`. */
  accessCount: number;
  /** RFC 3339 date-time. Default: `null`. Wire: `last_accessed_at`. */
  lastAccessedAt: string | null;
  /** Default: `1`. Wire: `mention_count`. */
  mentionCount: number;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
  /** Default: `null`. */
  title: string | null;
  /** Default: `[]`. */
  facts: string[];
  /** Default: `null`. */
  narrative: string | null;
  /** Default: `[]`. Wire: `related_files`. */
  relatedFiles: string[];
  /** Default: `[]`. Wire: `related_people`. */
  relatedPeople: string[];
  /** Default: `null`. Wire: `superseded_by`. */
  supersededBy: string | null;
  /** Default: `null`. */
  workspace: string | null;
  /** Default: `"private"`. */
  store: "private" | "shared" | "social";
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil: string | null;
  /** Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS: number | null;
  /** Default: `1`. */
  version: number;
  /** Default: `null`. */
  key: string | null;
}

/** One workspace or state of a list. */
export interface NamedItem {
  name: string;
  description: string | null;
  /** Default: `false`. Wire: `is_archived`. */
  isArchived: boolean;
}

/** A current memory near a candidate fact: cosine similarity in [-1, 1]. */
export interface Neighbour {
  id: string;
  content: string;
  type: string;
  similarity: number;
}

/** `{"success": true}`: the caller already knows what it sent. */
export interface OkReply {
  /** Default: `true`. */
  success: boolean;
  redacted?: string[];
}

export interface PeopleReply {
  /** Default: `true`. */
  success: boolean;
  people: Person[];
  /** Default: `false`. */
  truncated: boolean;
}

/** Who the memories in scope name (`related_people`). */
export interface PeopleRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. Default: `null`. */
  query?: string | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** 1..200. Default: `20`. */
  limit?: number;
}

export interface Person {
  name: string;
  /** Wire: `mention_count`. */
  mentionCount: number;
  /** RFC 3339 date-time. Wire: `last_mentioned_at`. */
  lastMentionedAt: string;
  /** Wire: `memory_ids`. */
  memoryIds: string[];
}

export interface RecallReply {
  /** Default: `true`. */
  success: boolean;
  turn: number;
  /** Default: `false`. */
  skipped: boolean;
  /** Default: `[]`. */
  results: RecalledMemory[];
  /** Default: `""`. */
  block: string;
  /** Default: `false`. */
  truncated: boolean;
  /** Default: `0`. Wire: `left_out_recalled`. */
  leftOutRecalled: number;
  /** Default: `0`. Wire: `left_out_similar`. */
  leftOutSimilar: number;
}

/** Before a model turn: what the agent should have in mind (no model call). */
export interface RecallRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..4096 characters. Default: `null`. */
  message?: string | null;
  /** At most 32 items. Default: `[]`. */
  messages?: string[];
  /** Pattern `^[A-Za-z0-9_.:-]{1,128}$`. Wire: `session_id`. */
  sessionId: string;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** At most 64 items. Default: `null`. */
  types?: string[] | null;
  /** At most 32 items. Default: `null`. */
  people?: string[] | null;
  /** 1..64 characters. Default: `"user"`. */
  source?: string;
  /** 1..9007199254740991. Default: `null`. */
  turn?: number | null;
  /** 1..50. Default: `20`. */
  limit?: number;
  /** 0..3155760000. Default: `21600`. Wire: `recent_s`. */
  recentS?: number;
  /** 0.0..1.0. Default: `0.8`. Wire: `min_importance`. */
  minImportance?: number;
  /** 0.0..1.0. Default: `0.85`. Wire: `dedup_threshold`. */
  dedupThreshold?: number;
  /** 1..10000. Default: `10`. Wire: `reinject_after`. */
  reinjectAfter?: number;
  /** 1..1000000. Default: `null`. Wire: `max_tokens`. */
  maxTokens?: number | null;
  /** Default: `false`. Wire: `include_superseded`. */
  includeSuperseded?: boolean;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `as_of`. */
  asOf?: string | Date | null;
}

export interface RecalledMemory {
  id: string;
  type: string;
  content: string;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `0.0`. */
  importance: number;
  /** Default: `null`. Wire: `workflow_id`. */
  workflowId: string | null;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. */
  source: string | null;
  /** Default: `{}`. */
  metadata: Record<string, unknown>;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
  /** RFC 3339 date-time. Default: `null`. Wire: `expires_at`. */
  expiresAt: string | null;
  /** Default: `0`. Wire: `access_count`. */
  accessCount: number;
  /** RFC 3339 date-time. Default: `null`. Wire: `last_accessed_at`. */
  lastAccessedAt: string | null;
  /** Default: `1`. Wire: `mention_count`. */
  mentionCount: number;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
  /** Default: `null`. */
  title: string | null;
  /** Default: `[]`. */
  facts: string[];
  /** Default: `null`. */
  narrative: string | null;
  /** Default: `[]`. Wire: `related_files`. */
  relatedFiles: string[];
  /** Default: `[]`. Wire: `related_people`. */
  relatedPeople: string[];
  /** Default: `null`. Wire: `superseded_by`. */
  supersededBy: string | null;
  /** Default: `null`. */
  workspace: string | null;
  /** Default: `"private"`. */
  store: "private" | "shared" | "social";
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil: string | null;
  /** Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS: number | null;
  /** Default: `1`. */
  version: number;
  /** Default: `null`. */
  key: string | null;
  /** Default: `0.0`. */
  score: number;
  /** Default: `0.0`. */
  similarity: number;
  /** Default: `0.0`. Wire: `text_score`. */
  textScore: number;
  /** Default: `"semantic"`. */
  path: string;
}

/** A candidate fact, as an extractor found it (v3 `reconcile`). */
export interface ReconcileFact {
  /** Not empty. */
  content: string;
  /** Pattern `^[a-z0-9_]{1,64}$`. Default: `null`. */
  type?: string | null;
  /** 1..256 characters. Default: `null`. */
  title?: string | null;
}

export interface ReconcileReply {
  /** Default: `true`. */
  success: boolean;
  results: Reconciled[];
  redacted?: string[];
}

/** For each candidate fact, the nearest current memories in scope and what to do with it (read-only: nothing is written). */
export interface ReconcileRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..50 items. */
  facts: ReconcileFact[];
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** 1..10. Default: `3`. */
  limit?: number;
}

export interface Reconciled {
  content: string;
  action: "add" | "noop" | "supersede";
  /** Default: `null`. */
  target: string | null;
  /** Default: `[]`. */
  neighbours: Neighbour[];
}

/** A durable write that can never succeed (bad input), on `mem.<ns>.events._rejected.<op>.rejected`: it is not retried. */
export interface RejectedEvent {
  /** Wire: `request_id`. */
  requestId: string;
  code: string;
  error: string;
}

export interface ScoredMemory {
  id: string;
  type: string;
  content: string;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `0.0`. */
  importance: number;
  /** Default: `null`. Wire: `workflow_id`. */
  workflowId: string | null;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. */
  source: string | null;
  /** Default: `{}`. */
  metadata: Record<string, unknown>;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
  /** RFC 3339 date-time. Default: `null`. Wire: `expires_at`. */
  expiresAt: string | null;
  /** Default: `0`. Wire: `access_count`. */
  accessCount: number;
  /** RFC 3339 date-time. Default: `null`. Wire: `last_accessed_at`. */
  lastAccessedAt: string | null;
  /** Default: `1`. Wire: `mention_count`. */
  mentionCount: number;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
  /** Default: `null`. */
  title: string | null;
  /** Default: `[]`. */
  facts: string[];
  /** Default: `null`. */
  narrative: string | null;
  /** Default: `[]`. Wire: `related_files`. */
  relatedFiles: string[];
  /** Default: `[]`. Wire: `related_people`. */
  relatedPeople: string[];
  /** Default: `null`. Wire: `superseded_by`. */
  supersededBy: string | null;
  /** Default: `null`. */
  workspace: string | null;
  /** Default: `"private"`. */
  store: "private" | "shared" | "social";
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_from`. */
  validFrom: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `valid_until`. */
  validUntil: string | null;
  /** Default: `null`. Wire: `idle_ttl_s`. */
  idleTtlS: number | null;
  /** Default: `1`. */
  version: number;
  /** Default: `null`. */
  key: string | null;
  /** Default: `0.0`. */
  score: number;
  /** Default: `0.0`. */
  similarity: number;
  /** Default: `0.0`. Wire: `text_score`. */
  textScore: number;
}

export interface SearchReply {
  /** Default: `true`. */
  success: boolean;
  results: ScoredMemory[];
  /** Default: `"vector"`. */
  mode: "hybrid" | "text" | "vector";
  /** Default: `false`. */
  truncated: boolean;
}

export interface SearchRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..4096 characters. Default: `null`. */
  query?: string | null;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** At most 64 items. Default: `null`. */
  types?: string[] | null;
  /** At most 32 items. Default: `null`. */
  tags?: string[] | null;
  /** 1..100. Default: `10`. */
  limit?: number;
  /** Default: `null`. Wire: `min_score`. */
  minScore?: number | null;
  /** RFC 3339 date-time. Default: `null`. */
  since?: string | Date | null;
  /** RFC 3339 date-time. Default: `null`. */
  until?: string | Date | null;
  /** 1..4096 items. Default: `null`. */
  embedding?: number[] | null;
  /** Default: `null`. */
  mode?: "hybrid" | "text" | "vector" | null;
  /** Default: `null`. */
  fusion?: "linear" | "rrf" | null;
  /** 1..1000000. Default: `null`. Wire: `max_tokens`. */
  maxTokens?: number | null;
  /** 0.0..1.0. Default: `null`. */
  diversify?: number | null;
  /** At most 32 items. Default: `null`. */
  people?: string[] | null;
  /** Default: `false`. Wire: `include_superseded`. */
  includeSuperseded?: boolean;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
  /** RFC 3339 date-time. Default: `null`. Wire: `as_of`. */
  asOf?: string | Date | null;
}

export interface State {
  name: string;
  workspace: string;
  /** Wire: `conversation_context`. */
  conversationContext: string;
  /** Wire: `active_task`. */
  activeTask: string;
  /** Default: `[]`. Wire: `active_files`. */
  activeFiles: string[];
  /** Default: `[]`. Wire: `next_steps`. */
  nextSteps: string[];
  /** Default: `null`. */
  description: string | null;
  /** Default: `[]`. */
  tags: string[];
  /** Default: `false`. Wire: `is_archived`. */
  isArchived: boolean;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  id: string;
  /** Default: `null`. Wire: `agent_id`. */
  agentId: string | null;
  /** Default: `null`. Wire: `session_id`. */
  sessionId: string | null;
}

export interface StateReply {
  /** Default: `true`. */
  success: boolean;
  data: State;
}

export interface TimelineReply {
  /** Default: `true`. */
  success: boolean;
  /** Default: `"full"`. */
  mode: "full";
  memories: Memory[];
  /** Wire: `anchor_index`. */
  anchorIndex: number;
  /** Default: `false`. */
  truncated: boolean;
}

/** The memories just before and after one, as the caller's scope sees them. */
export interface TimelineRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..64 characters. */
  anchor: string;
  /** 0..50. Default: `5`. */
  before?: number;
  /** 0..50. Default: `5`. */
  after?: number;
  /** Pattern `^[A-Za-z0-9_-]{1,128}$`. Default: `null`. Wire: `workflow_id`. */
  workflowId?: string | null;
  /** Default: `"both"`. */
  scope?: "both" | "general" | "workflow";
  /** At most 64 items. Default: `null`. */
  types?: string[] | null;
  /** Default: `"compact"`. */
  mode?: "compact" | "full";
  /** Default: `false`. Wire: `include_superseded`. */
  includeSuperseded?: boolean;
  /** RFC 3339 date-time. Default: `null`. Wire: `as_of`. */
  asOf?: string | Date | null;
  /** 1..128 characters. Default: `null`. */
  workspace?: string | null;
}

export interface UpdateReply {
  /** Default: `true`. */
  success: boolean;
  id: string;
  /** Wire: `workflow_id`. */
  workflowId: string | null;
  importance: number;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
  /** RFC 3339 date-time. Wire: `expires_at`. */
  expiresAt: string | null;
  redacted?: string[];
  /** Default: `1`. */
  version: number;
}

/** Change one memory; fields left out stay as they are. `ttl_s: 0` makes it permanent. */
export interface UpdateRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..64 characters. */
  id: string;
  /** Not empty. Default: `null`. */
  content?: string | null;
  /** At most 32 items. Default: `null`. */
  tags?: string[] | null;
  /** 0.0..1.0. Default: `null`. */
  importance?: number | null;
  /** 0..3155760000. Default: `null`. Wire: `ttl_s`. */
  ttlS?: number | null;
  /** 1..128 characters. Default: `null`. Wire: `agent_id`. */
  agentId?: string | null;
  /** RFC 3339 date-time. Wire: `valid_from`. */
  validFrom?: string | Date | null;
  /** RFC 3339 date-time. Wire: `valid_until`. */
  validUntil?: string | Date | null;
  /** 0..9007199254740991. Default: `null`. Wire: `expected_version`. */
  expectedVersion?: number | null;
}

/** Change a workspace; fields left out stay as they are. `is_archived: false` restores an archived workspace. */
export interface UpdateWorkspaceRequest {
  /** Default: `null`. */
  context?: Context | null;
  /** 1..128 characters. */
  name: string;
  /** At most 4096 characters. Default: `null`. */
  description?: string | null;
  /** At most 1024 characters. Default: `null`. Wire: `root_folder`. */
  rootFolder?: string | null;
  /** At most 4096 characters. Default: `null`. */
  purpose?: string | null;
  /** At most 32 items. Default: `null`. */
  workflows?: string[] | null;
  /** At most 32 items. Default: `null`. Wire: `key_files`. */
  keyFiles?: string[] | null;
  /** Default: `null`. */
  preferences?: Record<string, unknown> | null;
  /** Default: `null`. Wire: `is_archived`. */
  isArchived?: boolean | null;
}

export interface Workspace {
  name: string;
  description: string;
  /** Wire: `root_folder`. */
  rootFolder: string;
  purpose: string;
  /** Default: `[]`. */
  workflows: string[];
  /** Default: `[]`. Wire: `key_files`. */
  keyFiles: string[];
  /** Default: `{}`. */
  preferences: Record<string, unknown>;
  /** Default: `false`. Wire: `is_archived`. */
  isArchived: boolean;
  /** RFC 3339 date-time. Wire: `created_at`. */
  createdAt: string;
  /** RFC 3339 date-time. Wire: `updated_at`. */
  updatedAt: string;
}

export interface WorkspaceReply {
  /** Default: `true`. */
  success: boolean;
  data: Workspace;
}

/** Each operation's request and reply (`mem.<ns>.<operation>`). */
export interface Operations {
  add: { request: AddRequest; reply: AddReply };
  search: { request: SearchRequest; reply: SearchReply };
  describe: { request: DescribeRequest; reply: DescribeReply };
  list: { request: ListRequest; reply: ListReply | CompactListReply };
  get: { request: GetRequest; reply: GetReply };
  delete: { request: DeleteRequest; reply: DeleteReply };
  clear_by_type: { request: ClearByTypeRequest; reply: ClearByTypeReply };
  compact: { request: CompactRequest; reply: ClearByTypeReply };
  update: { request: UpdateRequest; reply: UpdateReply };
  apply: { request: ApplyRequest; reply: ApplyReply };
  history: { request: HistoryRequest; reply: HistoryReply };
  recall: { request: RecallRequest; reply: RecallReply };
  timeline: { request: TimelineRequest; reply: TimelineReply | CompactTimelineReply };
  people: { request: PeopleRequest; reply: PeopleReply };
  create_workspace: { request: CreateWorkspaceRequest; reply: OkReply };
  list_workspaces: { request: ListWorkspacesRequest; reply: ListDataReply };
  load_workspace: { request: LoadWorkspaceRequest; reply: WorkspaceReply };
  update_workspace: { request: UpdateWorkspaceRequest; reply: OkReply };
  archive_workspace: { request: ArchiveWorkspaceRequest; reply: OkReply };
  create_state: { request: CreateStateRequest; reply: OkReply };
  list_states: { request: ListStatesRequest; reply: ListDataReply };
  load_state: { request: LoadStateRequest; reply: StateReply };
  archive_state: { request: ArchiveStateRequest; reply: OkReply };
  capture: { request: CaptureRequest; reply: AddReply };
  reconcile: { request: ReconcileRequest; reply: ReconcileReply };
  export: { request: ExportRequest; reply: ExportReply };
  import: { request: ImportRequest; reply: ImportReply };
}

export type OperationName = keyof Operations;
/** Operations that may also be sent through JetStream (`memq.<ns>.<operation>`). */
export type DurableOperationName = "add" | "delete" | "update" | "capture" | "import";
