"""Running the bus: the embedded stack (local subprocesses), the demo, compose and Docker files."""
