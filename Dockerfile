# The trainplan operator image: `trainplan operator` on Python 3.11, without the `train`
# extra (no PyTorch; the training pods bring their own image).
#
#   docker build -t REGISTRY/trainplan:0.1.0 .
#   helm install trainplan charts/trainplan -n trainplan --create-namespace \
#       --set image.repository=REGISTRY/trainplan
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install . && rm -rf /src
# kubernetes-validate ships the JSON schemas of every Kubernetes release (about 100 MB); the
# operator reads only the strict 1.30 one (job.podTemplate checks, SCHEMA_VERSION).
RUN python -c "import pathlib, shutil, kubernetes_validate; \
from trainplan.launcher.podtemplate import SCHEMA_VERSION; \
root = pathlib.Path(kubernetes_validate.__file__).parent / 'kubernetes-json-schema'; \
[shutil.rmtree(path) for path in root.iterdir() if path.name != f'v{SCHEMA_VERSION}-local-strict']"

# A numeric non-root user, the chart's runAsUser (Kubernetes checks runAsNonRoot by uid).
RUN groupadd --gid 65532 trainplan \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp trainplan
USER 65532:65532
WORKDIR /tmp
ENV HOME=/tmp

# 8080: operator metrics; 8081: liveness (/healthz); 9443: admission webhook.
EXPOSE 8080 8081 9443
ENTRYPOINT ["trainplan", "operator"]
