"""ailab's own server as a Ray Serve deployment, for when one process (or one machine) is not enough.

Each replica is one whole ailab app: the same validation, limits, metrics, batcher and model registry
as `ailab serve`, mounted with `@serve.ingress`. Ray adds what one process cannot do: several replicas,
placed on any node of the cluster, a router that spreads requests across them, restarts of dead
replicas, and autoscaling on the number of requests in flight.

    ailab serve --ray --replicas 2                 # Ray on loopback, Serve's proxy on 127.0.0.1:8000
    serve run deploy/serve_config.yaml             # the same with Ray's own CLI and a Serve config file

Two rules keep a replica honest:
- **ready before routed.** The app's start-up (`load_before_serving`) does not finish until the default
  model is loaded, warmed and self-tested, and Ray routes to a replica only once its start-up finished.
  A replica with a slow warm-up therefore never sees a request it would answer 503.
- **unhealthy when it is broken.** Ray calls `check_health` every few seconds; it fails when the model
  failed to load or a batcher's collector died (what `/readyz` reports too), and Ray replaces the replica.

Ray binds 127.0.0.1 unless told otherwise; an API key still guards /metrics, /v1/models and /admin.

At the end, the yardstick: `ray_deployment` and `RayServePredictor`, Ray Serve serving the same predictor with
its own batcher (@serve.batch), which `ailab bench scale` and `ailab bench peers` compare ailab's server with.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Callable

from ailab.server.config import ServerConfig


ROOT_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "serve_config.yaml"  # for `serve run`


def replica_problem(state) -> str | None:
    """Why this replica is broken, or None: for Ray's health check, which restarts a replica that fails it.
    A model still loading is not broken (a restart would only start the load again)."""
    if state.load_error:
        return f"the model failed to load: {state.load_error}"
    dead = [f"{name}: {e.batcher.dead_reason}" for name, e in state.registry.loaded.items() if not e.batcher.healthy]
    return f"batcher collector dead ({'; '.join(dead)})" if dead else None


def deployment(
    models: dict[str, Callable] | None = None,
    default_model: str | None = None,
    config: ServerConfig | None = None,
    replicas: int = 1,
    autoscaling: dict | None = None,
    num_cpus: float = 1,
    max_ongoing_requests: int = 256,
    health_check_period_s: float = 2.0,
    name: str = "ailab",
    ready_before_routed: bool = True,
):
    """A Ray Serve deployment whose every replica runs create_app(models, default_model, config).

    models: name -> loader, as for create_app (default: the MiniLM sentiment classifier). The loaders are
    pickled to the replicas, so they must be importable functions or lambdas over picklable values.
    autoscaling: a Ray AutoscalingConfig dict ({"min_replicas": 1, "max_replicas": 2, ...}); replaces replicas.
    ready_before_routed=False lets a replica's start-up end before its model is ready (the plain server's
    behaviour): Ray then routes to it while it still answers 503. Only for showing why the default is True.
    """
    from ray import serve

    config = (config or ServerConfig()).replace(load_before_serving=ready_before_routed)

    def build_app():  # runs on the replica: each builds its own app, registry and batcher
        from ailab.server.app import create_app

        return create_app(models, default_model, config=config)

    options: dict = {
        "name": name,
        "max_ongoing_requests": max_ongoing_requests,
        "health_check_period_s": health_check_period_s,
        "health_check_timeout_s": 10.0,
        "ray_actor_options": {"num_cpus": num_cpus},
    }
    if autoscaling:
        options["autoscaling_config"] = autoscaling
    else:
        options["num_replicas"] = replicas

    @serve.deployment(**options)
    @serve.ingress(build_app)
    class AilabReplica:
        def check_health(self):
            problem = replica_problem(self.app.state.ailab)
            if problem:
                raise RuntimeError(problem)

        def replica_info(self) -> dict:
            import os

            ctx = serve.get_replica_context()
            return {"replica": ctx.replica_id.unique_id, "pid": os.getpid(), "node": _node_id()}

    return AilabReplica


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def app(args: dict | None = None):
    """The builder `serve run ailab.server.ray_serve:app` calls: the default app, settings from AILAB_*
    variables (and `serve run ... replicas=2 engine=ort_int8_dynamic`)."""
    from ailab.server.app import default_models

    args = dict(args or {})
    config = ServerConfig()
    models, default = default_models(args.get("engine", "torch_eager"), config.too_long)
    return deployment(models, default, config, replicas=int(args.get("replicas", 1))).bind()


def _loopback_only() -> None:
    """Keep every Ray address on 127.0.0.1. A driver joining a cluster at 127.0.0.1 is otherwise sent to this
    machine's network address (Ray assumes a multi-machine cluster), which a sandbox or an off-line laptop may
    not route; the raylets and workers started after this inherit the setting through the environment."""
    import os

    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at each call, so this covers an already imported ray


def _patient_with_a_busy_machine() -> None:
    """Give Serve's HTTP proxy a minute to come up instead of 5 s. Its controller asks a starting proxy "ready?"
    with a 5 s limit and kills it on the first miss; beside a busy neighbour on two cores, starting the proxy's
    worker process took longer, and serve.start() then failed with "the actor died ... killed by ray.kill"
    (six tests of a fresh-clone make test). The controller reads the setting from the environment it inherits
    through the raylet, so it must be set before Ray starts; an operator's own value wins."""
    import os

    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "30")


class RayCluster:
    """Ray on loopback and Serve's HTTP proxy on 127.0.0.1:<port>, one application deployed on it.

    nodes > 1 starts Ray's own multi-node test cluster on this machine (ray.cluster_utils.Cluster: one
    raylet per node, each with `cpus_per_node` logical CPUs), so replicas can be placed on different nodes.
    """

    def __init__(
        self,
        bound_app,
        nodes: int = 1,
        cpus_per_node: float = 2,
        port: int | None = None,
        app_name: str = "ailab",
        route_prefix: str = "/",
        ready_timeout_s: float = 300.0,
    ):
        import ray
        from ray import serve

        t0 = time.perf_counter()
        self.cluster = None
        _loopback_only()
        _patient_with_a_busy_machine()
        try:
            if nodes > 1:
                from ray.cluster_utils import Cluster

                self.cluster = Cluster(
                    initialize_head=True,
                    head_node_args={
                        "num_cpus": cpus_per_node,
                        "include_dashboard": False,
                        "node_ip_address": "127.0.0.1",
                    },
                )
                for _ in range(nodes - 1):
                    self.cluster.add_node(num_cpus=cpus_per_node, node_ip_address="127.0.0.1")
                ray.init(
                    address=self.cluster.address,
                    _node_ip_address="127.0.0.1",
                    log_to_driver=False,
                    configure_logging=False,
                    namespace="ailab",
                )
            else:
                # address="local": a new Ray of our own, always. Without it ray.init() joins whatever Ray already runs
                # on this machine (a multi-node test cluster writes its address to /tmp/ray for that), and then
                # refuses num_cpus: two notebooks or tests side by side would share, or fail on, one cluster.
                ray.init(
                    address="local",
                    num_cpus=cpus_per_node,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    log_to_driver=False,
                    configure_logging=False,
                    namespace="ailab",
                )
            if port is None:  # a port nothing listens on now (ailab.services sits above this layer)
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
            self.port = port
            serve.start(http_options={"host": "127.0.0.1", "port": self.port})
            self.start_s = time.perf_counter() - t0
            self.deploy(bound_app, app_name, route_prefix, ready_timeout_s)
        except BaseException:  # a start that failed half way must not leave Ray's processes to the next user
            with contextlib.suppress(Exception):
                self.stop()
            raise

    def deploy(self, bound_app, app_name: str = "ailab", route_prefix: str = "/", ready_timeout_s: float = 300.0):
        """Deploy (or replace) an application and wait until it runs; it becomes the one `url` and the
        replica counts refer to."""
        from ray import serve

        t1 = time.perf_counter()
        self.app_name = app_name
        serve.run(bound_app, name=app_name, route_prefix=route_prefix, blocking=False)
        self.wait_running(ready_timeout_s)
        self.deploy_s = time.perf_counter() - t1
        self.url = f"http://127.0.0.1:{self.port}{route_prefix.rstrip('/')}"

    def status(self):
        from ray import serve

        return serve.status().applications.get(self.app_name)

    def wait_running(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.status()
            if status is not None and str(status.status).endswith("RUNNING"):
                return
            if status is not None and "FAIL" in str(status.status):
                raise RuntimeError(f"Ray Serve could not deploy {self.app_name}: {status.message}")
            time.sleep(0.5)
        raise TimeoutError(f"Ray Serve did not deploy {self.app_name} within {timeout_s:.0f} s")

    def replica_states(self) -> dict[str, int]:
        """How many replicas are in each state (RUNNING, STARTING, STOPPING, ...)."""
        out: dict[str, int] = {}
        for d in self.status().deployments.values():
            for state, n in d.replica_states.items():
                out[str(state).split(".")[-1]] = out.get(str(state).split(".")[-1], 0) + n
        return out

    def running_replicas(self) -> int:
        return self.replica_states().get("RUNNING", 0)

    def placement(self, calls: int = 40, deployment_name: str = "ailab", timeout_s: float = 10.0) -> list[dict]:
        """Which node each replica runs on, asked of the replicas themselves through Ray's router: rounds of
        `calls` calls of replica_info() sent at once, so an idle replica answers even while a busy one has a
        queue, until every RUNNING replica has answered or `timeout_s` has passed. A fresh handle's router may
        still know one replica only and send a whole round to it (seen once in a fresh-clone run), hence the
        rounds. One row per replica that answered (calls still unanswered at the end are cancelled)."""
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from ray import serve

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:  # Serve's blocking result() refuses a thread that runs an event loop (a notebook's): ask from another
            with ThreadPoolExecutor(1) as pool:
                return pool.submit(self.placement, calls, deployment_name, timeout_s).result()
        handle = serve.get_deployment_handle(deployment_name, app_name=self.app_name)
        seen, deadline = {}, time.monotonic() + timeout_s
        while True:
            pending = [handle.replica_info.remote() for _ in range(calls)]
            for response in pending:
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    info = response.result(timeout_s=left)
                    seen[info["replica"]] = info
                except TimeoutError:
                    response.cancel()  # a replica that died, a long queue or a cluster going down
            if len(seen) >= self.running_replicas() or time.monotonic() >= deadline:
                return sorted(seen.values(), key=lambda r: r["replica"])
            time.sleep(0.2)  # let the router learn of the replicas it has not used yet

    def stop(self) -> None:
        import ray
        from ray import serve

        try:
            if ray.is_initialized():  # else Serve would start a Ray only to shut it down
                serve.shutdown()
        finally:
            ray.shutdown()
            if self.cluster is not None:
                self.cluster.shutdown()


# --------------------------------------------------------------------------- Ray Serve's own batcher, the yardstick
# `ailab bench scale` and `ailab bench peers` compare ailab's server with Ray Serve serving the same predictor
# its own way (`deployment` above is the other thing: ailab's whole app, replicated by Ray).


def ray_deployment(
    max_batch_size: int = 32,
    batch_wait_s: float = 0.010,
    max_ongoing_requests: int = 64,
    max_queued_requests: int = 128,
    autoscaling: dict | None = None,
    threads: int | None = None,
):
    """A Ray Serve deployment of the same predictor ailab.server serves, batched by Ray Serve's own
    @serve.batch instead of ailab's batcher, one text per request. Built lazily: importing this module must
    not need Ray."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    options = {
        "max_ongoing_requests": max_ongoing_requests,
        "max_queued_requests": max_queued_requests,
        "ray_actor_options": {"num_cpus": 1},
    }
    if autoscaling:
        options["autoscaling_config"] = autoscaling
    else:
        options["num_replicas"] = 1

    @serve.deployment(**options)
    class Sentiment:
        def __init__(self):
            import torch

            from ailab.server.predictors import sentiment_predictor

            if threads:
                torch.set_num_threads(threads)  # Ray sets OMP threads to the actor's num_cpus otherwise
            self.predictor = sentiment_predictor("torch_eager")
            self.predictor.warmup(max_batch_size)

        @serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_s)
        async def predict(self, texts: list[str]) -> list[dict]:
            return self.predictor(texts)

        async def __call__(self, request: Request):
            body = await request.json()
            text = body.get("inputs") if isinstance(body, dict) else None
            if not isinstance(text, str) or not text:
                return JSONResponse({"error": 'send {"inputs": "one text"}'}, status_code=422)
            return JSONResponse({"outputs": [await self.predict(text)]})

    return Sentiment


class RayServePredictor(RayCluster):
    """Ray started on loopback only (no dashboard), Serve's HTTP proxy on 127.0.0.1:<free port>, the
    deployment above (ray_deployment) at /predict."""

    def __init__(self, num_cpus: int = 2, threads: int | None = None, **deployment_kw):
        # threads=None keeps Ray's default for a num_cpus=1 replica (OMP/torch threads = 1). Forcing 2 torch
        # threads in the replica was 2x slower here: it fights the HTTP proxy process for the 2 cores.
        super().__init__(
            ray_deployment(threads=threads, **deployment_kw).bind(),
            cpus_per_node=num_cpus,
            app_name="sentiment",
            route_prefix="/predict",
            ready_timeout_s=240.0,
        )

    def replicas(self) -> int:
        return sum(self.replica_states().values())

    def processes(self) -> list[int]:
        """The pid of every Ray process on this machine (raylet, GCS, proxy, controller, replicas)."""
        import psutil

        pids = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if (
                "ray::" in cmd
                or "ray/core" in cmd
                or "raylet" in cmd
                or "gcs_server" in cmd
                or "ray/_private" in cmd
                or "dashboard" in cmd
                and "ray" in cmd
            ):
                pids.append(p.pid)
        return pids
