"""safepoint inside your own agent loop: wrap your tools, keep checkpoints, resume after a crash.

    python examples/own_loop.py WORKSPACE start     # runs the loop (set SAFEPOINT_FAILPOINT to crash it)
    python examples/own_loop.py WORKSPACE resume    # resumes after a crash; the email is never sent twice
    python examples/own_loop.py WORKSPACE resume --async

The "model" here is a fixed plan so the example runs offline; a real loop asks its model for the next calls and
passes the model's own tool-call ids as ``call_id``, so a resumed loop that replays them is recognised.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import safepoint
from safepoint import ToolContext

OUTBOX = "outbox.jsonl"  # created next to the workspace: an effect outside it


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", side_effects=("email",))
def send_email(ctx: ToolContext, to: str, body: str) -> str:
    """Send an email; the idempotency key lets a real mail API drop a duplicate too."""
    outbox = os.path.join(os.path.dirname(ctx.workspace.root), OUTBOX)
    with open(outbox, "a") as handle:
        handle.write(json.dumps({"to": to, "body": body, "key": ctx.idempotency_key}) + "\n")
    return f"sent to {to}"


@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def word_count(ctx: ToolContext, text: str) -> int:
    return len(text.split())


PLAN = [
    ("call_a", "word_count", {"text": "release notes for version two"}),
    ("call_b", "write_file", {"path": "NOTES.md", "content": "# v2\n- faster resume\n"}),
    ("call_c", "send_email", {"to": "team@example.com", "body": "v2 notes are in NOTES.md"}),
    ("call_d", "read_file", {"path": "NOTES.md"}),
]


def agent(run: safepoint.Run) -> None:
    for call_id, tool_name, args in PLAN[run.completed_steps :]:  # after a resume: from the interrupted step
        run.step()
        # ledgered: started is durable before it runs; the observation is what a model would be shown
        observation = run.call_result(tool_name, args, call_id=call_id).observation
        print(f"{call_id} {tool_name}: {observation.splitlines()[0]}")
        run.checkpoint()
    run.finish()


async def agent_async(run: safepoint.Run) -> None:
    for call_id, tool_name, args in PLAN[run.completed_steps :]:
        await run.astep()  # the a* forms write (and fsync) off the event loop
        observation = (await run.acall_result(tool_name, args, call_id=call_id)).observation
        print(f"{call_id} {tool_name}: {observation.splitlines()[0]}")
        await run.acheckpoint()
    await run.afinish()


def main(argv: list[str]) -> int:
    workspace, mode = argv[1], argv[2]
    use_async = "--async" in argv
    tm = safepoint.open(workspace=workspace)
    tools = [send_email, word_count]
    if mode == "start":
        run = tm.start("write the v2 notes and tell the team", tools=tools, run_id="own-loop")
    else:
        run = tm.resume("own-loop", tools=tools)
        print(run.recovery_note)
    with run:
        if use_async:
            asyncio.run(agent_async(run))
        else:
            agent(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
