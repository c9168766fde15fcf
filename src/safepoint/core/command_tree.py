"""A command line parsed by tree-sitter-bash, in the small node shape the walk reads (:mod:`command_walk`).

tree-sitter-bash parses what bashlex rejected (here-documents with quoted delimiters, ``[[ ]]``, ``(( ))``,
``$(( ))``, ``case``, the ``time`` keyword, substitutions inside ``${...}``), in about 5 us a line against bashlex's
200, and imports in about 25 ms against 150 (``bench/classify.py``). It is imported on the first parse, not with
this module: a CLI start-up must not pay for it.

Its quirks, handled here so the walk does not see them: a redirection after a pipeline hangs on the pipeline
(``a | b > f`` -- bash gives it to ``b``); a here-document's redirect node holds what follows it on its line
(``cat <<EOF | sh``, ``cat <<EOF > f``, ``cat <<EOF && rm x``); ``[ ]`` and ``[[ ]]`` are expression trees, not words.
The parser is error-tolerant: a tree with an error or a missing node is refused (the line asks).
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["Node", "TreeError", "parse_tree"]


class TreeError(Exception):
    pass


class Node:
    """One node in the shape the walk reads: ``kind`` and, as it applies, ``pos`` (character offsets), ``word``
    (a word's text), ``parts``/``list`` (children), ``command`` (a substitution's body), ``output``/``type``/
    ``heredoc``/``input`` (a redirection), ``value`` (a parameter or arithmetic text), ``op`` (an operator)."""

    def __init__(self, kind: str, pos: tuple[int, int] = (0, 0), **fields: Any) -> None:
        self.kind = kind
        self.pos = pos
        self.parts: list[Node] = fields.pop("parts", [])
        self.__dict__.update(fields)

    def __repr__(self) -> str:  # for debugging a walk
        return f"Node({self.kind}, {self.pos}, {getattr(self, 'word', '')!r})"


@functools.cache
def _parser() -> Any:
    import tree_sitter  # on first use, not at import: see the module docstring
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


_STATEMENTS_SKIPPED = frozenset({"comment", ";", ";;", "&", "\n", "(", ")", "{", "}", "do", "done", "then", "fi",
                                 "else", "elif", "if", "while", "until", "for", "in", "case", "esac", "select",
                                 "function", "!", "[[", "]]", "[", "]"})  # fmt: skip
_WORDS = frozenset(
    re.split(
        r"\s+",
        """word string raw_string ansi_c_string translated_string concatenation number simple_expansion expansion
        command_substitution process_substitution arithmetic_expansion brace_expression extglob_pattern""".strip(),
    )
)
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode()
        self.quoted: set[str] = set()
        if len(self.data) == len(text):
            self.char: Any = None  # ASCII: byte offsets are character offsets
        else:
            offsets = [0] * (len(self.data) + 1)
            at = 0
            for index, char in enumerate(text):
                for _ in range(len(char.encode())):
                    offsets[at] = index
                    at += 1
            offsets[at] = len(text)
            self.char = offsets

    def pos(self, n: Any) -> tuple[int, int]:
        if self.char is None:
            return (n.start_byte, n.end_byte)
        return (self.char[n.start_byte], self.char[n.end_byte])

    def raw(self, n: Any) -> str:
        start, end = self.pos(n)
        return self.text[start:end]

    # ---- statements -----------------------------------------------------------------------------------------

    def statements(self, nodes: Any) -> list[Node]:
        """Statements with the `;`/`&` between them as operator nodes (a `&` job keeps its `cd` to itself)."""
        found: list[Node] = []
        for n in nodes:
            if n.type in {";", "&", "\n", "&&", "||"}:
                found.append(Node("operator", self.pos(n), op=n.type))
            elif n.is_named and n.type not in _STATEMENTS_SKIPPED:
                converted = self.statement(n)
                if converted is not None:
                    found.append(converted)
        return found

    def statement(self, n: Any) -> Node | None:
        kind = n.type
        if kind == "command":
            return self.command(n)
        if kind == "redirected_statement":
            return self.redirected(n)
        if kind == "list":
            return Node("list", self.pos(n), parts=self.statements(n.children))
        if kind == "pipeline":
            members = [Node("pipe", self.pos(c)) if c.type in {"|", "|&"} else self.statement(c) for c in n.children]
            return Node("pipeline", self.pos(n), parts=[m for m in members if m is not None])
        if kind == "subshell":
            return Node("compound", self.pos(n), list=[Node("reservedword", word="("), *self.statements(n.children)])
        if kind == "compound_statement":
            if self.raw(n).startswith("(("):
                return self.arithmetic(n)
            return Node("compound", self.pos(n), list=[Node("reservedword", word="{"), *self.statements(n.children)])
        if kind in {"variable_assignment", "variable_assignments"}:
            found = [n] if kind == "variable_assignment" else [c for c in n.children if c.type == "variable_assignment"]
            return Node("command", self.pos(n), parts=[self.assignment(c) for c in found])
        if kind in {"declaration_command", "unset_command"}:
            return Node("command", self.pos(n), parts=[self.word(c) for c in n.children if c.is_named or c.type in
                                                        {"declare", "typeset", "export", "readonly", "local", "unset",
                                                         "unsetenv"}])  # fmt: skip
        if kind == "test_command":
            return self.test(n)
        if kind == "function_definition":
            body = n.child_by_field_name("body")
            return Node("function", self.pos(n), parts=[s for s in [self.statement(body)] if s is not None])
        if kind == "c_style_for_statement":
            return Node("for", self.pos(n), parts=[Node("arithmetic", self.pos(n), value=self.raw(n)),
                                                   *self.statements(n.children)])  # fmt: skip
        if kind in _WORDS:
            return self.word(n)
        if kind in {"for_statement", "case_item", "case_statement"}:
            parts: list[Node] = []
            for child in n.children:
                field = n.field_name_for_child(_index(n, child))
                if field == "variable":
                    continue
                if child.type in _WORDS:
                    parts.append(self.word(child))  # the words looped over, the case value and patterns
                elif child.is_named and child.type not in _STATEMENTS_SKIPPED:
                    converted = self.statement(child)
                    if converted is not None:
                        parts.append(converted)
            return Node(kind, self.pos(n), parts=parts)
        if kind in {"if_statement", "elif_clause", "else_clause", "while_statement", "do_group", "negated_command"}:
            return Node(kind, self.pos(n), parts=self.statements(n.children))
        raise TreeError(f"uses shell syntax the classifier does not read ({kind})")

    def command(self, n: Any) -> Node:
        parts: list[Node] = []
        for child in n.children:
            if child.type == "variable_assignment":
                parts.append(self.assignment(child))
            elif child.type == "command_name":
                parts.append(self.word(child.children[0] if child.child_count == 1 else child))
            elif child.type in _REDIRECTS:
                parts.extend(self.redirect(child))
            elif child.type in _WORDS or child.is_named:
                parts.append(self.word(child))
        return Node("command", self.pos(n), parts=parts)

    def assignment(self, n: Any) -> Node:
        value = n.child_by_field_name("value")
        nested = self.expansions(value) if value is not None else []
        return Node("assignment", self.pos(n), word=self.raw(n), parts=nested)

    def redirected(self, n: Any) -> Node:
        body = n.child_by_field_name("body")
        redirects: list[Node] = []
        following: list[tuple[str, Node]] = []  # what a here-document's node holds after it: `| sh`, `&& rm x`
        for child in n.children:
            if child.type in _REDIRECTS:
                redirects.extend(self.redirect(child, following))
        target = self.statement(body) if body is not None else Node("command", self.pos(n))
        if target is not None and target.kind == "command":
            target.parts = sorted([*target.parts, *redirects], key=lambda p: p.pos[0])
        elif target is not None and target.kind == "pipeline" and target.parts:
            last = target.parts[-1]  # `a | b > f`: the redirection is b's
            if last.kind == "command":
                last.parts = sorted([*last.parts, *redirects], key=lambda p: p.pos[0])
            else:
                target.parts[-1] = Node("compound", last.pos, list=[last], redirects=redirects)
        else:
            target = Node("compound", self.pos(n), list=[target] if target else [], redirects=redirects)
        for op, rest in following:
            if op == "|" and rest.kind == "pipeline":
                target = Node("pipeline", target.pos, parts=[target, Node("pipe"), *rest.parts])
            else:
                target = Node("list", target.pos, parts=[target, Node("operator", op=op), rest])
        return target

    def redirect(self, n: Any, following: list[tuple[str, Node]] | None = None) -> list[Node]:
        if n.type == "herestring_redirect":
            words = [c for c in n.children if c.type in _WORDS]
            string = self.word(words[0]) if words else Node("word", self.pos(n), word="")
            return [Node("redirect", self.pos(n), type="<<<", output=string, input=None)]
        if n.type == "heredoc_redirect":
            return self.heredoc(n, following if following is not None else [])
        descriptor = n.child_by_field_name("descriptor")
        destination = n.child_by_field_name("destination")
        operator = next((self.raw(c) for c in n.children if not c.is_named), "")
        if operator in {">&-", "<&-"}:
            return [Node("redirect", self.pos(n), type=operator[:2], output="-", input=None)]
        output: Any = self.word(destination) if destination is not None else None
        if operator in {">&", "<&"} and destination is not None and re.fullmatch(r"\d+|-", self.raw(destination)):
            raw = self.raw(destination)
            output = int(raw) if raw.isdigit() else raw  # a descriptor duplicated, not a file
        shown = self.raw(descriptor) if descriptor is not None else None
        return [Node("redirect", self.pos(n), type=operator, output=output, input=shown)]

    def heredoc(self, n: Any, following: list[tuple[str, Node]]) -> list[Node]:
        start = next((c for c in n.children if c.type == "heredoc_start"), None)
        body = next((c for c in n.children if c.type == "heredoc_body"), None)
        delimiter_raw = self.raw(start) if start is not None else ""
        delimiter = re.sub(r"[\"'\\\\]", "", delimiter_raw)
        if any(q in delimiter_raw for q in "'\"\\"):
            self.quoted.add(delimiter)
        text = self.raw(body) if body is not None else ""
        pos = self.pos(start) if start is not None else self.pos(n)
        found = [
            Node(
                "redirect",
                self.pos(n),
                type="<<-" if any(c.type == "<<-" for c in n.children) else "<<",
                output=Node("word", pos, word=delimiter),
                heredoc=Node("heredoc", value=text.removesuffix("\n")),
                input=None,
            )
        ]
        op = ""
        for child in n.children:
            if child.type in _REDIRECTS:
                found.extend(self.redirect(child, following))
            elif child.type in {"&&", "||", ";", "&", "|"}:
                op = child.type
            elif child.type in {"pipeline", "list", "command", "redirected_statement", "subshell"}:
                converted = self.statement(child)
                if converted is not None:
                    following.append((op or ("|" if child.type == "pipeline" else ";"), converted))
                op = ""
        return found

    def test(self, n: Any) -> Node:
        """`[ ... ]` / `[[ ... ]]` as the words of a command named `[` / `[[`."""
        opening = n.children[0].type if n.child_count else "["
        words = [Node("word", self.pos(n.children[0]), word=opening)]

        def leaves(node: Any) -> None:
            for child in node.children:
                if child.type in {"binary_expression", "unary_expression", "parenthesized_expression",
                                  "negated_expression", "ternary_expression"}:  # fmt: skip
                    leaves(child)
                elif child.type in {"[", "]", "[[", "]]", "(", ")"}:
                    continue
                elif child.type in _WORDS or child.is_named:
                    words.append(self.word(child))
                else:
                    words.append(Node("word", self.pos(child), word=self.raw(child)))

        leaves(n)
        return Node("command", self.pos(n), parts=words)

    def arithmetic(self, n: Any) -> Node:
        nested = [found for child in n.children for found in self.expansions(child)]  # `$(( $(cmd) ))`
        return Node("arithmetic", self.pos(n), value=self.raw(n), parts=nested)

    # ---- words ----------------------------------------------------------------------------------------------

    def word(self, n: Any) -> Node:
        raw = self.raw(n)
        return Node("word", self.pos(n), word=_unquoted(raw), parts=self.expansions(n))

    def expansions(self, n: Any) -> list[Node]:
        """The substitutions and parameters inside a word, outermost first."""
        found: list[Node] = []
        kind = n.type
        if kind == "command_substitution":
            return [Node("commandsubstitution", self.pos(n), command=self.body(n))]
        if kind == "process_substitution":
            return [Node("processsubstitution", self.pos(n), command=self.body(n))]
        if kind in {"simple_expansion", "expansion"}:
            inner = self.raw(n).removeprefix("$").removeprefix("{").removesuffix("}") if kind == "expansion" else \
                self.raw(n).removeprefix("$")  # fmt: skip
            return [Node("parameter", self.pos(n), value=inner)]
        if kind == "arithmetic_expansion":
            return [self.arithmetic(n)]
        for child in n.children:
            found.extend(self.expansions(child))
        return found

    def body(self, n: Any) -> Node:
        return Node("list", self.pos(n), parts=self.statements(n.children))


_READ_WRITE = re.compile(r"(?<![<>])\d*<>")
_BEYOND_ASCII = re.compile(r"[^\x00-\x7f]")


def _index(parent: Any, child: Any) -> int:
    return next(i for i, c in enumerate(parent.children) if c.id == child.id)


def _unquoted(raw: str) -> str:
    """A word's text with its quotes taken off (expansions left as written)."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(raw):
        char = raw[i]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
        elif char == "\\" and i + 1 < len(raw) and (quote == "" or raw[i + 1] in '"\\$`'):
            out.append(raw[i + 1])
            i += 1
        elif char == '"':
            quote = "" if quote == '"' else '"'
        elif char == "'" and quote == "":
            quote = "'"
        else:
            out.append(char)
        i += 1
    return "".join(out)


def _first_error(n: Any) -> Any:
    if n.type == "ERROR" or n.is_missing:
        return n
    for child in n.children:
        if child.has_error or child.is_missing:
            found = _first_error(child)
            if found is not None:
                return found
    return None


def parse_tree(text: str) -> tuple[list[Node], frozenset[str]]:
    """The line as a list of top-level statement nodes, and the here-document delimiters that were quoted (their
    bodies are not expanded). Raises :class:`TreeError` for a line that does not parse whole."""
    # The parser sees a copy of the same byte length, read back from the original text by position: tree-sitter-bash
    # 0.25's scanner can crash the process (a segmentation fault, at random) on some lines with characters beyond
    # ASCII, which are never shell syntax, so each becomes as many `x`; and it has no `<>` (open for reading and
    # writing), parsed as `>|`, which has the same shape (the redirection keeps its own operator).
    masked = _BEYOND_ASCII.sub(lambda m: "x" * len(m.group().encode()), text)
    data = _READ_WRITE.sub(lambda m: m.group(0)[:-2] + ">|", masked).encode()
    root = _parser().parse(data).root_node
    if root.has_error:
        bad = _first_error(root)
        snippet = text.encode()[bad.start_byte : bad.start_byte + 20].decode(errors="replace") if bad else ""
        where = f" near `{snippet}`" if bad is not None and not bad.is_missing else ""
        missing = f" (a `{bad.type}` is missing)" if bad is not None and bad.is_missing else ""
        hint = " (an arithmetic expansion, or `$( (` written without its space?)" if "$((" in snippet else ""
        raise TreeError(f"is not valid shell{where}{missing}{hint}")
    reader = _Reader(text)
    statements = reader.statements(root.children)
    return [Node("list", (0, len(text)), parts=statements)], frozenset(reader.quoted)
