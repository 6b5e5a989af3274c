"""The Python side of the arrowsocket benchmark reader: a TCP server that, for each
connection, reads one Spark partition with a Python data source reader and streams its
record batches as Arrow IPC to ArrowSocketSource.java.

    python benchmarks/jvm_reader/serve.py [--port 0] [--workers 2 | --threads]

A spec (the length-prefixed string a JVM task sends) is base64 of a pickled
`(mode, reader, partition, arrow_schema)`: the DataSourceReader the driver planned with
(the raft source's RaftBatchReader, or benchmarks/spark_raft.py's CeilingReader) and one
of its planned partitions. Mode "stream": the server runs exactly
`reader.read(partition)`, the code a PySpark Python worker runs for that task, and writes
its batches as one Arrow IPC stream. Mode "payloads" (raft): the server runs only the
raft reader's PieceReader (fetching, member fallback, committed-batch visibility) and
forwards each visible committed payload as the farm holds it (zstd Arrow IPC) in a frame
(see ArrowSocketSource.java), for the JVM to decode. The server answers a spec with a status
(4-byte length, then that many bytes of error text; 0: accepted), the body, and the same
status again as a trailer (0 when whole), so a failed read fails its task instead of
ending short. The listening port is printed on stdout's first line.

By default --workers processes, forked once after the imports, accept connections on the
one listening socket and serve one at a time, as Spark reuses a Python worker process per
task slot (warm: imports, pandas, codecs; no GIL shared between tasks). --threads serves
every connection in a thread of this one process instead.
"""
from __future__ import annotations

import argparse
import base64
import os
import pickle
import signal
import socketserver
import struct
import sys
import traceback
from typing import BinaryIO, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))                    # benchmarks/ (spark_raft)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))   # the repository

import pyarrow as pa  # noqa: E402


def encode_spec(reader: object, partition: object, schema: pa.Schema,
                mode: str = "stream") -> str:
    """The spec of one partition (driver side)."""
    return base64.b64encode(pickle.dumps((mode, reader, partition, schema))).decode("ascii")


def decode_spec(spec: bytes) -> tuple[str, object, object, pa.Schema]:
    return pickle.loads(base64.b64decode(spec))


def write_stream(out: BinaryIO, reader, partition, schema: pa.Schema) -> None:
    """Mode "stream": the partition's record batches as one Arrow IPC stream."""
    with pa.ipc.new_stream(out, schema) as writer:
        for batch in reader.read(partition):
            writer.write_batch(batch)


def write_payloads(out: BinaryIO, reader, partition, schema: pa.Schema) -> None:
    """Mode "payloads": each visible committed payload as the farm holds it, framed with
    its entry's index, term and timestamp; journal entries are not handled here."""
    from pyspark_farm.log_access import LogPartition, PieceReader
    from pyspark_farm.raft.rows import ARROW_CONTENT
    settings = reader.settings
    try:
        if isinstance(partition, LogPartition) and partition.pieces:
            pieces = PieceReader(settings.connection, partition.endpoint,
                                 fail_on_data_loss=settings.fail_on_data_loss)
            try:
                for visible in pieces.read(partition.pieces):
                    if visible.type != "commit":
                        raise NotImplementedError(f"payloads mode: a {visible.type} entry "
                                                  f"at {visible.index}")
                    for payload, content_type in zip(visible.records, visible.content_types):
                        if content_type != ARROW_CONTENT:
                            raise NotImplementedError(f"payloads mode: a {content_type} "
                                                      "payload")
                        out.write(FRAME.pack(1, visible.index, visible.term,
                                             visible.timestamp_ms, len(payload)))
                        out.write(payload)
            finally:
                pieces.close()
    finally:
        out.write(struct.pack(">i", 0))   # the frames end, whole or not: the trailer says


WRITERS: dict[str, Callable[[BinaryIO, object, object, pa.Schema], None]] = {
    "stream": write_stream, "payloads": write_payloads}
FRAME = struct.Struct(">iqqqi")


def read_exactly(stream, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"expected {size} bytes, got {len(data)}")
    return data


class PartitionHandler(socketserver.StreamRequestHandler):
    """One connection: a spec in, its partition's Arrow stream and a trailer out."""
    wbufsize = 1 << 20

    def handle(self) -> None:
        (size,) = struct.unpack(">I", read_exactly(self.rfile, 4))
        try:
            mode, reader, partition, schema = decode_spec(read_exactly(self.rfile, size))
            write = WRITERS[mode]
        except Exception:   # refused before any body: the same status the trailer has
            self.status(traceback.format_exc())
            return
        self.status("")
        failure = ""
        try:
            write(self.wfile, reader, partition, schema)
        except Exception:   # the task must fail, not end short: say why in the trailer
            failure = traceback.format_exc()
        self.status(failure)

    def status(self, failure: str) -> None:
        """4-byte length and that much error text; 0: fine."""
        if failure:
            print(failure, file=sys.stderr, flush=True)
        text = failure.encode()
        self.wfile.write(struct.pack(">I", len(text)) + text)
        self.wfile.flush()


class Server(socketserver.TCPServer):
    allow_reuse_address = True
    request_queue_size = 64


class ThreadingServer(socketserver.ThreadingMixIn, Server):
    daemon_threads = True


def warm_up() -> None:
    """What a task's unpickling and reading import, once, before any fork."""
    import pyspark_farm.raft.source  # noqa: F401
    import spark_raft  # noqa: F401
    # pyarrow imports pandas (~0.4 s) on the first array built from Python objects, as
    # the raft reader's type column is: pay it here, as a reused Spark worker pays it once
    pa.array(["warm"])


def serve_in_workers(server: Server, workers: int) -> None:
    """`workers` forked processes accepting on `server`'s socket; this one waits, and
    stops them when it is terminated."""
    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                server.serve_forever()
            finally:
                os._exit(0)
        children.append(pid)

    def stop(signum: int, frame: object) -> None:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    for pid in children:
        os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes (Spark's task slots)")
    parser.add_argument("--threads", action="store_true",
                        help="serve connections in threads of one process, not workers")
    args = parser.parse_args(argv)
    warm_up()
    with (ThreadingServer if args.threads else Server)((args.host, args.port),
                                                       PartitionHandler) as server:
        print(server.server_address[1], flush=True)
        if args.threads:
            server.serve_forever()
        else:
            serve_in_workers(server, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
