"""What a scrape of a Prometheus collector renders, read back by the client library's own
parser: the tests of the server's metrics check these samples, not the text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(collector: Collector) -> Samples:
    """Every sample ``collector`` renders, by name and sorted labels."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}
