from safepoint.supervisor.handoff import receive

receive()  # a daemon's worker: its store URL and credentials come by a pipe, not its environment
from safepoint.cli.app import main  # noqa: E402  # after receive: --store's default reads SAFEPOINT_STORE

main()
