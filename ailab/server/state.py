"""What the server's routes share: its settings, the model registry, the metrics and its own flags."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ailab.server.config import ServerConfig
from ailab.server.metrics import ServerMetrics, rss_bytes
from ailab.server.registry import ModelRegistry


@dataclass
class ServerState:
    config: ServerConfig
    registry: ModelRegistry
    metrics: ServerMetrics
    ready: bool = False
    load_error: str | None = None
    started: float = field(default_factory=time.time)
    in_flight: int = 0
    loop: asyncio.AbstractEventLoop | None = None
    generation: object | None = None  # a server.async_llm.AsyncLLM behind the OpenAI routes
    _rss: tuple = (0.0, 0)

    async def load_default(self) -> None:
        """Load and warm the default model, and the generation model's engine; on failure the server lives on
        and /readyz says why."""
        try:
            if self.registry.default is not None:
                await self.registry.get(self.registry.default)
            if self.generation is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.generation.ready.wait)
                if not self.generation.healthy:
                    raise RuntimeError(self.generation.dead_reason)
            self.ready = True
        except Exception as e:  # noqa: BLE001 - a fallback may still answer
            self.load_error = f"{type(e).__name__}: {e}"

    def rss(self) -> int:
        """Process RSS, sampled at most every 0.5 s (psutil costs ~20 us; not per request)."""
        now = time.monotonic()
        if now - self._rss[0] > 0.5:
            self._rss = (now, rss_bytes())
        return self._rss[1]
