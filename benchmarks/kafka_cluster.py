"""A Kafka cluster for benchmarks: N brokers in KRaft mode (each broker + controller, a
static quorum) as separate JVMs on loopback, from Maven Central's `org.apache.kafka`
artifacts, and Spark's own Kafka connector (`spark-sql-kafka-0-10`) for `spark.jars`.

Both are fetched once with Maven into a cache folder (`~/.cache/garlicfarm-bench`, or
$GARLICFARM_BENCH_CACHE) and reused. Nothing of Kafka enters the package's dependencies:
this module is for `benchmarks/` only.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from raft_throughput import free_ports

CACHE = Path(os.environ.get("GARLICFARM_BENCH_CACHE",
                            Path.home() / ".cache" / "garlicfarm-bench"))
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>garlicfarm.bench</groupId><artifactId>{name}</artifactId><version>1</version>
<dependencies>{dependencies}</dependencies></project>"""
DEPENDENCY = ("<dependency><groupId>{0}</groupId><artifactId>{1}</artifactId>"
              "<version>{2}</version></dependency>")
# Spark provides these itself; only the connector's own jars go to spark.jars.
CONNECTOR_JARS = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
                  "kafka-clients", "commons-pool2")


def maven_jars(name: str, coordinates: list[tuple[str, str, str]],
               include: tuple[str, ...] = ()) -> list[Path]:
    """The jars of `coordinates` and their dependencies (only `include`d artifact ids if
    given), fetched with Maven into CACHE/name once."""
    folder = CACHE / name
    jars = folder / "jars"
    if not (folder / "complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "pom.xml").write_text(POM.format(
            name=name, dependencies="".join(DEPENDENCY.format(*c) for c in coordinates)))
        command = ["mvn", "-q", "-B", "dependency:copy-dependencies",
                   f"-DoutputDirectory={jars}"]
        if include:
            command.append(f"-DincludeArtifactIds={','.join(include)}")
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"Maven could not fetch {coordinates}:\n{done.stdout[-3000:]}")
        (folder / "complete").touch()
    return sorted(jars.glob("*.jar"))


def connector_jars(spark_version: str) -> list[Path]:
    return maven_jars(f"spark-sql-kafka-{spark_version}",
                      [("org.apache.spark", "spark-sql-kafka-0-10_2.13", spark_version)],
                      CONNECTOR_JARS)


def broker_jars(kafka_version: str) -> list[Path]:
    return maven_jars(f"kafka-{kafka_version}", [
        ("org.apache.kafka", "kafka_2.13", kafka_version),
        ("org.apache.kafka", "kafka-tools", kafka_version),
        ("org.slf4j", "slf4j-reload4j", "1.7.36")])


@dataclass
class KafkaCluster:
    """`brokers` KRaft nodes; `fsync_every_message`: `flush.messages=1` (an fsync per
    append, as the farm's nodes do per batch of entries) instead of Kafka's default of
    leaving flushing to the OS and relying on replication."""
    kafka_version: str = "4.1.1"
    brokers: int = 3
    fsync_every_message: bool = True
    heap: str = "1g"
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kafka-bench-")))
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _ports: list[tuple[int, int]] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{client}" for client, _ in self._ports)

    @property
    def settings(self) -> dict[str, str]:
        """What a reader of the results needs to know about this cluster's durability."""
        return {"kafka": self.kafka_version, "brokers": str(self.brokers),
                "log.flush.interval.messages": "1" if self.fsync_every_message
                else "Kafka's default (the OS flushes)",
                "replication.factor": str(min(3, self.brokers)),
                "min.insync.replicas": str(min(2, self.brokers))}

    def _java(self, *args: str, heap: str | None = None) -> list[str]:
        """A `java` command with the broker's jars and our log4j settings."""
        classpath = ":".join(str(j) for j in broker_jars(self.kafka_version))
        return ["java", *([f"-Xmx{heap}"] if heap else []),
                f"-Dlog4j.configuration=file:{self.folder}/log4j.properties",
                "-cp", classpath, *args]

    def tool(self, what: str, *args: str, timeout: float = 120, stdin: str = "") -> str:
        """Run one of Kafka's command-line tools to its end, `stdin` its input; its
        output (RuntimeError if it fails)."""
        done = subprocess.run(self._java(*args), capture_output=True, text=True,
                              timeout=timeout, input=stdin)
        if done.returncode != 0:
            raise RuntimeError(f"{what} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self, timeout: float = 120) -> "KafkaCluster":
        ports = free_ports(2 * self.brokers)
        self._ports = [(ports[2 * i], ports[2 * i + 1]) for i in range(self.brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{controller}"
                          for i, (_, controller) in enumerate(self._ports))
        cluster_id = _kafka_uuid()
        (self.folder / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, file\nlog4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.folder}/kafka.log\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=%d %p %c %m%n\n")
        for number, (client, controller) in enumerate(self._ports, start=1):
            data = self.folder / f"broker-{number}"
            data.mkdir()
            properties = self.folder / f"broker-{number}.properties"
            replication = min(3, self.brokers)
            lines = {
                "process.roles": "broker,controller", "node.id": str(number),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(data), "num.partitions": "2",
                "default.replication.factor": str(replication),
                "min.insync.replicas": str(min(2, self.brokers)),
                "offsets.topic.replication.factor": str(replication),
                "transaction.state.log.replication.factor": str(replication),
                "transaction.state.log.min.isr": str(min(2, self.brokers)),
                "group.initial.rebalance.delay.ms": "0",
            }
            if self.fsync_every_message:
                lines["log.flush.interval.messages"] = "1"
            properties.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
            self.tool("formatting the storage", "kafka.tools.StorageTool", "format", "-t",
                       cluster_id, "-c", str(properties))
            log = open(self.folder / f"broker-{number}.out", "wb")
            self._procs.append(subprocess.Popen(
                self._java("kafka.Kafka", str(properties), heap=self.heap),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True))
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Every broker accepts connections and the cluster creates a topic."""
        deadline = time.monotonic() + timeout
        for client, _ in self._ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", client), 1).close()
                    break
                except OSError:
                    if any(p.poll() is not None for p in self._procs):
                        raise RuntimeError(f"a Kafka broker exited; see {self.folder}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Kafka did not start in {timeout}s ({self.folder})")
                    time.sleep(0.2)

    def create_topic(self, name: str, partitions: int) -> None:
        self.tool(f"creating topic {name}", "org.apache.kafka.tools.TopicCommand",
                   "--bootstrap-server", self.bootstrap, "--create", "--topic", name,
                   "--partitions", str(partitions),
                   "--replication-factor", str(min(3, self.brokers)))

    def produce_steadily(self, topic: str, rate: int, seconds: float, record_bytes: int) -> None:
        """Kafka's own ProducerPerformance: `rate` records/s of `record_bytes` for
        `seconds`, acks=all (each record stamped with its CreateTime)."""
        self.tool("ProducerPerformance", "org.apache.kafka.tools.ProducerPerformance",
                   "--topic", topic, "--num-records", str(int(rate * seconds)),
                   "--record-size", str(record_bytes), "--throughput", str(rate),
                   "--producer-props", f"bootstrap.servers={self.bootstrap}", "acks=all",
                   timeout=seconds * 4 + 120)

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kafka_uuid() -> str:
    """A cluster id as Kafka writes them: 16 random bytes, URL-safe base64, no padding."""
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
