# The Lanehouse image (docker-compose.yml builds it once as lanehouse:0.1.0): the consumer engine,
# Dagster's code server, webserver and daemon, and the Spark standalone master and workers.
# The cluster runs pyspark's own Spark from this image, so driver and executors always have the
# same Spark (constraints.txt) and the same Python.
FROM python:3.11.14-slim-bookworm

# Spark needs a Java runtime (17 on bookworm; Spark 4 needs 17 or newer). SPARK_HOME (below) is
# pyspark's directory: spark-class would otherwise look for it with whatever python3 is on PATH.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DAGSTER_HOME=/opt/dagster/home \
    LANEHOUSE_HOME=/var/lib/lanehouse \
    LANEHOUSE_LAKE=/data/lake \
    LANEHOUSE_WORKLOADS=/opt/lanehouse/workloads \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark

WORKDIR /opt/lanehouse

# Dependencies first, pinned by constraints.txt: a code change does not reinstall them. With
# them the `deploy` extra: the run launchers deploy/dagster.yaml (Docker) and the Kubernetes
# example name, loaded by every process that reads the instance.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['deploy']))" > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY consumers ./consumers
COPY orchestration ./orchestration
COPY spark_jobs ./spark_jobs
COPY workloads ./workloads
RUN pip install --no-deps -c constraints.txt . \
    && rm -rf build *.egg-info

# Dagster's instance and workspace for the compose stack (deploy/). The directories that named
# volumes mount over are created here, owned by the unprivileged user the processes run as.
COPY deploy/dagster.yaml /opt/dagster/home/dagster.yaml
COPY deploy/workspace.yaml /opt/dagster/workspace.yaml
RUN useradd --create-home --uid 10001 lanehouse \
    && mkdir -p /opt/dagster/home/storage /data/lake /var/lib/lanehouse \
    && chown lanehouse /opt/dagster/home/storage /data/lake /var/lib/lanehouse
USER lanehouse

CMD ["lanehouse", "--help"]
