"""Adapters of the bus to agent frameworks' own memory interfaces.

- `bus.integrations.langgraph.MemoryBusStore`: LangGraph's `BaseStore` (needs `langgraph`).
- `bus.integrations.openai_agents.MemoryBusSession`: the OpenAI Agents SDK's `Session`
  (needs `openai-agents`).

Each module imports its framework itself, so `import bus` never needs either.
"""
