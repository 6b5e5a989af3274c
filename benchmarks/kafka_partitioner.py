"""Our key -> partition (pyspark_farm/raft/partitioning.py) against a real Kafka producer's
choice: keyed records go through Kafka's own console producer (its default partitioner)
into topics of several partition counts, Kafka's console consumer prints the partition
each record landed in, and every one must be the partition `key_partitions` computes.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/kafka_partitioner.py [--keys 3000]
        [--partitions 1,2,3,6,7,100] [--kafka-version 4.1.1]

One broker (kafka_cluster.py, fetched once with Maven). The keys: UTF-8 strings of 1 to
60 characters, ASCII and not (2- to 4-byte characters), so every tail length of murmur2
and keys of many blocks occur. Exits 1 on any difference, naming the first keys.
"""
from __future__ import annotations

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
from kafka_cluster import KafkaCluster  # noqa: E402

from pyspark_farm.raft.partitioning import key_partitions  # noqa: E402

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/é€漢𝄞"


def make_keys(count: int, seed: int = 28) -> list[str]:
    """Distinct keys of 1-60 characters (no tab or newline: the console tools' separators)."""
    chooser = random.Random(seed)
    keys: dict[str, None] = {}
    while len(keys) < count:
        keys["".join(chooser.choice(ALPHABET) for _ in range(chooser.randint(1, 60)))] = None
    return list(keys)


def kafka_partitions(kafka: KafkaCluster, topic: str, partitions: int,
                     keys: list[str]) -> dict[str, int]:
    """The partition Kafka's producer put each key's record in."""
    kafka.create_topic(topic, partitions)
    kafka.tool("the console producer", "org.apache.kafka.tools.ConsoleProducer",
               "--bootstrap-server", kafka.bootstrap, "--topic", topic,
               "--property", "parse.key=true", "--property", "key.separator=\t",
               stdin="".join(f"{key}\t{number}\n" for number, key in enumerate(keys)),
               timeout=300)
    printed = kafka.tool("the console consumer", "org.apache.kafka.tools.consumer.ConsoleConsumer",
                         "--bootstrap-server", kafka.bootstrap, "--topic", topic,
                         "--from-beginning", "--max-messages", str(len(keys)),
                         "--timeout-ms", "60000",
                         "--property", "print.partition=true", "--property", "print.key=true",
                         "--property", "print.value=true", "--property", "key.separator=\t",
                         timeout=300)
    found = {}
    for line in printed.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0].startswith("Partition:"):
            found[fields[1]] = int(fields[0].removeprefix("Partition:"))
    if len(found) != len(keys):
        raise RuntimeError(f"the consumer printed {len(found)} of {len(keys)} records:\n"
                           f"{printed[:2000]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=3000)
    parser.add_argument("--partitions", default="1,2,3,6,7,100")
    parser.add_argument("--kafka-version", default="4.1.1")
    args = parser.parse_args(argv)
    try:
        counts = [int(p) for p in args.partitions.split(",")]
    except ValueError:
        parser.error(f"--partitions: {args.partitions!r} is not a comma-separated list of ints")
    if not 1 <= args.keys <= 1_000_000 or not all(1 <= c <= 10_000 for c in counts):
        parser.error("--keys must be 1 to 1,000,000 and each partition count 1 to 10,000")
    keys = make_keys(args.keys)
    failed = 0
    with KafkaCluster(args.kafka_version, brokers=1, fsync_every_message=False) as kafka:
        for count in counts:
            theirs = kafka_partitions(kafka, f"keys-{count}", count, keys)
            ours = key_partitions(pa.array(keys), count).tolist()
            wrong = [(k, theirs[k], p) for k, p in zip(keys, ours) if theirs[k] != p]
            used = len(set(ours))
            print(f"{count:>5} partitions: {len(keys) - len(wrong):,} of {len(keys):,} keys "
                  f"where Kafka's producer put them ({used} partitions used)"
                  + (f"; first differences (key, kafka, ours): {wrong[:3]}" if wrong else ""))
            failed += bool(wrong)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
