"""Plain values every side shares, below the codecs (`consensus.wire`) and everything
else: the errors users see (and their wire codes), the values the client API returns,
partition-number checks, and "did you mean" for commands. No I/O, no first-party imports
but each other."""
