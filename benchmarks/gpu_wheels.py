"""The wheels that the GPU machine lacks, for ``benchmarks/gpu_check.py --backend hf`` there.

The lent GPU machine (Python 3.12, torch, transformers, lightning, peft, ... but no package index
and no internet) gets the project's other dependencies, and TRL for ``bench_trl.py``, as wheels
carried with the checkout in the ignored folder ``.whl/``. This script fetches the pinned list below
into it (removing wheels not on the list), checks that they install together with ``--no-deps``,
that every wheel's requirements are on the list or on the machine, and that they stay under 50 MiB,
then prints the line to run there (``carry: [".whl"]``)::

    python benchmarks/gpu_wheels.py
    python benchmarks/gpu_wheels.py --python-version 3.11 --dest /tmp/w311

The second fetches the same pins for Python 3.11 into another folder, for a dry run of the
machine's imports in a 3.11 environment that imitates it (this CPU machine has no torch for 3.12):
``pip install --no-deps --target SITE /tmp/w311/*.whl`` and SITE first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser

from packaging import tags
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

WHEELS = [
    # the project's dependencies (pyproject.toml) that the machine lacks
    "gymnasium==1.4.0", "farama-notifications==0.0.6", "pettingzoo==1.27.0",
    "trueskill==0.4.5",  # an sdist alone on PyPI: built here into a pure-Python wheel
    "jsonargparse==4.53.0", "docstring-parser==0.18.0", "typeshed-client==2.15.0",  # [signatures]
    # openai (remote judges and opponents); openai 3 talks through httpx2, not httpx
    "openai==3.57.0", "httpx2==2.16.2", "httpcore2==2.16.2", "truststore==0.10.5", "sniffio==1.3.1",
    "jiter==0.19.0", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    # pydantic needs typing-extensions >= 4.16 (4.12 fails to import it); the machine's version is
    # not known, and a newer one only adds names
    "typing-extensions==4.16.0",
    # TRL's GRPOTrainer, bench_trl.py's baseline, and what it imports; datasets 5 (pyarrow>=24) fails
    # in Dataset.map on pyarrow 21-23, 4.8.5 works on 21 to 26 (the machine's pyarrow is not known)
    "trl==1.16.0", "datasets==4.8.5", "dill==0.4.1", "multiprocess==0.70.19",
]
BUILD_FROM_SDIST = {"trueskill"}
EXTRAS = {"jsonargparse": {"signatures"}}  # the extras whose requirements must be met too
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]
# The machine's packages: the names from /work/.library/device/KINDS.md, read 2026-11-17 (image
# 'cuda'), and the versions its 'pip list' row gives (the others' versions are not known here).
DEVICE_NAMES = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite
lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas
nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
DEVICE_VERSIONS = {"accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2",
                   "pytorch-lightning": "2.6.6", "safetensors": "0.8.0", "tokenizers": "0.23.2",
                   "torch": "2.11.0", "torchmetrics": "1.9.0", "transformers": "5.17.0"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE_LINE = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
               "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && "
               "PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --backend hf --size 0.6b")


def pip(*args: str) -> None:
    if subprocess.run([sys.executable, "-m", "pip", *args]).returncode:
        sys.exit(f"FAILED: pip {args[0]} (its message above); fix the pins in WHEELS")


def fetch(dest: str, py: tuple[int, int], target: list[str], pins: dict) -> dict[str, list[str]]:
    """Removes the wheels in ``dest`` that are off the list (or for another Python), fetches the rest."""
    supported = [*tags.cpython_tags(py, platforms=PLATFORMS), *tags.compatible_tags(py, f"cp{py[0]}{py[1]}", PLATFORMS)]
    supported = {t for t in supported if t.interpreter in ("py3", f"py{py[0]}{py[1]}") or t.interpreter.startswith("cp")}

    def kept() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for f in sorted(os.listdir(dest)):
            name, version, _, wheel_tags = parse_wheel_filename(f) if f.endswith(".whl") else ("", None, 0, set())
            if pins.get(name) != version or not wheel_tags & supported:
                os.remove(os.path.join(dest, f))
                print("removed", f)
            else:
                found.setdefault(name, []).append(f)
        return found

    for name in BUILD_FROM_SDIST - set(kept()):
        pip("wheel", "-q", "--no-deps", "--no-binary", name, "-w", dest, f"{name}=={pins[name]}")
    pip("download", "-q", "--no-deps", *target, "-d", dest, *[p for p in WHEELS if p.split("==")[0] not in BUILD_FROM_SDIST])
    return kept()


def check_requirements(files: list[str], py: tuple[int, int], pins: dict, failures: list[str]) -> dict:
    """Each wheel's needs: on the list at a version it accepts, or on the machine (by name, or by
    version where known). Returns, per machine package of unknown version, what the wheels need of it."""
    env = {"python_version": f"{py[0]}.{py[1]}", "python_full_version": f"{py[0]}.{py[1]}.3", "os_name": "posix",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    device, unknown = {canonicalize_name(n) for n in DEVICE_NAMES}, {}
    for f in files:
        with zipfile.ZipFile(f) as z:
            meta = Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
        owner = canonicalize_name(meta["Name"])
        extras, requirements = {""} | EXTRAS.get(owner, set()), []
        for _ in range(3):  # an extra may name others of the same package (jsonargparse[signatures])
            requirements = [r for r in map(Requirement, meta.get_all("Requires-Dist") or [])
                            if r.marker is None or any(r.marker.evaluate({**env, "extra": e}) for e in extras)]
            extras |= {e for r in requirements if canonicalize_name(r.name) == owner for e in r.extras}
        for r in requirements:
            name = canonicalize_name(r.name)
            if name == owner:
                continue
            version = pins.get(name) or DEVICE_VERSIONS.get(name)
            if version is not None and not r.specifier.contains(version, prereleases=True):
                failures.append(f"{owner} needs {r}, but {name} is {version} ({'listed' if name in pins else 'machine'})")
            elif name not in pins and name not in device:
                failures.append(f"{owner} needs {r}: neither on the list nor on the machine")
            elif version is None and r.specifier:
                unknown.setdefault(name, set()).add(f"{r.specifier} ({owner})")
    return unknown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the target's Python (the machine's: 3.12)")
    parser.add_argument("--dest", default=os.path.join(ROOT, ".whl"), help="the wheels' folder")
    args = parser.parse_args()
    py = tuple(int(x) for x in args.python_version.split("."))[:2]
    target = ["--python-version", args.python_version, "--implementation", "cp", "--only-binary=:all:"]
    target += [a for p in PLATFORMS for a in ("--platform", p)]
    pins = {canonicalize_name(p.split("==")[0]): Version(p.split("==")[1]) for p in WHEELS}
    assert len(pins) == len(WHEELS), "a package is listed twice"
    os.makedirs(args.dest, exist_ok=True)

    have = fetch(args.dest, py, target, pins)
    failures = [f"{name}: {len(have.get(name, []))} wheels, not one" for name in pins if len(have.get(name, [])) != 1]
    files = sorted(os.path.join(args.dest, f) for fs in have.values() for f in fs)
    with tempfile.TemporaryDirectory() as tmp:  # do they install together, with no index and no deps?
        pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", tmp, *target, *files)
        installed = [d for d in os.listdir(tmp) if d.endswith(".dist-info")]
        if len(installed) != len(pins):
            failures.append(f"{len(installed)} packages installed from {len(pins)} pins")
    unknown = check_requirements(files, py, pins, failures)
    print("Needed of the machine's packages whose versions are not known here:")
    for name, needs in sorted(unknown.items()):
        print(f"  {name}: {', '.join(sorted(needs))}")

    total = sum(os.path.getsize(f) for f in files) / 2**20
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True).stdout.split("\0")
    tree = sum(os.path.getsize(p) for p in (os.path.join(ROOT, t) for t in tracked) if os.path.isfile(p)) / 2**20
    for f in files:
        print(f"{os.path.getsize(f) / 2**20:7.2f} MiB  {os.path.basename(f)}")
    print(f"{total:7.2f} MiB in {len(files)} wheels (limit 50); with the working tree {tree + total:.1f} MiB (limit 64)")
    if total >= 50:
        failures.append(f"the wheels are {total:.1f} MiB, 50 or more")
    for failure in failures:
        print("FAILED:", failure)
    print("\nOn the machine (carry: ['.whl']), in the repository's root:\n" + DEVICE_LINE)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
