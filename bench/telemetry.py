"""What the telemetry hooks cost a store transition: create → accept cycles with and without them.

Both sides run the same store on one SQLite file, in turns, round by round. The hooked side runs with the
telemetry hooks installed (as the runtime installs them); the bare side with no hooks, so hooked/bare is
what the spans and metrics add. The first half runs with the API alone (no SDK: every span a no-op), the
second after an SDK with an in-memory exporter and reader is installed, as an application would.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench._common import FORM_SCHEMA, PRINCIPAL, bench_operation
from mcp_elicit.model import Decision, DecisionOrigin, DecisionStatus, Operation, new_form_decision
from mcp_elicit.store import hooks, utc_now
from mcp_elicit.store.sqlite import SQLiteStore
from mcp_elicit.telemetry.store import TELEMETRY

Cycle = Callable[[Decision], None]


def questions(operation: Operation, count: int) -> list[Decision]:
    return [
        new_form_decision(
            DecisionOrigin(
                operation_id=operation.operation_id,
                key=f"approve_{uuid.uuid4().hex}",
                principal=PRINCIPAL,
                origin_method=operation.method,
                origin_request_digest=operation.request_digest,
            ),
            message="Deploy to production?",
            requested_schema=FORM_SCHEMA,
            now=utc_now(),
            ttl=timedelta(hours=1),
        )
        for _ in range(count)
    ]


def cycles(store: SQLiteStore) -> Cycle:
    def cycle(decision: Decision) -> None:
        store.create_decision(decision)
        store.transition(decision, DecisionStatus.ACCEPTED, caller=PRINCIPAL, content={"approve": True})

    return cycle


def timed(cycle: Cycle, batch: list[Decision], observer: hooks.StoreHooks | None) -> float:
    gc.collect()
    hooks.install(observer)
    try:
        start = time.perf_counter()
        for decision in batch:
            cycle(decision)
        return (time.perf_counter() - start) / len(batch)
    finally:
        hooks.install(None)


def compare(store: SQLiteStore, operation: Operation, rounds: int, per_round: int) -> tuple[float, float]:
    sides: dict[str, hooks.StoreHooks | None] = {"hooked": TELEMETRY, "bare": None}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    cycle = cycles(store)
    for _ in range(rounds):
        for name, observer in sides.items():
            seconds[name].append(timed(cycle, questions(operation, per_round), observer))
    return statistics.median(seconds["hooked"]), statistics.median(seconds["bare"])


def install_sdk() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracing)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return spans, reader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--per-round", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteStore(Path(directory) / "bench.db", clock=utc_now)
        try:
            operation = store.create_operation(bench_operation(utc_now(), timedelta(hours=1)))
            print(f"create → accept cycles on SQLite, median of {args.rounds} rounds of {args.per_round}")
            for label, setup in (("API only (no SDK)", None), ("SDK, in-memory export", install_sdk)):
                exported = setup() if setup is not None else None
                with_hooks, without = compare(store, operation, args.rounds, args.per_round)
                print(
                    f"  {label:24} hooked {with_hooks * 1e6:7.1f} µs  bare {without * 1e6:7.1f} µs"
                    f"  hooked/bare {with_hooks / without:.3f}"
                )
                if exported is not None:
                    spans, _ = exported
                    assert spans.get_finished_spans(), "the SDK half exported no span"
        finally:
            store.close()


if __name__ == "__main__":
    main()
