"""memory-bus handlers: the stateless `memory` NATS micro service over Redis Stack."""

__version__ = "0.1.0"
