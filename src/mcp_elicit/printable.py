"""Text from elsewhere made safe to print on a terminal, for every layer that prints it.

A server's question, a stored decision, an audit reason: none is trusted. An escape sequence in it
could rewrite the screen (a fake "approved" line, a hidden URL, a terminal hyperlink) and a right-to-left
override could reverse what a person reads. `printable` shows every such character by its code point
(`<U+202E>`) instead; the client's terminal views and the operator CLI both print through it, so the
rule is the same wherever a person reads.
"""

from __future__ import annotations

import unicodedata

__all__ = ["hidden", "printable"]

_KEEP_FORMAT = frozenset({"\u200d"})
"""The zero-width joiner stays: emoji sequences need it and it cannot reorder or hide text."""


def printable(text: str, *, multiline: bool = False, joiners: bool = False) -> str:
    """The text with every character that could act on the terminal, or hide or reorder text, made visible.

    `joiners`: show the zero-width joiner too, as in a host name, where it only ever disguises a name.
    """
    if text.isprintable():  # no Cc, Cf, Cs, Co, Zl, Zp (tab and newline included): nothing to change
        return text
    shown = []
    for character in text:
        if character == "\n" and multiline:
            shown.append(character)
        elif character == "\t":
            shown.append("    " if multiline else " ")
        elif hidden(character) or (joiners and character in _KEEP_FORMAT):
            shown.append(f"<U+{ord(character):04X}>")
        else:
            shown.append(character)
    return "".join(shown)


def hidden(character: str) -> bool:
    """Whether the character controls, hides or reorders text rather than being one a person reads."""
    category = unicodedata.category(character)
    return category in ("Cc", "Cs", "Co", "Zl", "Zp") or (category == "Cf" and character not in _KEEP_FORMAT)
