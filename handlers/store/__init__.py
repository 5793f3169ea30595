"""The Redis side: typed records, every key, the index schema and filters, the Lua scripts,
raw-reply parsing, and the `Store` the operations call."""
