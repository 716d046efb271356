"""The error the cycle raises when it breaks one of its own invariants.

Kept in a module of its own, never compiled: mypyc cannot compile a subclass of a
built-in exception other than Exception, and compiled modules raise it as is."""


class InvariantError(AssertionError):
    """The cycle broke one of its own invariants (checked where asked)."""
