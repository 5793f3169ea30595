// The README's example, runnable as is against a running bus (`make up` in the repository):
//   npm run build && node examples/quickstart.mjs
// MEMBUS_NATS_URL and MEMBUS_NAMESPACE choose the server and the namespace.
import { BusError, MemoryBus } from "memory-bus";

const bus = await MemoryBus.connect({
  servers: process.env.MEMBUS_NATS_URL ?? "nats://127.0.0.1:4222",
  namespace: process.env.MEMBUS_NAMESPACE ?? "demo",
});
const mem = bus.agent({ workflowId: "wf_123", agentId: "researcher", sessionId: "chat-42" });
const events = bus.subscribe("wf_123"); // every change in workflow wf_123, as it happens

await mem.add({ type: "user_pref", content: "The user prefers concise answers", tags: ["style"] });
const decision = await mem.add({ type: "decision", content: "Use PostgreSQL for the shop database" });
console.log("added", decision.id, "in", decision.workflowId);

const hits = await mem.search({ query: "which database did we pick?", limit: 5 });
for (const h of hits.results) console.log(h.score.toFixed(2), h.type, h.content);

const turn = await mem.recall({ message: "Draft the note: which database did we pick?" });
console.log(`turn ${turn.turn}:\n${turn.block}`);

// Durable: JetStream has it once this resolves; its event carries the request id.
const accepted = await mem.add({ type: "context", content: "Migration plan drafted", durable: true });
for await (const ev of events) {
  console.log("event", ev.action, ev.type, ev.preview);
  if (ev.requestId === accepted.requestId) break;
}

try {
  await mem.update({ id: "01NOSUCHMEMORY000000000000", content: "gone" });
} catch (err) {
  if (!(err instanceof BusError)) throw err;
  console.log("error", err.code); // not_found
}
await events.close();
await bus.close();
