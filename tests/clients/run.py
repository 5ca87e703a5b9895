#!/usr/bin/env python3
"""Runs the client tests (tests/clients/test_*.py) with the integration
runner: each test function in its own process with a timeout, the same
options (--bin, -k, -j, -v, --timeout, --list), and the same last line
"integration: N passed, N failed" that tests/run.sh counts.

  python3 tests/clients/run.py --bin build/server/rankdbd [-k ddp]

The C client's tests are meson tests (clients/c/tests), run by `meson test`.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

import run  # noqa: E402  (tests/integration/run.py)

if __name__ == "__main__":
    run.HERE = HERE
    sys.exit(run.main())
