"""``safepoint ui``: the review page, a local web page over the library API (the ``ui`` extra: Starlette, uvicorn,
Jinja2; server-rendered, no script at all in the page).

``guard`` keeps the page to the person who started it (loopback only, the Host header checked against DNS
rebinding, a per-server token, every write checked against cross-site requests); ``app`` holds the pages and the
JSON API, each a thin call into ``safepoint.api``; ``serve`` binds the loopback socket and runs uvicorn."""
