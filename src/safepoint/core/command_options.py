"""Reading a program's options out of its words: where the options end, which value each option takes.

Pure helpers of the walk, for peeling wrappers and runners (programs are read by their specs, see
:mod:`safepoint.core.command_spec`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["option_pairs", "python_module", "skip_options"]


def skip_options(args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]) -> int:
    """Index of the first word after a program's options (and after a `--`)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1
        if arg.startswith("--"):
            i += 2 if "=" not in arg and arg in long_with_value else 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j == len(arg) - 1:
                        i += 1  # the value is the next word
                    break
            i += 1
            continue
        return i
    return i


def python_module(argv: Sequence[str]) -> list[str] | None:
    """`python -m mod args` -> [mod, args]; [] when there is no -m; None for `python -c`."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return [argv[i + 1], *argv[i + 2 :]]
        if arg.startswith("-m") and len(arg) > 2:
            return [arg[2:], *argv[i + 1 :]]
        if arg == "-c" or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
            return None
        if not arg.startswith("-") or arg == "-":
            return []
        i += 2 if arg in {"-W", "-X", "-Q"} else 1
    return []


def option_pairs(
    args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]
) -> list[tuple[str, str | None]]:
    """(option, value) for each option, in the `-oFILE`, `-o FILE`, `--out=F`, `--out F`, `-sSLo F` forms."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                pairs.append((name, value))
            elif name in long_with_value:
                pairs.append((name, args[i + 1] if i + 1 < len(args) else ""))
                i += 1
            else:
                pairs.append((name, None))
        elif arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j < len(arg) - 1:
                        pairs.append((f"-{char}", arg[j + 1 :]))
                    else:
                        pairs.append((f"-{char}", args[i + 1] if i + 1 < len(args) else ""))
                        i += 1
                    break
                pairs.append((f"-{char}", None))
        i += 1
    return pairs
