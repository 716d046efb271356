"""Values cut short for one-line error messages (trace loaders, the cluster and profile
readers, command-line values): a message names the bad value but never grows with it."""

from __future__ import annotations


def clip(value: object, n: int = 60) -> str:
    """repr() of a value cut to n characters: messages stay one short line."""
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def shown(value: object, n: int = 40) -> str:
    """str() of a value (a time stamp, say) cut to n characters, for messages."""
    t = str(value)
    return t if len(t) <= n else t[: n - 3] + "..."


def clip_middle(text: str, n: int) -> str:
    """text cut to about n characters in its middle, so its start (what is wrong) and
    end (what would be right) both stay: for messages that quote a value given."""
    if len(text) <= max(n, 5):
        return text
    keep = max(n - 5, 0)
    return text[: keep * 2 // 3] + " ... " + text[len(text) - keep // 3 :]


def visible(text: str) -> str:
    """text with every unprintable character (a line break, an escape) written as its
    escape sequence: a message quoting a value stays one line and prints no control."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def terminal_safe(text: str) -> str:
    """A job's output for a terminal: its lines and tabs kept, every other control
    (an escape sequence, a carriage return, a bidi override) written as its escape, so
    that printing someone's output cannot drive the reader's terminal."""
    return "\n".join(
        "\t".join(visible(part) for part in line.split("\t")) for line in text.split("\n")
    )
