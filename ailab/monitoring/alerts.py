"""Alert evaluation: a rule stepped through a recorded series as Prometheus evaluates it (inactive -> pending ->
firing)."""

from __future__ import annotations

from dataclasses import dataclass

from ailab.monitoring.rules import Rule


@dataclass
class AlertResult:
    rule: Rule
    states: list[tuple[float, str, float]]  # (ts, "inactive" | "pending" | "firing", value)
    fired_at: float | None

    @property
    def fired(self) -> bool:
        return self.fired_at is not None


def evaluate(rule: Rule, series: list[tuple[float, float]], time_scale: float = 1.0) -> AlertResult:
    """Step through `series` as Prometheus evaluates a rule: the condition must hold at every evaluation
    for `rule.for_s * time_scale` seconds before the alert fires; one false evaluation resets it."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0 (got {time_scale})")
    hold_s = rule.for_s * time_scale
    states, since, fired_at = [], None, None
    for ts, value in series:
        if rule.holds(value):
            since = ts if since is None else since
            state = "firing" if ts - since >= hold_s else "pending"
            if state == "firing" and fired_at is None:
                fired_at = ts
        else:
            since, state = None, "inactive"
        states.append((ts, state, value))
    return AlertResult(rule, states, fired_at)
