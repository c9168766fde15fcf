"""placeholder"""
from __future__ import annotations
from typing import Any

class DurableCall: pass
class ToolNodeLedger: pass
def durable_tool(**kw: Any) -> Any: pass
class ToolRuns:
    def __init__(self, store: Any, workspace: str, holder: str) -> None:
        pass
    def close(self) -> None:
        pass
