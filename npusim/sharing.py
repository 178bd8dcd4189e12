"""Names of the ways processes share one NPU: scheduler policies, pool strategies, buffering.

Light on purpose (no imports), so the CLI can offer them as choices without importing the engine;
`engine.scheduler` and `processes` implement them.
"""

POLICIES = ("round-robin", "random", "priority")
POOL_STRATEGIES = ("shared", "misconfigured", "partitioned", "serialised")
BUFFERING = ("per-run", "fixed")
