"""Benchmark suites for `ailab bench <suite> --json`.

Each module here defines `run(quick: bool = False, argv: list[str] | None = None) -> dict`
returning one flat JSON-able dict of measured figures (always including `device`).
`quick` shortens the run for tests; the full run is what closing notes quote.
"""
