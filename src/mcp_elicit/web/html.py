"""The one page shell of every page this server shows (sign-in, decision pages, inbox, `login`'s result): plain
HTML, no JavaScript, strict headers.

Every value a caller puts in a page goes through `text()`; the only markup is the shell and the small set
of elements the pages build from escaped parts.
"""

from __future__ import annotations

from html import escape
from typing import Final

from starlette.responses import HTMLResponse

from mcp_elicit.printable import printable

HEADERS: Final = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

STYLE: Final = """
*{box-sizing:border-box}
body{margin:0;padding:0 1rem;background:#f6f8fa;color:#1f2328;
font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif}
main{max-width:34rem;margin:3rem auto;padding:2rem 2.2rem;background:#fff;border:1px solid #d0d7de;border-radius:10px}
h1,p,.message{overflow-wrap:anywhere}
h1{font-size:1.35rem;margin:0 0 1rem}
.brand{margin:0 0 1.2rem;color:#59636e;font-size:.85rem;letter-spacing:.02em}
.message{white-space:pre-wrap;padding:.8rem 1rem;background:#f6f8fa;border-left:3px solid #0969da;border-radius:4px}
dl{display:grid;grid-template-columns:auto 1fr;gap:.3rem .9rem;margin:1.2rem 0}
dt{font-weight:600;color:#59636e}dd{margin:0;overflow-wrap:anywhere}
.actions{display:flex;gap:.6rem;margin-top:1.6rem;flex-wrap:wrap}
button{padding:.55rem 1.2rem;font:inherit;font-weight:600;border:1px solid #d0d7de;border-radius:6px;
background:#f6f8fa;color:#1f2328;cursor:pointer}
button.primary{background:#1f883d;border-color:#1a7f37;color:#fff}
label{display:block;font-weight:600;margin:1rem 0 .3rem}
input[type=password],input[type=text]{width:100%;padding:.5rem .6rem;font:inherit;
border:1px solid #d0d7de;border-radius:6px}
input:focus{outline:3px solid #a8ccf7;border-color:#0969da}
button:focus-visible{outline:2px solid #0969da;outline-offset:1px}
.error{padding:.7rem .9rem;background:#ffebe9;border:1px solid #ff8182;border-radius:6px;color:#82071e}
.ok{padding:.7rem .9rem;background:#dafbe1;border:1px solid #4ac26b;border-radius:6px;color:#116329}
.muted{color:#59636e;font-size:.9rem}
@media (max-width:30rem){main{margin:1rem auto;padding:1.4rem 1.2rem}}
.field{margin:1.1rem 0;padding:0;border:0;min-width:0}
.field label,.field legend{display:block;font-weight:600;margin:0 0 .3rem;padding:0}
.field input[type=email],.field input[type=url],.field input[type=number],.field input[type=date],
.field input[type=datetime-local],.field select{width:100%;padding:.5rem .6rem;font:inherit;
border:1px solid #d0d7de;border-radius:6px;background:#fff}
.field label.check{display:flex;gap:.5rem;align-items:baseline;font-weight:400;margin:.25rem 0}
.hint{margin:0 0 .35rem;color:#59636e;font-size:.9rem}
.req{color:#59636e;font-weight:400;font-size:.85rem}
.field-error{margin:.3rem 0 0;color:#82071e;font-size:.9rem;font-weight:600}
.field [aria-invalid=true],.field[aria-invalid=true] input{border-color:#cf222e}
h2{font-size:1.1rem;margin:0 0 .6rem;overflow-wrap:anywhere}
.entry{margin:1.4rem 0 0;padding:1.2rem 0 0;border-top:1px solid #d0d7de}
.entry .actions{margin-top:1rem;align-items:center}
a.button{display:inline-block;padding:.55rem 1.2rem;font-weight:600;border:1px solid #1a7f37;border-radius:6px;
background:#1f883d;color:#fff;text-decoration:none}
a.button:focus-visible{outline:2px solid #0969da;outline-offset:1px}
.entry .actions label{margin:0}
.actions input[type=text]{flex:1 1 12rem;width:auto}
.pager{display:flex;gap:1rem;margin-top:1.6rem}
.context{margin:.4rem 0}.note{color:#59636e;font-size:.92rem;margin:.4rem 0 0}
.signed-in{margin-top:1.6rem;padding-top:1rem;border-top:1px solid #d8dee4;color:#59636e;font-size:.92rem}
button.link{display:inline;padding:0;background:none;border:0;color:#0969da;font-weight:400;text-decoration:underline}
"""


def text(value: object) -> str:
    return escape(str(value), quote=True)


CLIENT_NAME_LIMIT: Final = 80


def client_name(name: object) -> str | None:
    """The name a client registered, as every page shows it: on one line, a character that could hide or reorder
    text shown by its code point, at most `CLIENT_NAME_LIMIT` characters; None when it gave none. It is the
    client's own claim: pages show it beside the client's id, or as what asks to sign in, never as proof."""
    if not isinstance(name, str) or not name.strip():
        return None
    shown = printable(" ".join(name.split()))
    return shown if len(shown) <= CLIENT_NAME_LIMIT else shown[: CLIENT_NAME_LIMIT - 1] + "…"


def page(title: str, body: str, *, server: str, status: int = 200) -> HTMLResponse:
    """A whole page around `body`, which the caller built from `text()`-escaped parts."""
    document = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{text(title)}</title>
<style>{STYLE}</style>
</head>
<body><main>
<p class="brand">{text(server)} &middot; secure step</p>
{body}
</main></body>
</html>
"""
    return HTMLResponse(document, status_code=status, headers=HEADERS)
