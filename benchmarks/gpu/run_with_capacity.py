"""`python -m workloads run ...` with the what-if cache oracle given a real server's KV capacity.

The library runs its what-if oracle only when it knows the KV capacity, and today it learns it
only from the simulated server's profile: no CLI option or Target field passes a real server's
capacity (a library gap, issue 14). Setting Target.simulator_profile would also mark the run
simulated (no energy). So this wrapper sets the runner's capacity after it is built, from
WORKLOADS_KV_CAPACITY (tokens) and WORKLOADS_KV_BLOCK (default 1: llama.cpp reuses any prefix
length, it has no blocks), and otherwise is the CLI unchanged.

    WORKLOADS_KV_CAPACITY=53248 python run_with_capacity.py run SCENARIO --target URL ...
"""
import os
import sys

import workloads.runner as runner
from workloads.cli import main

capacity = os.environ.get("WORKLOADS_KV_CAPACITY")
block = int(os.environ.get("WORKLOADS_KV_BLOCK") or 1)
original = runner._Run.__init__


def _init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    original(self, *args, **kwargs)
    if capacity:
        self.kv_capacity_tokens = int(capacity)
        self.block_size = block


runner._Run.__init__ = _init

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
