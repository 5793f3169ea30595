// Real servers for the SDK's tests, started the way the Python tests start them: the
// project's own `python -m deploy up` (nats-server with JetStream, Redis Stack, handlers with
// the hash embedder) on free ports, with a data directory of its own, stopped afterwards.
// MEMBUS_PYTHON names the Python to run it with (default: the repository's .venv).

import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(fileURLToPath(import.meta.url), "../../../..");
const PYTHON = process.env.MEMBUS_PYTHON || join(REPO, ".venv", "bin", "python");
const READY = /The bus is up: MEMBUS_NATS_URL=(\S+?)\.? Ctrl-C/;

/** Start NATS, Redis Stack and `handlers` handler processes; resolves once they answer. */
export async function startStack({ handlers = 1, readyWithinMs = 120_000 } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), "membus-ts-"));
  const proc = spawn(
    PYTHON,
    ["-m", "deploy", "up", "--no-demo", "--handlers", String(handlers), "--nats-port", "0", "--redis-port", "0", "--data-dir", dataDir],
    {
      cwd: REPO,
      env: { ...process.env, MEMBUS_EMBEDDER: "hash", PYTHONUNBUFFERED: "1" },
      // Its own process group, so that stopping it can reach every child it started.
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let output = "";
  const exited = new Promise((done) => proc.once("exit", (code, signal) => done({ code, signal })));
  const natsUrl = await new Promise((ready, fail) => {
    const timer = setTimeout(() => fail(new Error(`deploy up was not ready within ${readyWithinMs}ms:\n${output}`)), readyWithinMs);
    const read = (chunk) => {
      output += chunk;
      const found = READY.exec(output);
      if (found) {
        clearTimeout(timer);
        ready(found[1]);
      }
    };
    proc.stdout.setEncoding("utf8").on("data", read);
    proc.stderr.setEncoding("utf8").on("data", read);
    proc.once("error", (err) => {
      clearTimeout(timer);
      fail(new Error(`cannot run ${PYTHON}: ${err.message} (set MEMBUS_PYTHON)`));
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(new Error(`deploy up exited (code ${code}, signal ${signal}) before it was ready:\n${output}`));
    });
  }).catch(async (err) => {
    killGroup(proc.pid, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  });

  // Should this process end before `stop()` (a signal, a crash), take the servers along.
  const cleanup = () => {
    killGroup(proc.pid, "SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  };
  const onSignal = (signal) => {
    cleanup();
    process.exit(signal === "SIGINT" ? 130 : 143);
  };
  process.once("exit", cleanup);
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  return {
    natsUrl,
    output: () => output,
    /** SIGTERM: deploy stops its handlers and servers itself; whatever is left of its
     * process group after `graceMs` is killed. */
    async stop(graceMs = 30_000) {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        let timer;
        const late = new Promise((done) => {
          timer = setTimeout(done, graceMs);
        });
        await Promise.race([exited, late]);
        clearTimeout(timer);
      }
      killGroup(proc.pid, "SIGKILL");
      process.off("exit", cleanup);
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

function killGroup(pid, signal) {
  try {
    process.kill(-pid, signal);
  } catch (err) {
    if (err.code !== "ESRCH") throw err;
  }
}
