"""The memory bus as tools for any LLM: definitions generated from the contracts, a
system-prompt section on using them well, and an executor that runs a model's tool call.

    specs = tool_specs()                      # 19 ToolSpecs (name, description, schema, example)
    tools = openai_tools()                    # OpenAI function calling
    prompt = system_prompt(workspace="Alpha")  # "## Memory & Knowledge Management" ...
    executor = ToolExecutor(bus, workflow_id="wf_1", agent_id="coder", workspace="Alpha")
    text = await executor.call("memory_search", '{"query": "database choice"}')

Each tool's parameter schema is its operation's request schema (`msgspec.json.schema`) with
`$ref`s inlined, `\\Z` written as `$`, and the fields the executor sets itself left out
(`context`, `workflow_id`, `agent_id`, `embedding`). The executor never raises for what a
model sends: every outcome is JSON text the model can read and recover from.
"""

from bus.tools.executor import (
    PreparedCall,
    ToolCallError,
    ToolExecutor,
    ToolResult,
    _compact,
    check_identity,
)
from bus.tools.names import HIDDEN_FIELDS, TOOL_NAMES, TOOL_OPS
from bus.tools.schemas import (
    ToolSpec,
    mcp_tools,
    openai_tools,
    request_schema,
    tool_schema,
    tool_specs,
)
from bus.tools.texts import EXAMPLES, FIELD_TEXTS, TYPE_USES, system_prompt, type_lines

__all__ = [
    "EXAMPLES",
    "FIELD_TEXTS",
    "HIDDEN_FIELDS",
    "TOOL_NAMES",
    "TOOL_OPS",
    "TYPE_USES",
    "PreparedCall",
    "ToolCallError",
    "ToolExecutor",
    "ToolResult",
    "ToolSpec",
    "_compact",
    "check_identity",
    "mcp_tools",
    "openai_tools",
    "request_schema",
    "system_prompt",
    "tool_schema",
    "tool_specs",
    "type_lines",
]
