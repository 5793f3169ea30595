// The camelCase <-> snake_case mapping, driven by the tables generated from the contracts
// (src/protocol.ts): no server needed.

import assert from "node:assert/strict";
import { test } from "node:test";

import { BusError, Conflict, NotFound, errorFor, fromWire, toWire } from "../dist/index.js";

test("a request's fields go snake_case; free JSON, dates and unknown fields as documented", () => {
  const wire = toWire(
    {
      type: "fact",
      content: "The office is in Porto",
      ttlS: 60,
      idleTtlS: undefined,
      relatedPeople: ["Ana"],
      validFrom: new Date("2020-01-01T00:00:00Z"),
      metadata: { camelKey: 1, snake_key: { innerKey: 2 } },
      context: { sessionId: "s-1", goal: "move" },
      typo: 1,
    },
    "AddRequest",
  );
  assert.deepEqual(wire, {
    type: "fact",
    content: "The office is in Porto",
    ttl_s: 60,
    related_people: ["Ana"],
    valid_from: "2020-01-01T00:00:00.000Z",
    metadata: { camelKey: 1, snake_key: { innerKey: 2 } },
    context: { session_id: "s-1", goal: "move" },
    typo: 1,
  });
  // `null` is sent (it means something, e.g. "open this bound"); `undefined` is not.
  assert.deepEqual(toWire({ id: "x", validUntil: null, content: undefined }, "UpdateRequest"), {
    id: "x",
    valid_until: null,
  });
  // Tagged unions: each `apply` action by its `action`.
  assert.deepEqual(
    toWire({ actions: [{ action: "supersede", id: "a", type: "fact", ttlS: 5 }, { action: "delete", id: "b" }] }, "ApplyRequest"),
    { actions: [{ action: "supersede", id: "a", type: "fact", ttl_s: 5 }, { action: "delete", id: "b" }] },
  );
});

test("a reply's fields come camelCase, with the schema's defaults, and maps keep their keys", () => {
  const reply = fromWire(
    {
      success: true,
      total: 3,
      by_type: { user_pref: 2, decision: 1 },
      tags: [],
      scope: "both",
      workflow_id: "wf_1",
      workflow_count: 1,
      general_count: 2,
      oldest: null,
      newest: null,
      embedder: "hash",
      dimension: 256,
      some_new_field: { keep_me: 1 },
    },
    "DescribeReply",
  );
  assert.deepEqual(reply, {
    success: true,
    total: 3,
    byType: { user_pref: 2, decision: 1 },
    tags: [],
    scope: "both",
    workflowId: "wf_1",
    workflowCount: 1,
    generalCount: 2,
    oldest: null,
    newest: null,
    embedder: "hash",
    dimension: 256,
    someNewField: { keep_me: 1 },
    supersededCount: 0,
    tagsTruncated: false,
    idleCount: 0,
  });
  const entry = fromWire({ event: "updated", at: "2026-01-01T00:00:00Z", changes: { valid_until: { old: null, new: "x" } } }, "HistoryEntry");
  assert.deepEqual(entry.changes, { valid_until: { old: null, new: "x" } });
  assert.equal(entry.agentId, null);
  // Defaults are copies: changing one reply's list leaves the next one's alone.
  const first = fromWire({ id: "a", type: "t", preview: "p", created_at: "2026-01-01T00:00:00Z" }, "CompactMemory");
  first.tags.push("x");
  const second = fromWire({ id: "b", type: "t", preview: "p", created_at: "2026-01-01T00:00:00Z" }, "CompactMemory");
  assert.deepEqual(second.tags, []);
});

test("a reply that is one of several structs is read by its tag", () => {
  const body = { success: true, count: 1, total: 1, memories: [{ id: "a", type: "t", preview: "p", created_at: "x", workflow_id: null }] };
  const compact = fromWire({ ...body, mode: "compact" }, ["u", ["ListReply", "CompactListReply"]]);
  assert.deepEqual(compact.memories, [{ id: "a", type: "t", preview: "p", createdAt: "x", workflowId: null, tags: [], importance: 0 }]);
});

test("v4 fields go snake_case, in apply's actions too; a conflict's error carries its memory", () => {
  assert.deepEqual(toWire({ id: "a", content: "x", expectedVersion: 0 }, "UpdateRequest"), { id: "a", content: "x", expected_version: 0 });
  assert.deepEqual(toWire({ type: "fact", content: "x", key: "k", expectedVersion: 3 }, "AddRequest"), {
    type: "fact",
    content: "x",
    key: "k",
    expected_version: 3,
  });
  const apply = toWire({ actions: [{ action: "delete", id: "a", expectedVersion: 2 }] }, "ApplyRequest");
  assert.deepEqual(apply.actions, [{ action: "delete", id: "a", expected_version: 2 }]);
  const got = fromWire({ success: true, memories: [], missing: [], missing_keys: ["k"] }, "GetReply");
  assert.deepEqual(got.missingKeys, ["k"]);

  const conflict = errorFor("conflict", "memory a is at version 4", { id: "a", currentVersion: 4 });
  assert.ok(conflict instanceof Conflict && conflict instanceof BusError);
  assert.deepEqual([conflict.code, conflict.id, conflict.currentVersion], ["conflict", "a", 4]);
  const plain = errorFor("conflict", "name taken");
  assert.deepEqual([plain.id, plain.currentVersion], [undefined, undefined]);
  assert.ok(errorFor("not_found", "no such memory", { id: "a" }) instanceof NotFound);
});
