# The Python the tests run on (3.11), pinned by digest so a rebuild starts from the same image:
# the multi-platform index of python:3.11.16-slim-bookworm as docker-library/repo-info records it
# (repos/python/remote/3.11.16-slim-bookworm.md). To move on, take the new digest from there.
FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f

# git runs ls-remote, fetch and archive (gitreg kills each git with its whole process group);
# procps gives `ps` to whoever debugs the container; openssh-client lets rules use ssh:// repositories; tini runs as PID 1, so git's helpers that
# exit after their parent are reaped and `docker stop` (SIGTERM) reaches gitreg; gnupg (gpg, gpgv) verifies
# the signatures of providers' releases ([[providers]] keys).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git procps openssh-client ca-certificates tini gnupg \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY gitreg ./gitreg
# Dependencies at the versions requirements.lock pins, so a rebuild installs what was tested.
RUN pip install --no-cache-dir -c requirements.lock . && rm -rf /src

RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/gitreg --shell /usr/sbin/nologin gitreg
USER 10001
WORKDIR /var/lib/gitreg
# [storage] path defaults to $XDG_STATE_HOME/gitreg = /var/lib/gitreg: mirrors, archives, the
# first-served commit of each tag and download counts, kept across container restarts.
ENV XDG_STATE_HOME=/var/lib
VOLUME ["/var/lib/gitreg"]

EXPOSE 8080
# CMD binds 0.0.0.0:8080 whatever [server] host and port the config says (flags win over the
# file), so EXPOSE, a published port and this check, which calls it from inside, all hold.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

ENTRYPOINT ["tini", "--", "gitreg"]
CMD ["serve", "--config", "/etc/gitreg/config.toml", "--host", "0.0.0.0", "--port", "8080"]
