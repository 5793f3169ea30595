"""Shared test set-up: handler logs go to structlog's JSON renderer; nothing else global."""
