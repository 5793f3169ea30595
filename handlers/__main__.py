"""`python -m handlers`: run one handler process (configure with MEMBUS_* variables)."""

import os

# One BLAS thread, set before numpy loads: handlers scale out as processes, and OpenBLAS's
# threads (one per core by default) made recall's small matrix products 40x slower on a busy
# 2-core machine (0.11 -> 4.75 ms for 40 x 384 by 384 x 200). An operator's setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from handlers.service import main  # noqa: E402

main()
