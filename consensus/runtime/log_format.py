"""How node processes log (``--log-level``, ``--log-format``): readable text lines, or
one JSON object per line for log shippers (Fluent Bit, Vector, Loki's promtail), which
then need no parsing rules:

    {"time": "2026-11-28T02:50:20.123Z", "level": "INFO", "logger": "garlicfarm.node",
     "node": "1", "message": "node 1: follower -> leader (term 2, leader 1)"}

A traceback, when there is one, goes in ``"exception"`` (one string: the line stays one
line).
"""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ms), level, logger, node, message."""

    def __init__(self, node: str | None) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc = {"time": f"{seconds}.{int(record.msecs):03d}Z", "level": record.levelname,
               "logger": record.name, "node": self.node, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str = "text", *, node: str | None = None,
                      stream: TextIO | None = None, text_format: str = TEXT_FORMAT) -> None:
    """The process's root logging (a node command calls it once, at start)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(node) if log_format == "json"
                         else logging.Formatter(text_format))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
