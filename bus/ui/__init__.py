"""The inspection page (`membus ui`): a read-only look at one namespace in the browser: its
overview, a filterable list, search, each memory's record, history and timeline,
workspaces and their states, and the live events. One static page and a small script,
served with the JSON endpoints they call by Starlette on uvicorn (the `cli` extra).

    await serve("nats://127.0.0.1:4222", "default", port=8484)
"""

from bus.ui.app import UIState, make_app
from bus.ui.server import UIServer, bind, make_server, serve

__all__ = ["UIServer", "UIState", "bind", "make_app", "make_server", "serve"]
