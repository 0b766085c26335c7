"""The forms of an HTML page as a browser would submit them, for the demo's sign-in and its scripted browser.

The demo walks real pages over HTTP (the reference server's sign-in and decision pages, the provider's
sign-in and consent) instead of calling anything behind them, so it meets the same CSRF tokens and hidden
request fields a person's browser does. A regular expression would break on the first change of attribute
order; the standard library's HTML parser does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class PageForm:
    action: str
    method: str
    hidden: dict[str, str] = field(default_factory=dict)
    buttons: list[tuple[str, str]] = field(default_factory=list)
    """(name, value) of each named submit button, in page order."""


@dataclass
class Page:
    title: str
    heading: str
    forms: list[PageForm]

    def form(self, action: str) -> PageForm | None:
        """The first form posting to exactly `action` (as written in the page)."""
        return next((form for form in self.forms if form.action == action), None)

    def form_ending(self, suffix: str) -> PageForm | None:
        return next((form for form in self.forms if form.action.endswith(suffix)), None)


def read_page(html: str) -> Page:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return Page(title=" ".join(parser.title.split()), heading=" ".join(parser.heading.split()), forms=parser.forms)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[PageForm] = []
        self.title = ""
        self.heading = ""
        self._form: PageForm | None = None
        self._in: str | None = None
        self._headings = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._form = PageForm(action=values.get("action", ""), method=values.get("method", "get").lower())
            self.forms.append(self._form)
        elif tag == "input" and self._form is not None and values.get("type") == "hidden" and "name" in values:
            self._form.hidden[values["name"]] = values.get("value", "")
        elif tag == "button" and self._form is not None and values.get("name"):
            self._form.buttons.append((values["name"], values.get("value", "")))
        elif tag == "title":
            self._in = "title"
        elif tag == "h1":
            self._headings += 1
            self._in = "h1" if self._headings == 1 else None

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag in ("title", "h1"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "title":
            self.title += data
        elif self._in == "h1":
            self.heading += data
