"""The TypeScript SDK (clients/typescript) builds with tsc, and its own tests pass: node's
test runner against real handlers, which those tests start with `python -m deploy up`
(NATS with JetStream, Redis Stack, a handler) on free ports, as this suite's tests do."""

from __future__ import annotations

import pytest
from node_client import ensure_node_modules, missing_tools, run

# npm's scripts start the servers and the handler themselves.
pytestmark = pytest.mark.processes


@pytest.mark.timeout(1200)
def test_the_typescript_sdk_builds_and_passes_its_tests_against_real_handlers() -> None:
    if why := missing_tools():
        pytest.skip(why)
    ensure_node_modules()

    code, out = run(["npm", "run", "build"], timeout=300)
    assert code == 0, f"npm run build failed:\n{out}"

    code, out = run(["npm", "test"], timeout=600)
    assert code == 0, f"npm test failed:\n{out}"
    assert "# fail 0" in out and "# pass 0" not in out, out
