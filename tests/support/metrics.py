"""GET /metrics scraped and read."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


async def scrape(client, headers: dict[str, str] | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of GET /metrics: (name, sorted labels) -> value."""
    resp = await client.get("/metrics", headers=headers)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
