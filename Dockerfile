# The oomwatch node agent image (also runs the kmsg relay; see daemonset/daemonset.yaml).
#   docker build -t oomwatch:0.2.0 .
# Every Python package comes from requirements.lock / requirements-build.lock, pinned by
# version and sha256 (pip refuses any file whose hash differs).  Pin the base image too:
#   docker build --build-arg BASE=python:3.11-slim-bookworm@sha256:<digest> ...
# `./dev.sh image` builds this same file without a registry: BASE is then a Debian bookworm
# root filesystem made by mmdebstrap (Debian's python3 and python3-venv), and the wheels come
# from a wheelhouse downloaded on the host (WHEELHOUSE names where it is mounted; pip then
# reads no index).  Either base works because everything lives in one venv, /opt/oomwatch.
# Regenerate the locks after changing dependencies in pyproject.toml:
#   pip-compile --extra agent --strip-extras --generate-hashes --allow-unsafe \
#     -o requirements.lock pyproject.toml
#   pip-compile --strip-extras --generate-hashes --allow-unsafe --all-build-deps \
#     --only-build-deps -o requirements-build.lock pyproject.toml
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
ARG WHEELHOUSE=""
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
# Two venvs: /opt/build holds pip and setuptools (to build the oomwatch wheel), /opt/oomwatch
# only what the agent imports; the image ships the second.
RUN python3 -m venv /opt/build && python3 -m venv --without-pip /opt/oomwatch \
 && offline=${WHEELHOUSE:+--no-index --find-links=$WHEELHOUSE} \
 && /opt/build/bin/pip install --no-cache-dir $offline --require-hashes --no-deps -r requirements-build.lock \
 && /opt/build/bin/pip --python /opt/oomwatch/bin/python install --no-cache-dir --no-compile $offline --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY oomwatch ./oomwatch
# The agent needs no torch/TensorFlow: the trainer probe runs inside training pods.  Its own
# libraries (the `agent` extra) come from requirements.lock above.
# What the kubernetes client requires but the agent never imports is not shipped: its asyncio
# twin kubernetes/aio and that twin's stack (aiohttp and its family, attrs), and tzdata
# (python-dateutil's named zones; the client parses RFC 3339 offsets).  The libraries ship as
# bytecode alone, compiled at -OO (no docstrings: the client's generated models are mostly
# docstring); oomwatch keeps its sources, so its tracebacks read.  Then the import check, on
# what ships: every oomwatch module and the client's parts the agent uses.
RUN /opt/build/bin/pip wheel --no-cache-dir --no-index --no-deps --no-build-isolation -w /src/wheel . \
 && /opt/build/bin/pip --python /opt/oomwatch/bin/python install --no-cache-dir --no-compile --no-index --no-deps /src/wheel/*.whl \
 && /opt/build/bin/pip --python /opt/oomwatch/bin/python uninstall -q -y aiohttp aiohttp-retry \
      aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl tzdata \
 && cd /opt/oomwatch/lib/python3*/site-packages && rm -rf kubernetes/aio \
 && find . -name __pycache__ -prune -exec rm -rf {} + \
 && /opt/oomwatch/bin/python -m compileall -q -b -o 2 -x '/site-packages/oomwatch/' "$PWD" \
 && find . -path ./oomwatch -prune -o -name '*.py' -exec rm {} + \
 && /opt/oomwatch/bin/python -m compileall -q "$PWD/oomwatch" \
 && PYTHONDONTWRITEBYTECODE=1 /opt/oomwatch/bin/python -c "import importlib, pkgutil, oomwatch, \
kubernetes.client, kubernetes.config, kubernetes.watch; [importlib.import_module(m.name) \
for m in pkgutil.walk_packages(oomwatch.__path__, 'oomwatch.')]"

FROM ${BASE}
COPY --from=build /opt/oomwatch /opt/oomwatch
# Non-root by default; the DaemonSet runs only the relay and the init step as root.
RUN groupadd --gid 65532 oomwatch && useradd --uid 65532 --gid 65532 --no-create-home oomwatch
USER 65532:65532
# `python` and `oomwatch` are the venv's (the chart's commands name them).
ENV PATH=/opt/oomwatch/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9717 9718
ENTRYPOINT ["oomwatch"]
CMD ["run", "--help"]
