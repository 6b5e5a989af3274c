""""Did you mean ...?" for mistyped commands and options (difflib's closest match), so
that a typo costs one line instead of the whole usage."""
from __future__ import annotations

import argparse
import difflib
from typing import Iterable, NoReturn


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, or None when none is close."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser whose "unrecognized arguments" error names the nearest option."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            options = [o for action in self._actions for o in action.option_strings]
            for word in message[len(prefix):].split():
                guess = nearest(word.split("=", 1)[0], options) if word.startswith("-") \
                    else None
                if guess is not None:
                    message += f" (did you mean {guess}?)"
                    break
        super().error(message)
