"""`python -m handlers`: run one handler process (configure with MEMBUS_* variables)."""

from handlers.service import main

main()
