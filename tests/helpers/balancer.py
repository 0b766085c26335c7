"""The reference deployment scaled out, as real processes: `mcp-elicit serve --transport http` instances on one
store and one set of keys, the stand-in provider, and HAProxy in front terminating TLS with a certificate
made for the run, configured by the deployment guide's own file (docs/config/haproxy.cfg). Shared by
tests/system/test_balancer.py and bench/load.py.

HAProxy balances round-robin, request by request, with no cookie or address affinity. One rule routes by
content: a request carrying `Mcp-Session-Id` goes to the instance that issued that session. A 2025-era
streamable HTTP session (the `initialize` handshake, the SSE stream a call's `elicitation/create` rides,
the client's answer to it) lives in the memory of the SDK process that opened it, which answers an unknown
session id with 404. Everything else, the 2026-07-28 era (stateless: no session header) with its
`requestState` retries, sign-in, tokens, decision pages, callbacks, health checks and every new legacy
session, lands on whichever instance comes next. Each request gets its own connection to its instance
(`option http-server-close`): reusing an idle one races the server's 5 s keep-alive close, and a request
lost in that race (logged with status -1) cannot be sent again safely.

`Cluster.routed()` reads HAProxy's log (one line per request: server, method, path, status, session) so a
test can show where each request really went. Starting, waiting for and stopping the processes, and signing
in, are the demo deployment's own (`mcp_elicit.reference.demo_stack`).
"""

from __future__ import annotations

import base64
import ipaddress
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final
from urllib.parse import urljoin, urlsplit

import httpx2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mcp_elicit.reference.demo_stack import (
    Credentials,
    StackError,
    sign_in_as,
    start_logged,
    stop_all,
    wait_listening,
)
from mcp_elicit.reference.page_forms import Page, read_page
from tests.helpers.http_harness import free_port

HAPROXY: Final = "/usr/sbin/haproxy"
LOOPBACK: Final = "127.0.0.1"
START_TIMEOUT: Final = 60.0
USER: Final = ("alice", "wonderland", "Alice Liddell")
PROVIDER_CLIENT_ID: Final = "elicit-reference"
DONE: Final = "Done"
LOG_FORMAT: Final = "%s %HM %HP %ST %tsc %Ta %[capture.req.hdr(0)] %[capture.req.hdr(1)]"
"""Server, method, path, status, termination state, active time (ms), session id, client."""
CLIENT_HEADER: Final = "X-Test-Client"
"""A header the test clients send, captured in the log with the session id, to tell their requests apart."""


class ClusterError(RuntimeError):
    """A part of the cluster did not start or answer; the message names its log."""


def haproxy_missing() -> str | None:
    """Why the balancer cannot run here, or None."""
    return None if Path(HAPROXY).is_file() else f"HAProxy is not installed ({HAPROXY}; Debian package haproxy)"


# -- TLS ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tls:
    ca: Path
    """The run's CA certificate (PEM): what clients and browsers trust."""
    chain: Path
    """The server certificate, its key and the CA certificate (PEM): HAProxy's `crt`."""

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def make_tls(directory: Path, host: str = LOOPBACK) -> Tls:
    """A self-signed CA and a server certificate it signed for `host` (and localhost), valid for a day."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcp-elicit test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, chain_path = directory / "ca.pem", directory / "server.pem"
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    ca_path.write_bytes(ca_pem)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + ca_pem + key_pem)
    chain_path.chmod(0o600)
    return Tls(ca_path, chain_path)


# -- HAProxy ------------------------------------------------------------------------------------------------


RECIPE: Final = Path(__file__).resolve().parents[2] / "docs" / "config" / "haproxy.cfg"
"""The deployment guide's balancer, the one source of its rules: the tests run it, the guide shows it."""


def haproxy_config(
    front_port: int, tls: Tls, instance_ports: Sequence[int], stats_socket: Path, *, sessions_home: bool = True
) -> str:
    """The deployment guide's balancer (`RECIPE`) on loopback: its TLS front bound to `front_port` with the run's
    certificate, the instances as its servers (checked every second); plus a log line per request and a stats
    socket, for the tests to see where requests went. Without `sessions_home`, legacy sessions are balanced like
    everything else (to show why the rule is there)."""
    lines = ["global", "    log stdout format raw local0", "    maxconn 4096",
             f"    stats socket {stats_socket} mode 600 level user", ""]  # fmt: skip
    section = ""
    for line in RECIPE.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        keyword = words[0] if words else ""
        if keyword and not line[0].isspace():
            section = keyword
        if keyword == "server" or (keyword.startswith("stick") and not sessions_home):
            continue
        if keyword == "bind":
            lines += [
                f"    bind {LOOPBACK}:{front_port} ssl crt {tls.chain}",
                "    http-request capture req.hdr(mcp-session-id) len 64",
                f"    http-request capture req.hdr({CLIENT_HEADER.lower()}) len 64",
            ]
            continue
        lines.append(line)
        if words == ["mode", "http"]:
            lines += ["    log global", f'    log-format "{LOG_FORMAT}"']
    if section != "backend":
        raise ClusterError(f"{RECIPE} must end with the backend section, where the instances are added")
    lines += [
        f"    server i{number} {LOOPBACK}:{port} check inter 1s fall 2 rise 1"
        for number, port in enumerate(instance_ports, start=1)
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Routed:
    """One request as the balancer logged it."""

    server: str
    method: str
    path: str
    status: int
    """-1 when no response came back (see `ended`)."""
    ended: str
    """HAProxy's termination state: `----` for a normal end, else who closed and when."""
    session: str
    client: str


# -- the cluster --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    store_url: str
    instances: int = 3
    provider: bool = True
    sessions_home: bool = True
    server: tuple[str, ...] | None = None
    """What each instance runs instead of `mcp-elicit serve` (`python -m` arguments, to which `--port` and
    `--store` are added): a bench's own server, which must answer `/readyz` as the balancer's checks do."""
    environ: tuple[tuple[str, str], ...] = ()
    """Settings every instance is given on top of `shared_settings` (a bench's switch, such as audit keys)."""


@dataclass
class Cluster:
    public_url: str
    instance_urls: list[str]
    provider_url: str | None
    store_url: str
    workspace: Path
    tls: Tls
    run_dir: Path
    haproxy_log: Path
    logs: list[Path] = field(default_factory=list)

    @property
    def mcp_url(self) -> str:
        return f"{self.public_url}/mcp"

    @property
    def principal_id(self) -> str:
        return f"{self.public_url}#{USER[0]}"

    def http_client(self, **kwargs: object) -> httpx2.AsyncClient:
        """An HTTPS client trusting the run's CA (and nothing else), no read timeout (the kit's own rule)."""
        timeout = httpx2.Timeout(30.0, read=None)
        return httpx2.AsyncClient(verify=self.tls.context(), timeout=timeout, **kwargs)  # type: ignore[arg-type]

    @property
    def stats_socket(self) -> Path:
        return self.run_dir / "haproxy.sock"

    def servers(self) -> dict[str, dict[str, str]]:
        """HAProxy's statistics of each instance (`show stat`: status, req_tot the requests sent there...)."""
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(5)
            connection.connect(str(self.stats_socket))
            connection.sendall(b"show stat\n")
            chunks = []
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        lines = b"".join(chunks).decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {row["svname"]: row for row in rows if row["pxname"] == "instances" and row["svname"].startswith("i")}

    def routed(self) -> list[Routed]:
        """Every request HAProxy has logged so far (a line is written when its response ends)."""
        found = []
        for line in self.haproxy_log.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 8 and parts[3].lstrip("-").isdigit() and parts[0].startswith("i"):
                session, client = ("" if part == "-" else part for part in parts[6:])
                found.append(Routed(parts[0], parts[1], parts[2], int(parts[3]), parts[4], session, client))
        return found


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def shared_settings(provider_url: str | None) -> dict[str, str]:
    """What every instance must be given alike: users, the three key rings, the provider (fresh keys)."""
    settings = {
        "MCP_ELICIT_USERS": ":".join(USER),
        "MCP_ELICIT_AUTH_KEYS": b64(secrets.token_bytes(32)),
        "MCP_ELICIT_STATE_KEYS": b64(secrets.token_bytes(32)),
        "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(secrets.token_bytes(32)),
    }
    if provider_url is not None:
        settings |= {
            "MCP_ELICIT_PROVIDER_URL": provider_url,
            "MCP_ELICIT_PROVIDER_CLIENT_ID": PROVIDER_CLIENT_ID,
            "MCP_ELICIT_PROVIDER_CLIENT_SECRET": secrets.token_urlsafe(24),
        }
    return settings


@contextmanager
def running_cluster(spec: ClusterSpec, run_dir: Path) -> Iterator[Cluster]:
    """Provider, instances and balancer started and ready; all of them stopped on the way out."""
    missing = haproxy_missing()
    if missing is not None:
        raise ClusterError(missing)
    run_dir.mkdir(parents=True, exist_ok=True)
    front, provider_port = free_port(), free_port()
    ports = [free_port() for _ in range(spec.instances)]
    public = f"https://{LOOPBACK}:{front}"
    provider_url = f"http://{LOOPBACK}:{provider_port}" if spec.provider else None
    tls = make_tls(run_dir / "tls")
    env = {**os.environ, **shared_settings(provider_url), **dict(spec.environ), "PYTHONUNBUFFERED": "1"}
    workspace = run_dir / "workspace"
    cluster = Cluster(public, [f"http://{LOOPBACK}:{p}" for p in ports], provider_url, spec.store_url, workspace,
                      tls, run_dir, run_dir / "haproxy.log")  # fmt: skip
    with ExitStack() as cleanup:
        processes: list[subprocess.Popen[bytes]] = []
        cleanup.callback(stop_all, processes)
        started: list[tuple[subprocess.Popen[bytes], int, Path]] = []

        def start(command: list[str], port: int, log: Path) -> None:
            process = start_logged(cleanup, command, env, log)
            processes.append(process)
            started.append((process, port, log))
            cluster.logs.append(log)

        if provider_url is not None:
            start(
                [sys.executable, "-m", "mcp_elicit.reference.provider", "--port", str(provider_port),
                 "--client-id", PROVIDER_CLIENT_ID, "--redirect-uri", f"{public}/elicit/callback",
                 "--user", ":".join(USER), "--log-level", "warning"],
                provider_port, run_dir / "provider.log",
            )  # fmt: skip
        serve = ("mcp_elicit", "serve", "--transport", "http", "--public-url", public, "--workspace", str(workspace))
        for number, port in enumerate(ports, start=1):
            start(
                [sys.executable, "-m", *(spec.server or serve), "--port", str(port), "--store", spec.store_url],
                port, run_dir / f"instance-{number}.log",
            )  # fmt: skip
        for process, port, log in started:
            _wait_listening(port, process, log)
        _wait_ready(cluster.instance_urls, cluster)
        config = run_dir / "haproxy.cfg"
        config.write_text(haproxy_config(front, tls, ports, cluster.stats_socket, sessions_home=spec.sessions_home))
        start([HAPROXY, "-f", str(config), "-db"], front, cluster.haproxy_log)
        balancer, _, balancer_log = started[-1]
        _wait_listening(front, balancer, balancer_log)
        _wait_balanced(cluster)
        yield cluster


@contextmanager
def _as_cluster_error() -> Iterator[None]:
    """The demo deployment's `StackError` raised as this cluster's `ClusterError`."""
    try:
        yield
    except StackError as error:
        raise ClusterError(str(error)) from None


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    with _as_cluster_error():
        wait_listening(port, process, log, timeout=START_TIMEOUT)


def _wait_ready(urls: Sequence[str], cluster: Cluster) -> None:
    """Until every instance says it is ready (store, schema, keys)."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx2.Client(timeout=5) as http:
        for url in urls:
            while True:
                try:
                    if http.get(f"{url}/readyz").status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ClusterError(f"{url}/readyz is not ready after {START_TIMEOUT:.0f} s; see {cluster.run_dir}")
                time.sleep(0.1)


def _wait_balanced(cluster: Cluster) -> None:
    """Until HAProxy's own checks have every instance UP, so that round-robin goes round all of them."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            states = {name: row["status"] for name, row in cluster.servers().items()}
        except OSError:
            states = {}
        if len(states) == len(cluster.instance_urls) and set(states.values()) == {"UP"}:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"HAProxy has not every instance UP ({states}); see {cluster.haproxy_log}")
        time.sleep(0.1)


# -- a person, over HTTPS -----------------------------------------------------------------------------------


async def sign_in(cluster: Cluster) -> str:
    """The MCP access token of the user, obtained as an MCP client and a person at a browser obtain one:
    registration, authorization code with PKCE, the sign-in form, the token request, all through the balancer."""
    with _as_cluster_error():
        return await sign_in_as(
            Credentials(*USER),
            cluster.public_url,
            cluster.mcp_url,
            log=cluster.run_dir,
            verify=cluster.tls.context(),
            client_name="balancer",
        )


@dataclass
class Browser:
    """A person's browser without JavaScript: signs in where asked, presses Continue, types the API key,
    signs in and allows at the provider, and stops at the server's "Done" page. Every page it asks for
    goes through the balancer (or to the provider), so each lands on whichever instance is next."""

    cluster: Cluster
    api_key: str = "test-api-key-0000"
    walked: list[str] = field(default_factory=list)

    async def complete(self, url: str) -> None:
        allowed = {_origin(self.cluster.public_url), _origin(self.cluster.provider_url or self.cluster.public_url)}
        posted: set[str] = set()
        async with self.cluster.http_client(follow_redirects=False) as browser:
            response = await browser.get(url)
            for _ in range(16):
                if response.is_redirect:
                    target = urljoin(str(response.url), response.headers["location"])
                    if _origin(target) not in allowed:
                        raise ClusterError(f"the flow left the deployment for {_origin(target)}")
                    response = await browser.get(target)
                    continue
                page = read_page(response.text)
                self.walked.append(f"{response.status_code} {page.heading or page.title}")
                if response.status_code == 200 and page.heading == DONE:
                    return
                chosen = self._next(response, page)
                if chosen is None or chosen[0] in posted:
                    raise ClusterError(f"the flow stopped on {page.heading or page.title!r} ({response.status_code})")
                action, data = chosen
                posted.add(action)
                response = await browser.post(urljoin(str(response.url), action), data=data)
        raise ClusterError(f"no outcome after 16 pages: {self.walked}")

    def _next(self, response: httpx2.Response, page: Page) -> tuple[str, dict[str, str]] | None:
        on_provider = self.cluster.provider_url is not None and _origin(str(response.url)) == _origin(
            self.cluster.provider_url
        )
        login = {"username": USER[0], "password": USER[1]}
        if on_provider:
            if (form := page.form("/authorize/consent")) is not None:
                return form.action, {**form.hidden, "action": "allow"}
            if (form := page.form("/authorize")) is not None:
                return form.action, {**form.hidden, **login}
            return None
        if (form := page.form("/signin")) is not None:
            return form.action, {**form.hidden, **login}
        if (form := page.form_ending("/key")) is not None:
            return form.action, {**form.hidden, "api_key": self.api_key}
        if (form := page.form_ending("/continue")) is not None:
            return form.action, dict(form.hidden)
        return None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()
