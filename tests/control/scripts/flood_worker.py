"""A worker that reports 1,000 steps a second per rank and honours no stop: it ignores SIGTERM
and never reads a stop request, so only the controller's grace kill ends it. It sends its steps
through `ctx.event` (not `step_healthy`, the two-line integration's stop boundary) and imports
no torch."""

import signal
import sys
import time

import runwright.runtime
from runwright.events import EventType

RATE_PER_SECOND = float(sys.argv[1]) if len(sys.argv) > 1 else 1000.0

ctx = runwright.runtime.init()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
started = time.monotonic()
step = 0
while True:
    step += 1
    # Step n is due at started + n / rate; report late steps at once to keep the rate.
    time.sleep(max(0.0, started + step / RATE_PER_SECOND - time.monotonic()))
    ctx.event(EventType.STEP_HEALTHY, step=step, event_id=f"g{ctx.generation}-r{ctx.rank}-s{step}")
