// The TypeScript SDK against real handlers: NATS (JetStream on), Redis Stack and a handler
// process started by `python -m deploy up` (see stack.mjs). Each test has its own namespace.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import {
  BusError,
  BusTimeout,
  Conflict,
  Forbidden,
  InvalidRequest,
  MemoryBus,
  NotFound,
} from "../dist/index.js";
import { startStack } from "./stack.mjs";

let stack;
const buses = [];
// Each suite's limit: a test that waits for what never comes fails instead of hanging.
const LIMIT = { timeout: 60_000 };

before(async () => {
  stack = await startStack();
}, { timeout: 180_000 });

after(async () => {
  await Promise.all(buses.map((b) => b.close()));
  await stack?.stop();
}, LIMIT);

/** A bus on a namespace of its own, closed after the tests. */
async function connect(options = {}) {
  const bus = await MemoryBus.connect({
    servers: stack.natsUrl,
    namespace: `ts${randomUUID().replaceAll("-", "").slice(0, 12)}`,
    ...options,
  });
  buses.push(bus);
  return bus;
}

/** Read events until one satisfies `wanted` (or time out). */
async function eventWhere(stream, wanted, timeoutMs = 10_000) {
  const giveUp = Date.now() + timeoutMs;
  for (;;) {
    const event = await stream.next(Math.max(1, giveUp - Date.now()));
    if (wanted(event)) return event;
  }
}

describe("round trip", LIMIT, () => {
  test("add, get, search, list, describe, update, delete", async () => {
    const bus = await connect();
    const mem = bus.agent({ workflowId: "wf_ts", agentId: "researcher" });

    const added = await mem.add({
      type: "decision",
      content: "We ship the kayak rental app on Friday",
      tags: ["Release", "kayak"],
      importance: 0.9,
      ttlS: 3600,
      metadata: { ticket_id: "K-42", nestedKey: { snake_case: 1 } },
    });
    assert.equal(added.success, true);
    assert.match(added.id, /^[0-9A-Z]{26}$/);
    assert.equal(added.workflowId, "wf_ts");
    assert.equal(added.importance, 0.9);
    assert.ok(Date.parse(added.expiresAt) > Date.now());
    assert.equal(added.mentionCount, 1);
    assert.equal(added.duplicateOf, null);

    const got = await mem.get([added.id, "01NOSUCHMEMORY000000000000"]);
    assert.deepEqual(got.missing, ["01NOSUCHMEMORY000000000000"]);
    const [memory] = got.memories;
    assert.equal(memory.content, "We ship the kayak rental app on Friday");
    assert.deepEqual(memory.tags, ["release", "kayak"]);
    assert.equal(memory.agentId, "researcher");
    assert.equal(memory.workflowId, "wf_ts");
    assert.equal(memory.store, "private");
    // Free JSON keeps its keys as written: only the record's own fields are camelCase.
    assert.deepEqual(memory.metadata, { ticket_id: "K-42", nestedKey: { snake_case: 1 } });
    assert.equal(typeof memory.createdAt, "string");
    assert.equal(memory.supersededBy, null);

    const hits = await mem.search({ query: "when do we ship the kayak app?", limit: 5, mode: "hybrid" });
    assert.equal(hits.results[0].id, added.id);
    assert.ok(hits.results[0].score > 0 && hits.results[0].similarity > 0);
    assert.equal(hits.mode, "hybrid");
    const byTag = await mem.search({ query: "ship", tags: ["release"], types: ["decision"] });
    assert.deepEqual(byTag.results.map((r) => r.id), [added.id]);

    const second = await mem.add({ type: "knowledge", content: "Kayaks are rented by the hour" });
    const full = await mem.list();
    assert.equal(full.mode, "full");
    assert.deepEqual(full.memories.map((m) => m.id), [second.id, added.id]);
    const compact = await mem.list({ mode: "compact", limit: 1 });
    assert.equal(compact.mode, "compact");
    assert.equal(compact.count, 1);
    assert.equal(compact.total, 2);
    assert.deepEqual(Object.keys(compact.memories[0]).sort(), ["createdAt", "id", "importance", "preview", "tags", "type", "workflowId"]);

    const overview = await mem.describe();
    assert.equal(overview.total, 2);
    // A map's keys are data (type names), never renamed.
    assert.deepEqual(overview.byType, { decision: 1, knowledge: 1 });
    assert.equal(overview.workflowCount, 1);
    assert.equal(overview.generalCount, 1);
    assert.equal(overview.embedder, "hash");

    const updated = await mem.update({ id: added.id, content: "We ship the kayak rental app on Monday", ttlS: 0 });
    assert.equal(updated.id, added.id);
    assert.equal(updated.expiresAt, null);
    assert.equal((await mem.get(added.id)).memories[0].content, "We ship the kayak rental app on Monday");
    const trail = await mem.history(added.id);
    assert.deepEqual(trail.entries.map((e) => e.event), ["added", "updated"]);
    assert.equal(trail.entries[1].agentId, "researcher");
    assert.deepEqual(Object.keys(trail.entries[1].changes).sort(), ["content", "expires_at"]);

    const deleted = await mem.delete([added.id, second.id, "01NOSUCHMEMORY000000000000"]);
    assert.equal(deleted.deleted, 2);
    assert.deepEqual(deleted.missing, ["01NOSUCHMEMORY000000000000"]);
    assert.equal((await mem.describe()).total, 0);
  });

  test("recall before two turns of one session does not repeat the first", async () => {
    const bus = await connect();
    const writer = bus.agent({ workflowId: "wf_chat", agentId: "writer" });
    for (let i = 0; i < 6; i++) {
      await writer.add({ type: "knowledge", content: `kayak trip note ${i} about river number ${i * 7}` });
    }
    const assistant = bus.agent({ workflowId: "wf_chat", agentId: "assistant", sessionId: "chat-42" });

    const first = await assistant.recall({ message: "tell me about the kayak trip", limit: 3, dedupThreshold: 1.0 });
    const second = await assistant.recall({ message: ["about the kayak", "trip"], limit: 3, dedupThreshold: 1.0 });

    assert.deepEqual([first.turn, second.turn], [1, 2]);
    assert.equal(first.results.length, 3);
    assert.equal(second.results.length, 3);
    const firstIds = new Set(first.results.map((r) => r.id));
    assert.ok(second.results.every((r) => !firstIds.has(r.id)));
    assert.ok(second.leftOutRecalled >= 3);
    assert.ok(first.results.every((r) => ["identity", "important", "recent", "semantic"].includes(r.path)));
    assert.match(first.block, /kayak trip note/);
  });
});

describe("identity and scope", LIMIT, () => {
  test("a user_pref is found from another workflow; a decision stays in its own", async () => {
    const bus = await connect();
    const researcher = bus.agent({ workflowId: "wf_123", agentId: "researcher" });
    const writer = bus.agent({ workflowId: "wf_456", agentId: "writer" });

    const pref = await researcher.add({ type: "user_pref", content: "The user prefers concise answers", tags: ["style"] });
    const decision = await researcher.add({ type: "decision", content: "Draft answers concisely in bullet points" });
    assert.equal(pref.workflowId, null); // a general type: stored for every workflow
    assert.equal(decision.workflowId, "wf_123");

    const found = await writer.search({ query: "concise answers", limit: 10 });
    assert.deepEqual(found.results.map((r) => r.id), [pref.id]);
    assert.equal(found.results[0].agentId, "researcher");
    const own = await researcher.search({ query: "concise answers", limit: 10 });
    assert.deepEqual(new Set(own.results.map((r) => r.id)), new Set([pref.id, decision.id]));

    const seen = await writer.describe();
    assert.deepEqual([seen.total, seen.workflowId, seen.workflowCount, seen.generalCount], [1, "wf_456", 0, 1]);
    const onlyWorkflow = await researcher.list({ scope: "workflow" });
    assert.deepEqual(onlyWorkflow.memories.map((m) => m.id), [decision.id]);
  });

  test("namespaces are separate, and the trust level goes in the subject", async () => {
    const bus = await connect();
    const other = await connect();
    const mem = bus.agent({ workflowId: "wf_1", agentId: "a" });
    const secret = await mem.add({ type: "knowledge", content: "The vault code is kept in the safe" });
    assert.equal((await other.agent({ workflowId: "wf_1" }).describe()).total, 0);

    const guest = await MemoryBus.connect({ servers: stack.natsUrl, namespace: bus.namespace, trust: "familiar" });
    buses.push(guest);
    const shared = await guest.agent({ workflowId: "wf_1", agentId: "guest" }).add({
      type: "knowledge",
      content: "The vault is in the basement",
    });
    // A familiar agent sees the social store only; its writes go there.
    const guestView = await guest.agent({ workflowId: "wf_1" }).search({ query: "vault", limit: 10 });
    assert.deepEqual(guestView.results.map((r) => [r.id, r.store]), [[shared.id, "social"]]);
    const fullView = await mem.search({ query: "vault", limit: 10 });
    assert.deepEqual(new Set(fullView.results.map((r) => r.id)), new Set([secret.id, shared.id]));
    assert.deepEqual((await guest.agent().get(secret.id)).missing, [secret.id]);
  });
});

describe("errors", LIMIT, () => {
  test("error replies throw BusError with the protocol's code", async () => {
    const bus = await connect();
    const mem = bus.agent({ workflowId: "wf_err", agentId: "a" });

    const unknownType = await mem.add({ type: "pref", content: "x" }).then(
      () => assert.fail("an unknown type was accepted"),
      (err) => err,
    );
    assert.ok(unknownType instanceof InvalidRequest && unknownType instanceof BusError);
    assert.equal(unknownType.code, "invalid_request");
    assert.match(unknownType.message, /Unknown memory type "pref"/);

    // Requests are strict: a misspelled field comes back named, with its wire spelling.
    await assert.rejects(mem.search({ query: "x", tag: ["a"] }), (err) => {
      assert.equal(err.code, "invalid_request");
      assert.match(err.message, /tag/);
      assert.match(err.message, /Did you mean "tags"\?/);
      return true;
    });

    await assert.rejects(mem.update({ id: "01NOSUCHMEMORY000000000000", content: "y" }), (err) => {
      assert.ok(err instanceof NotFound);
      assert.equal(err.code, "not_found");
      return true;
    });
    await assert.rejects(mem.history("01NOSUCHMEMORY000000000000"), { code: "not_found" });

    const nobody = await MemoryBus.connect({ servers: stack.natsUrl, namespace: bus.namespace, trust: "public" });
    buses.push(nobody);
    await assert.rejects(nobody.agent().describe(), (err) => err instanceof Forbidden && err.code === "forbidden");

    // Checked before anything is sent.
    await assert.rejects(MemoryBus.connect({ servers: stack.natsUrl, namespace: "no spaces" }), { code: "invalid_request" });
    await assert.rejects(mem.recall({ message: "hi" }), { code: "invalid_request" });
  });

  test("a server that does not answer is Unavailable once connectWithinMs has passed", async () => {
    const port = await new Promise((resolve) => {
      const server = createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address();
        server.close(() => resolve(port));
      });
    });
    const started = Date.now();
    await assert.rejects(
      MemoryBus.connect({ servers: `nats://127.0.0.1:${port}`, connectWithinMs: 600 }),
      (err) => err.code === "unavailable" && err.message.includes(`127.0.0.1:${port}`),
    );
    assert.ok(Date.now() - started >= 300);
  });
});

describe("versions, conditional writes and keys (v4)", LIMIT, () => {
  test("an update at a stale expectedVersion is Conflict with the memory's current version", async () => {
    const bus = await connect();
    const alice = bus.agent({ workflowId: "wf_v", agentId: "alice" });
    const bob = bus.agent({ workflowId: "wf_v", agentId: "bob" });

    const added = await alice.add({ type: "decision", content: "The launch is on Friday" });
    assert.equal(added.version, 1);
    const read = (await alice.get(added.id)).memories[0];
    assert.equal(read.version, 1);
    assert.equal(read.key, null);

    // Both read version 1; Bob writes first, so Alice's write at version 1 must fail.
    const bobs = await bob.update({ id: added.id, content: "The launch is on Monday", expectedVersion: 1 });
    assert.equal(bobs.version, 2);
    const lost = await alice.update({ id: added.id, content: "The launch is on Sunday", expectedVersion: 1 }).then(
      () => assert.fail("a write at a stale version was applied"),
      (err) => err,
    );
    assert.ok(lost instanceof Conflict && lost instanceof BusError);
    assert.equal(lost.code, "conflict");
    assert.equal(lost.id, added.id);
    assert.equal(lost.currentVersion, 2);
    assert.equal((await alice.get(added.id)).memories[0].content, "The launch is on Monday");

    // The same through apply: the batch is refused whole, nothing written.
    await assert.rejects(
      alice.apply([
        { action: "add", type: "knowledge", content: "Written only with the update" },
        { action: "update", id: added.id, importance: 0.1, expectedVersion: 1 },
      ]),
      (err) => err instanceof Conflict && err.id === added.id && err.currentVersion === 2,
    );
    assert.equal((await alice.describe()).total, 1);
    const applied = await alice.apply([{ action: "update", id: added.id, importance: 0.1, expectedVersion: 2 }]);
    assert.equal(applied.results[0].id, added.id);
    assert.equal((await alice.get(added.id)).memories[0].version, 3);
  });

  test("a keyed add replaces the memory holding its key; get reads by keys", async () => {
    const bus = await connect();
    const mem = bus.agent({ workflowId: "wf_k", agentId: "planner" });

    const first = await mem.add({ type: "context", content: "Plan: draft the outline", key: "plan" });
    assert.deepEqual([first.version, first.replaced], [1, false]);
    const second = await mem.add({ type: "context", content: "Plan: write chapter one", key: "plan" });
    assert.equal(second.id, first.id);
    assert.deepEqual([second.version, second.replaced], [2, true]);

    const got = await mem.get(null, { keys: ["plan", "no-such-key"] });
    assert.deepEqual(got.memories.map((m) => [m.id, m.key, m.version, m.content]), [
      [first.id, "plan", 2, "Plan: write chapter one"],
    ]);
    assert.deepEqual(got.missingKeys, ["no-such-key"]);
    assert.deepEqual(got.missing, []);
    const both = await mem.get(first.id, { keys: ["plan"] });
    assert.ok(both.memories.every((m) => m.id === first.id));
    assert.deepEqual((await mem.history(first.id)).entries.map((e) => e.event), ["added", "updated"]);

    // Create-if-absent: the key is held, so expectedVersion 0 is a conflict naming its holder.
    await assert.rejects(
      mem.add({ type: "context", content: "Plan: start over", key: "plan", expectedVersion: 0 }),
      (err) => err instanceof Conflict && err.id === first.id && err.currentVersion === 2,
    );
    const fresh = await mem.add({ type: "context", content: "Budget: 300 EUR", key: "budget", expectedVersion: 0 });
    assert.deepEqual([fresh.version, fresh.replaced], [1, false]);
    assert.notEqual(fresh.id, first.id);
  });
});

describe("durable writes and events", LIMIT, () => {
  test("a durable add is accepted by JetStream, applied, and its event names the request", async () => {
    const bus = await connect();
    const mem = bus.agent({ workflowId: "wf_d", agentId: "writer" });
    const events = mem.subscribe();
    await events.ready();

    const accepted = await mem.add({ type: "context", content: "written through JetStream", durable: true });
    assert.equal(accepted.stream, "MEMBUS_WRITES");
    assert.equal(accepted.duplicate, false);
    assert.ok(accepted.seq > 0);
    assert.match(accepted.requestId, /^[0-9a-f]{32}$/);

    const event = await eventWhere(events, (e) => e.requestId === accepted.requestId);
    assert.deepEqual([event.action, event.type, event.workflowId, event.agentId], ["added", "context", "wf_d", "writer"]);
    const got = await mem.get(event.id);
    assert.deepEqual(got.memories.map((m) => m.content), ["written through JetStream"]);

    // The same request id again: JetStream keeps one copy.
    const again = await mem.add({ type: "context", content: "written through JetStream", durable: true, requestId: accepted.requestId });
    assert.equal(again.duplicate, true);
    assert.equal(again.seq, accepted.seq);

    const gone = await mem.delete(event.id, { durable: true });
    const deleted = await eventWhere(events, (e) => e.requestId === gone.requestId);
    assert.deepEqual([deleted.action, deleted.id], ["deleted", event.id]);
    await events.close();
  });

  test("subscribe follows one workflow's changes as an async iterator", async () => {
    const bus = await connect();
    const a = bus.agent({ workflowId: "wf_a", agentId: "alice" });
    const b = bus.agent({ workflowId: "wf_b", agentId: "bob" });
    const stream = bus.subscribe("wf_a");
    await stream.ready();

    await b.add({ type: "decision", content: "Bob's workflow decides something else" });
    await a.add({ type: "user_pref", content: "A general preference goes to _general" });
    const mine = await a.add({ type: "decision", content: "Use PostgreSQL for the shop" });
    await a.update({ id: mine.id, importance: 0.95 });
    await a.delete(mine.id);

    const seen = [];
    for await (const event of stream) {
      seen.push(event);
      if (seen.length === 3) break;
    }
    await stream.close();
    assert.deepEqual(seen.map((e) => [e.action, e.id, e.type, e.workflowId]), [
      ["added", mine.id, "decision", "wf_a"],
      ["updated", mine.id, "decision", "wf_a"],
      ["deleted", mine.id, "decision", "wf_a"],
    ]);
    assert.equal(seen[0].agentId, "alice");
    assert.equal(seen[0].preview, "Use PostgreSQL for the shop");
    assert.equal(seen[0].store, "private");
    assert.ok(!Number.isNaN(Date.parse(seen[0].at)));
    await assert.rejects(stream.next(50), (err) => err instanceof BusError);
  });

  test("next() times out with BusTimeout when nothing happens", async () => {
    const bus = await connect();
    const stream = bus.subscribe("wf_quiet");
    await stream.ready();
    await assert.rejects(stream.next(200), (err) => err instanceof BusTimeout && err.code === "timeout");
    await stream.close();
  });
});

describe("the README's example", LIMIT, () => {
  test("examples/quickstart.mjs runs as written", async () => {
    const namespace = `ts${randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const script = fileURLToPath(new URL("../examples/quickstart.mjs", import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [script], {
      env: { ...process.env, MEMBUS_NATS_URL: stack.natsUrl, MEMBUS_NAMESPACE: namespace },
      timeout: 60_000,
    });
    assert.match(stdout, /^added [0-9A-Z]{26} in wf_123$/m);
    assert.match(stdout, /^\d\.\d\d decision Use PostgreSQL for the shop database$/m);
    assert.match(stdout, /^turn 1:\n/m);
    assert.match(stdout, /^event added decision Use PostgreSQL for the shop database$/m);
    assert.match(stdout, /^event added context Migration plan drafted$/m);
    assert.match(stdout, /^error not_found$/m);
  });
});
