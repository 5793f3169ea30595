"""Every request, reply, record and event of the wire protocol, as msgspec Structs, under
one name (`from contracts.messages import AddRequest`, `m.AddRequest`). They live by kind:

- contracts.fields: the field types, patterns and text helpers the messages share;
- contracts.requests: the requests, strict (unknown fields are errors), with `Context`;
- contracts.replies: the replies and the records they carry, read leniently, so that
  handlers can add fields without breaking clients; the error codes;
- contracts.events: the events.
"""

from contracts.events import *  # noqa: F403
from contracts.fields import *  # noqa: F403
from contracts.replies import *  # noqa: F403
from contracts.requests import *  # noqa: F403
