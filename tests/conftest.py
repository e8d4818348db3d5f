"""Settings every test process inherits.

A tool server stopped by a test drains for `--drain-s` (10 s by default) while the sessions a test left open are
held, then removes its sandboxes; the harness kills it after 15 s, which under gVisor could leave containers behind.
One second of drain keeps every stop short; tests of the drain itself pass `--drain-s`, which beats the env."""

import os

os.environ.setdefault("TOOLFLEET_DRAIN_S", "1")
