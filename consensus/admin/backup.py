"""``garlicfarm snapshot save | restore | status``: backups of a running farm.

**save** reads one member (the leader unless ``--member``) over the client API: the
snapshot its log builds on (the oldest kept at or above the log's base, the one a
lagging member would install; `read_snapshot`, in chunks) and every entry from the log's
first retained index to the commit index it had applied when the save began
(`read_entries`, in pages). Entries compacted away before that are gone: the snapshot
stands for them. The file (backup_format.py) is written to ``FILE.tmp``, fsynced and
renamed, so ``FILE`` is a whole backup or the previous one. If the member compacts past
what the save has not read yet, the save starts over (a few times, with backoff).

**restore** lays out a data directory for a new farm's first member: the same snapshot,
the same entries at the same indexes (log, log-base, snapshots/, hardstate with the
backup's last index committed), and one more entry, a configuration whose only voter is
``--id`` at ``--endpoint``: a farm started from it serves what the source served, so a
reader's checkpointed offsets stay valid, and more members join with ``add-server``.

**status** checks a file end to end and says what it holds.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Iterator, Sequence, TextIO

from consensus.admin.admin_output import EXIT_FARM, EXIT_OK, EXIT_USAGE, UsageError, \
    print_json
from consensus.admin.backup_format import (SNAPSHOT_CHUNK_BYTES, BackupHeader,
                                           BackupReader, BackupWriter, CorruptBackup)
from consensus.admin.farm_target import connection_parser, parse_node_id, \
    resolve_connection, split_endpoints
from consensus.common.errors import FarmError, IndexUnderflow
from consensus.raft import Configuration, Entry, EntryType
from consensus.storage import HardState, HardStateFile, SegmentedLog, SnapshotStore
from consensus.storage.files import fsync_directory
from consensus.storage.snapshot import FileCheck

PAGE_BYTES = 4 << 20            #: entries per read_entries page (bytes of payload)
APPEND_BATCH = 1024             #: entries per log append while restoring
SAVE_ATTEMPTS = 4


class _LogMoved(Exception):
    """The member compacted (or pruned the snapshot) past what the save still needs."""


# --- save -----------------------------------------------------------------------------------

def save_backup(client, path: str, *, cluster: str, member: str | None = None,
                attempts: int = SAVE_ATTEMPTS) -> dict:
    """Save one member's snapshot and retained committed entries to `path`; a summary.
    `member`: the endpoint to read (default: the leader's)."""
    if member is None:
        view = client.get_servers()
        member = view.leader_endpoint
        if member is None:
            raise FarmError("the farm names no leader to read from; retry, or give "
                            "--member HOST:PORT")
    last: _LogMoved | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(2.0, 0.2 * 2 ** attempt))
        try:
            return _save_once(client, path, cluster, member)
        except _LogMoved as exc:
            last = exc
    raise FarmError(f"{member} compacted its log faster than the save read it "
                    f"({attempts} attempts; last: {last}): save from a member that "
                    f"snapshots less often, or raise its --retain-entries")


def _save_once(client, path: str, cluster: str, member: str) -> dict:
    first = client.read_snapshot(0, 0, max_bytes=SNAPSHOT_CHUNK_BYTES, endpoint=member)
    start, index = first["first"], first["index"]
    if start < 1 or index < 0 or first["size"] < 0 or first["applied"] < start - 1 or \
            (index and not start - 1 <= index):
        raise FarmError(f"{member} describes an impossible log (first {start}, applied "
                        f"{first['applied']}, snapshot {index}): is it a garlicfarm node?")
    if index == 0 and start > 1:
        raise FarmError(f"{member}'s log starts at {start} but it has no snapshot below "
                        f"it: cannot save a consistent backup from this member")
    last = max(first["applied"], index)
    snapshot = None if index == 0 else {
        "index": index, "term": first["term"], "bytes": first["size"],
        "configuration": first["meta"].get("configuration")}
    header = BackupHeader(cluster, int(time.time() * 1000),
                          {"endpoint": member, "node": _node_of(client, member)}, start,
                          first["base_term"], last, snapshot)
    directory = os.path.dirname(os.path.abspath(path))
    temp = path + ".tmp"
    try:
        with open(temp, "wb") as file:
            writer = BackupWriter(file)
            writer.header(header)
            if snapshot is not None:
                _copy_snapshot(client, member, first, writer, path)
            configuration, last_term = _copy_entries(client, member, header, writer)
            trailer = writer.finish(last_term, configuration)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        fsync_directory(directory)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return {"file": path, "bytes": os.path.getsize(path), **header.to_dict(),
            "entries": trailer["entries"], "last_term": last_term,
            "configuration": configuration, "file_crc32": trailer["file_crc32"]}


def _node_of(client, endpoint: str) -> int | None:
    answer = client.ping(endpoint)
    return answer.get("node") if isinstance(answer, dict) else None


def _copy_snapshot(client, member: str, answer: dict, writer: BackupWriter,
                   path: str) -> None:
    index, size = answer["index"], answer["size"]
    check = FileCheck(f"{member} snapshot {index}", size)
    offset = 0
    while True:
        data = answer["data"]
        if answer["index"] != index or answer["offset"] != offset or \
                (not data and offset < size):
            raise _LogMoved(f"snapshot {index} was replaced by {answer['index']}")
        check.feed(data)
        writer.snapshot_chunk(data)
        offset += len(data)
        if offset >= size:
            break
        answer = client.read_snapshot(index, offset, max_bytes=SNAPSHOT_CHUNK_BYTES,
                                      endpoint=member)
    check.finish()      # the member's own snapshot file checks out before it is kept


def _copy_entries(client, member: str, header: BackupHeader,
                  writer: BackupWriter) -> tuple[str | None, int]:
    """Entries first_index..last_index in pages; the configuration in force at the last
    one and its term."""
    snapshot = header.snapshot
    configuration = snapshot["configuration"] if snapshot else None
    index, last_term = header.first_index, header.base_term
    while index <= header.last_index:
        try:
            page = client.read_raw_entries(index, header.last_index + 1,
                                           max_bytes=PAGE_BYTES, endpoint=member)
        except IndexUnderflow as exc:
            raise _LogMoved(str(exc)) from None
        if not page:
            raise FarmError(f"{member} answered no entries from {index} (it applied up to "
                            f"{header.last_index} when the save began)")
        for entry in page:
            if entry.index != index:
                raise FarmError(f"{member} answered entry {entry.index} where {index} "
                                f"belongs")
            if snapshot and index == snapshot["index"] and entry.term != snapshot["term"]:
                raise FarmError(f"{member}: entry {index} has term {entry.term}, its "
                                f"snapshot says {snapshot['term']}")
            writer.entry(entry)
            if entry.type == EntryType.CONFIGURATION:
                configuration = entry.data.decode("utf-8", "replace")
            index, last_term = index + 1, entry.term
    return configuration, last_term


# --- restore --------------------------------------------------------------------------------

def restore_backup(path: str, data_dir: str, *, endpoint: str, node_id: int = 1,
                   segment_bytes: int = 64 << 20) -> dict:
    """Lay out `data_dir` (absent or empty) as node `node_id` of a new farm whose only
    voter it is, at `endpoint`, serving the backup's entries at their indexes."""
    if os.path.isdir(data_dir) and os.listdir(data_dir):
        raise UsageError("--data-dir", f"{data_dir} is not empty: restore into a new "
                                       f"(or empty) directory; nothing was written")
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise UsageError("--data-dir", f"{data_dir} is not a directory")
    created = not os.path.exists(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    try:
        with open(path, "rb") as file:
            reader = BackupReader(file, path)
            summary = _lay_out(reader, data_dir, endpoint, node_id, segment_bytes)
    except BaseException:
        if created:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            for name in os.listdir(data_dir):
                target = os.path.join(data_dir, name)
                shutil.rmtree(target) if os.path.isdir(target) else os.unlink(target)
        raise
    fsync_directory(data_dir)
    return summary


def _lay_out(reader: BackupReader, data_dir: str, endpoint: str, node_id: int,
             segment_bytes: int) -> dict:
    # imported here: `garlicfarm snapshot status` needs none of the node's storage
    from consensus.runtime.disk_storage import RECORD_HEAD, encode_record, write_log_base
    header = reader.header
    items = reader.items()
    after_snapshot: list = []

    def snapshot_chunks() -> Iterator[bytes]:
        for kind, value in items:
            if kind != "snapshot":
                after_snapshot.append(value)
                return
            yield value

    if header.snapshot is not None:
        SnapshotStore(os.path.join(data_dir, "snapshots")).save_file(
            int(header.snapshot["index"]), snapshot_chunks())
    log = SegmentedLog.open(os.path.join(data_dir, "log"), fsync="batch",
                            segment_bytes=segment_bytes, head_bytes=RECORD_HEAD.size)
    last_term = header.base_term
    try:
        if header.first_index > 1:
            log.reset(header.first_index)
        batch: list[bytes] = []
        for entry in _chain(after_snapshot, items):
            batch.append(encode_record(entry))
            last_term = entry.term
            if len(batch) >= APPEND_BATCH:
                log.append_many(batch)
                batch = []
        term = max(last_term, 1)
        own = Configuration.of({node_id}, (), {node_id: endpoint})
        batch.append(encode_record(Entry(term, header.last_index + 1,
                                         EntryType.CONFIGURATION, own.encode())))
        log.append_many(batch)
        log.sync()
    finally:
        log.close()
    if header.first_index > 1:
        write_log_base(data_dir, header.first_index - 1, header.base_term)
    HardStateFile(os.path.join(data_dir, "hardstate")).save(
        HardState(term, None, header.last_index))
    return {"data_dir": data_dir, "node": node_id, "endpoint": endpoint,
            "source_cluster": header.cluster, "first_index": header.first_index,
            "last_index": header.last_index,
            "snapshot_index": header.snapshot["index"] if header.snapshot else None,
            "entries": (reader.trailer or {}).get("entries"),
            "configuration_index": header.last_index + 1}


def _chain(first: list, rest: Iterator[tuple[str, object]]) -> Iterator[Entry]:
    """The entries: the one the snapshot's reader stopped at, then the others (the
    reader refuses snapshot bytes after an entry)."""
    yield from first
    for _, value in rest:
        yield value


# --- status ---------------------------------------------------------------------------------

def backup_status(path: str) -> dict:
    """Read and check the whole file; what it holds."""
    with open(path, "rb") as file:
        reader = BackupReader(file, path)
        for _ in reader.items():
            pass
    trailer = reader.trailer or {}
    return {"file": path, "bytes": reader.size, "verified": True, **reader.header.to_dict(),
            "entries": trailer.get("entries"), "last_term": trailer.get("last_term"),
            "configuration": trailer.get("configuration"),
            "file_crc32": trailer.get("file_crc32")}


# --- the command ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="garlicfarm snapshot",
                                description="Backups of a running farm (docs/operations.md,"
                                            " \"Backup and restore\").")
    sub = p.add_subparsers(dest="action", required=True, metavar="save|restore|status")
    save = sub.add_parser("save", parents=[connection_parser()], prog="garlicfarm snapshot "
                          "save", help="save a running farm's snapshot and retained entries")
    save.add_argument("file", metavar="FILE", help="the backup file (replaced atomically)")
    save.add_argument("--member", metavar="HOST:PORT", help="read this member (default: the "
                      "leader); a follower spares the leader the reads")
    restore = sub.add_parser("restore", prog="garlicfarm snapshot restore",
                             help="prepare a new farm's first member from a backup")
    restore.add_argument("file", metavar="FILE", help="the backup file")
    restore.add_argument("--data-dir", required=True, metavar="DIR",
                         help="the new member's data directory (absent or empty)")
    restore.add_argument("--endpoint", "--listen", dest="endpoint", required=True,
                         metavar="HOST:PORT", help="where the new member will be reached "
                         "(its --listen, or --advertise): it goes into the new "
                         "configuration")
    restore.add_argument("--id", default="1", metavar="ID", help="the new member's node id "
                         "(default 1)")
    restore.add_argument("--cluster", metavar="NAME", help="the new farm's cluster name "
                         "(default: the source's name + '-restored', so the old farm's "
                         "members never take it for theirs)")
    restore.add_argument("--json", action="store_true", help="print JSON")
    status = sub.add_parser("status", prog="garlicfarm snapshot status",
                            help="check a backup file end to end; what it holds")
    status.add_argument("file", metavar="FILE", help="the backup file")
    status.add_argument("--json", action="store_true", help="print JSON")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_:
        return EXIT_OK if exit_.code in (0, None) else EXIT_USAGE
    name = f"garlicfarm snapshot {args.action}"
    try:
        if args.action == "save":
            target = resolve_connection(args)
            member = split_endpoints(args.member, "--member")[0] if args.member else None
            with target.client() as client:
                doc = save_backup(client, args.file, cluster=target.cluster, member=member)
            text = (f"saved {doc['file']} ({doc['bytes']} bytes): entries "
                    f"{doc['first_index']}..{doc['last_index']} ({doc['entries']})"
                    + _snapshot_text(doc) + f" of cluster {doc['cluster']!r} from "
                    f"{doc['source']['endpoint']}")
        elif args.action == "restore":
            endpoint = _dialable(args.endpoint)
            node_id = parse_node_id(args.id, "--id")
            doc = restore_backup(args.file, args.data_dir, endpoint=endpoint, node_id=node_id)
            doc["cluster"] = args.cluster or f"{doc['source_cluster']}-restored"
            doc["command"] = (f"garlicfarm node --id {node_id} --listen {endpoint} "
                              f"--data-dir {args.data_dir} --cluster {doc['cluster']}")
            text = (f"restored entries {doc['first_index']}..{doc['last_index']} into "
                    f"{doc['data_dir']} as node {node_id} of a new farm (configuration at "
                    f"entry {doc['configuration_index']}); start it with\n  {doc['command']}"
                    f"\n(with your credentials and TLS options), then add members with "
                    f"`garlicfarm add-server`")
        else:
            doc = backup_status(args.file)
            text = (f"{doc['file']}: verified, {doc['bytes']} bytes, cluster "
                    f"{doc['cluster']!r}, entries {doc['first_index']}..{doc['last_index']}"
                    f" ({doc['entries']}, last term {doc['last_term']})"
                    + _snapshot_text(doc) + f", saved from {doc['source'].get('endpoint')}")
    except UsageError as exc:
        err.write(f"{name}: {exc}\n")
        return EXIT_USAGE
    except CorruptBackup as exc:
        err.write(f"{name}: {exc}\n")
        return EXIT_USAGE
    except FarmError as exc:
        err.write(f"{name}: {type(exc).__name__}: {exc}\n")
        return EXIT_USAGE if getattr(exc, "option", None) else EXIT_FARM
    except OSError as exc:
        err.write(f"{name}: {exc}\n")
        return EXIT_USAGE if isinstance(exc, FileNotFoundError) else EXIT_FARM
    if args.json:
        print_json(out, doc)
    else:
        out.write(text + "\n")
    return EXIT_OK


def _snapshot_text(doc: dict) -> str:
    snapshot = doc.get("snapshot")
    if not snapshot:
        return ", no snapshot"
    return f", snapshot {snapshot['index']} (term {snapshot['term']}, {snapshot['bytes']} bytes)"


def _dialable(text: str) -> str:
    from consensus.net.security import WILDCARDS
    endpoint = split_endpoints(text, "--endpoint")[0]
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if host in WILDCARDS or endpoint.endswith(":0"):
        raise UsageError("--endpoint", f"{endpoint} is not an address others can dial: "
                                       f"give the host and port the node will be reached at")
    return endpoint
