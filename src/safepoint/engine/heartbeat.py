"""The owner's heartbeat: one idle thread per open run renews its claim, busy or not.

An own loop thinking between two calls is as alive as one running a tool, so a supervisor's reaper must not take
either for dead. The thread is started by an explicit step of opening a run (``RunSession.start``), never by a
constructor, and stopped when the run closes.
"""

from __future__ import annotations

import os
import threading

from safepoint.errors import StaleGenerationError
from safepoint.records import Claim
from safepoint.store.base import Store

# How often an owner renews its heartbeat (a supervisor presumes it dead after its lease, 30 s by default).
# SAFEPOINT_HEARTBEAT_SECONDS changes it, for tests of the reaper that must not wait half a minute.
HEARTBEAT_SECONDS = float(os.environ.get("SAFEPOINT_HEARTBEAT_SECONDS", "10"))


class Heartbeat:
    def __init__(self, store: Store, claim: Claim) -> None:
        self.store = store
        self.claim = claim
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        if self._thread is not None or self.claim.generation == 0:
            return  # a reader holds no claim to renew
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.claim.run_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.store.heartbeat(self.claim)
            except StaleGenerationError:
                return  # fenced off: the next write says so, in the thread that can act on it
            except Exception:
                continue
