"""The checks of curl and wget: the method and the data options decide whether a request changes remote state,
the output options which files it writes."""

from __future__ import annotations

from safepoint.core.command_call import UNKNOWN, Call, under
from safepoint.core.command_findings import Finding, finding
from safepoint.core.command_spec import ProgramSpec, names, parse_words

__all__ = ["curl", "wget"]


CURL = ProgramSpec(
    takes_value=frozenset(f"-{c}" for c in "AbcCdDeEFHKmoPQrtTuUwxXyYz")
    | frozenset(
        names(
            """
    --request --data --data-raw --data-binary --data-urlencode --data-ascii --json --form --form-string
    --upload-file --output --output-dir --cookie-jar --dump-header --config --header --user --user-agent
    --referer --cookie --url --proxy --max-time --connect-timeout --retry --write-out --cert --key
    --cacert --range --resolve --connect-to --interface --limit-rate --oauth2-bearer --variable
    --expand-url --max-redirs --retry-delay --retry-max-time --trace --trace-ascii --stderr --libcurl
    --etag-save --etag-compare --hsts --alt-svc --proto --proto-redir --ciphers --pinnedpubkey --capath
    """
        )
    ),
)
_CURL_HARMLESS = frozenset(
    names(
        """
    -s -S -L -f -I -i -v -k -4 -6 -g -G -N -j -Z -# -0 -1 -2 -3 -l -n -p -q -R -B -a -M -V -h --silent
    --show-error --location --location-trusted --fail --fail-with-body --fail-early --head --include
    --verbose --insecure --http1.0 --http1.1 --http2 --http2-prior-knowledge --http3 --retry --max-time
    --connect-timeout -m -H --header -A --user-agent -e --referer -u --user -b --cookie -X --request
    --get -x --proxy --url -r --range --limit-rate -w --write-out --max-redirs --resolve --connect-to
    --cacert --cert --key --oauth2-bearer --no-buffer --junk-session-cookies --raw --no-progress-meter
    --parallel --compressed --globoff --retry-delay --retry-max-time --retry-all-errors
    --retry-connrefused --ipv4 --ipv6 --tlsv1.2 --tlsv1.3 --ssl-reqd --proto --proto-redir --ciphers
    --pinnedpubkey --capath --netrc --netrc-optional --anyauth --basic --digest --ntlm --negotiate
    --interface --path-as-is --no-keepalive --tcp-nodelay --remote-time --help --version --manual
    --progress-bar --no-alpn --no-npn --expect100-timeout --variable --expand-url -d --data --data-raw
    --data-binary --data-urlencode --data-ascii --json -F --form --form-string -T --upload-file -o
    --output -O --remote-name --remote-name-all --output-dir --create-dirs -J --remote-header-name -c
    --cookie-jar -D --dump-header -K --config -C --continue-at -z --time-cond -E -P -Q -t -U -y -Y
    --trace --trace-ascii --stderr --libcurl --etag-save --etag-compare --hsts --alt-svc --trace-time
    --trace-ids
    """
    )
)
_DATA_OPTIONS = frozenset(["-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "--data-ascii", "--json"])
_UPLOAD_OPTIONS = frozenset(["-F", "--form", "--form-string", "-T", "--upload-file"])
CURL_FILE_OUTPUTS = frozenset(
    names(
        """
    -o --output -c --cookie-jar -D --dump-header --trace --trace-ascii --stderr --libcurl --etag-save
    --hsts --alt-svc
    """
    )
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def curl(call: Call) -> None:
    parsed = parse_words(CURL, call.words)
    names = {name for name, _, _ in parsed.options}
    method = next((str(v).upper() for n, v, _ in reversed(parsed.options) if n in {"-X", "--request"}), None)
    found: list[Finding] = []
    if "-K" in names or "--config" in names:
        found.append(finding("unknown", ("network", "unknown"), "`curl -K` reads options from a file; not analysed"))
    for name in sorted(names - _CURL_HARMLESS):
        found.append(
            finding("unknown", UNKNOWN, f"`curl {name}` is an option the rules do not know; treated as having effects")
        )
    for name, value, _ in parsed.options:
        if name in {"-w", "--write-out"} and value and "%output{" in value:
            found.append(finding("local_write", ("filesystem_write",), "`curl -w %output{...}` writes a file"))
    trigger = None
    if method is not None and method not in _SAFE_METHODS:
        trigger = f"-X {method}"
    elif method is None:
        upload = next((n for n in names if n in _UPLOAD_OPTIONS), None)
        data = next((n for n in names if n in _DATA_OPTIONS), None)
        if upload is not None:
            trigger = upload
        elif data is not None and not names & {"-G", "--get"}:
            trigger = data
    if trigger is not None:
        found.append(
            finding("high_risk", ("network",), f"`curl {trigger}` sends a request that can change remote state")
        )
    else:
        found.append(finding("read_only", ("network",), "`curl` fetches a URL (GET)"))
    targets: list[str] = []
    outputs = [v for v in parsed.values("-o", "--output") if v != "-"]
    for directory in parsed.values("--output-dir"):
        outputs = under(directory, outputs)
    targets += outputs
    targets += [v for v in parsed.values(*(CURL_FILE_OUTPUTS - {"-o", "--output"})) if v != "-"]
    for name, value, _ in parsed.options:
        if name in CURL_FILE_OUTPUTS and value not in {"-", None}:
            found.append(finding("local_write", ("filesystem_write",), f"`curl {name} {value}` writes a file"))
        elif name in {"-O", "--remote-name", "--remote-name-all", "-J", "--remote-header-name"}:
            found.append(finding("local_write", ("filesystem_write",), f"`curl {name}` writes a file"))
    call.base = found
    call.targets = targets


WGET = ProgramSpec(
    takes_value=frozenset(f"-{c}" for c in "OoaPiUtTwQlARDIXe")
    | frozenset(
        names(
            """
    --output-document --output-file --append-output --directory-prefix --input-file --execute
    --user-agent --header --post-data --post-file --method --body-data --body-file --tries --timeout
    --wait --quota --level --user --password
    """
        )
    ),
)
_WGET_POSTS = frozenset(["--post-data", "--post-file", "--body-data", "--body-file"])


def wget(call: Call) -> None:
    words = [a for a in call.words if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    parsed = parse_words(WGET, words)
    values = {name: value for name, value, _ in parsed.options}
    method = str(values.get("--method") or "GET").upper()
    posts = next((n for n in values if n in _WGET_POSTS), None)
    found: list[Finding] = []
    if "-e" in values or "--execute" in values:
        found.append(finding("unknown", ("network", "unknown"), "`wget -e` runs wgetrc commands; not analysed"))
    if posts is not None or method not in _SAFE_METHODS:
        shown = posts or f"--method={method}"
        found.append(finding("high_risk", ("network",), f"`wget {shown}` sends a request that can change remote state"))
    else:
        found.append(finding("read_only", ("network",), "`wget` fetches a URL"))
    document = values.get("-O", values.get("--output-document"))
    if "--spider" not in values and document != "-":
        shown = f"`wget -O {document}`" if document else "`wget`"
        found.append(finding("local_write", ("filesystem_write",), f"{shown} saves the download to a file"))
    for option in ("-o", "--output-file", "-a", "--append-output"):
        if values.get(option) not in {None, "-"}:
            found.append(finding("local_write", ("filesystem_write",), f"`wget {option}` writes a log file"))
    call.base = found
    if "--spider" in values:
        call.targets = []
    else:
        names = ("-O", "--output-document", "-o", "--output-file", "-a", "--append-output")
        call.targets = [v for v in parsed.values(*names) if v != "-"]
