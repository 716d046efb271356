"""How a refused command line must look to its user, checked one way everywhere."""

from __future__ import annotations

from click.testing import Result


def one_error_line(result: Result, *needles: str, code: int | None = None) -> str:
    """The command failed (exit ``code``, or any non-zero one) through a clean exit, with
    no traceback and exactly one line starting ``Error:``, which holds every needle;
    that line."""
    if code is None:
        assert result.exit_code not in (0, None), result.output
    else:
        assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
