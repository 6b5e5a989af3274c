"""The state machine's verdicts (`machines.Verdicts`) shipped to the reader process.

A page shows an entry or hides it by facts that never change once the entry applied:
the index at which each request id first applied (`RequestLog`, remembered and
forgotten in index order) and the indexes of the effective COMMITs (`Ledger.effective`,
append-only per query). So the reader process keeps a mirror of just those facts, and
the loop sends what is new since its last capture (`VerdictFeed.capture`: the request
ids applied since, walked back from the newest; the highest index forgotten; the new
effective commits per query), O(what applied since) of the loop's time. A page is
judged by the mirror as of its call's capture or later, which holds every fact of the
entries it may show (they applied before the capture): the same verdicts as the
reader threads', which judge by the machine at the end of the read. A `full` capture
(the mirror's first, after the machine was restored from a snapshot, or after the
process was restarted) sends the whole RequestLog (at most `DEDUP_CAPACITY` ids, copied by one C call; the reader thread encodes them).
"""
from __future__ import annotations

import array
from collections import OrderedDict
from typing import Any

from consensus.runtime.machines import FarmStateMachine, Ledger, RequestLog, Verdicts

#: a delta, as msgpack sends it: {"g", "full", "ids": [(request id, its outcome: (index,
#: term, result, error)), ...],
#: "forgotten", "effective": {query: array('q') bytes}}
Delta = dict[str, Any]


class VerdictFeed:
    """What the loop has sent of one state machine's verdicts (the loop's thread only)."""

    def __init__(self, key: int) -> None:
        self.key = key                  #: names the machine in the reader process
        self.generation = -1            #: the process generation the mirror belongs to
        self._requests: RequestLog | None = None
        self._ledger: Ledger | None = None
        self._through = 0               # the newest request index sent
        self._forgotten = -1
        self._effective: dict[str, int] = {}   # query -> commits sent

    def capture(self, machine: FarmStateMachine, fresh: bool) -> Delta | None:
        """What is new since the last capture (everything when `fresh` or when the
        machine's state objects were replaced by a restore); None when nothing is."""
        requests, ledger = machine.requests, machine.ledger
        full = fresh or requests is not self._requests or ledger is not self._ledger
        if full:
            self._requests, self._ledger = requests, ledger
            self._through, self._forgotten, self._effective = 0, -1, {}
        if full:                        # one copy in C (the loop's time: ~2 ms at 65,536)
            ids = list(requests.outcomes.items())
        else:
            ids = []
            for item in reversed(requests.outcomes.items()):
                if item[1][0] <= self._through:
                    break
                ids.append(item)
            ids.reverse()
        if ids:
            self._through = ids[-1][1][0]
        effective = {}
        for query, indexes in ledger.effective.items():
            sent = self._effective.get(query, 0)
            if len(indexes) > sent:
                effective[query] = indexes[sent:].tobytes()
                self._effective[query] = len(indexes)
        forgotten = requests.forgotten_through
        if not (full or ids or effective or forgotten != self._forgotten):
            return None
        self._forgotten = forgotten
        return {"g": self.key, "full": full, "ids": ids, "forgotten": forgotten,
                "effective": effective}


def wire_delta(delta: Delta) -> dict[str, Any]:
    """A delta as the process receives it (a reader thread builds it, off the loop): the
    request ids as a list of bytes and their indexes as one array('q') buffer, which
    msgpack decodes ~10x faster than 65,536 (id, outcome) pairs."""
    ids = delta["ids"]
    return {**delta, "ids": [item[0] for item in ids],
            "at": array.array("q", [item[1][0] for item in ids]).tobytes()}


class VerdictMirror:
    """The reader process's copy of each fed machine's verdict facts (`wire_delta`s)."""

    def __init__(self) -> None:
        self._machines: dict[int, tuple[RequestLog, Ledger]] = {}

    def apply(self, delta: Delta) -> None:
        key = delta["g"]
        if delta["full"]:
            self._machines[key] = (RequestLog(), Ledger())
        elif key not in self._machines:
            raise ValueError(f"verdicts of machine {key} begin without a full capture")
        requests, ledger = self._machines[key]
        outcomes = requests.outcomes
        indexes = array.array("q")
        indexes.frombytes(delta["at"])
        if delta["full"]:
            outcomes = requests.outcomes = OrderedDict(zip(delta["ids"], zip(indexes)))
        else:
            for request_id, index in zip(delta["ids"], indexes):
                outcomes.pop(request_id, None)  # forgotten, then applied anew: the newest
                outcomes[request_id] = (index,)
        forgotten = requests.forgotten_through = delta["forgotten"]
        while outcomes and next(iter(outcomes.values()))[0] <= forgotten:
            outcomes.popitem(last=False)        # judged forgotten (None) either way
        for query, raw in delta["effective"].items():
            ledger.effective.setdefault(query, array.array("q")).frombytes(raw)

    def verdicts(self, key: int) -> Verdicts:
        requests, ledger = self._machines[key]
        return Verdicts(requests, ledger)
