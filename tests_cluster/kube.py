"""Talking to the local control plane (scripts/local-cluster.sh) from the tier's tests: kubectl
of the same minor for applies and reads, the admin's client certificate for raw calls, and
bearer tokens for the identities the app creates (scripts/cluster/tokens.csv)."""

from __future__ import annotations

import csv
import http.client
import json
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKENS = ROOT / "scripts" / "cluster" / "tokens.csv"


class KubectlError(Exception):
    def __init__(self, args: list[str], code: int, out: str, err: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {code}: {err.strip() or out.strip()}")
        self.code = code
        self.out = out
        self.err = err


@dataclass(frozen=True)
class Token:
    token: str
    user: str
    groups: tuple[str, ...]


def tokens() -> dict[str, Token]:
    """The static tokens the local API server accepts (--token-auth-file), by uid (a short
    name: ``readiness``, ``recreate``, ``token-writer``, ``admin-cli``)."""
    found = {}
    with TOKENS.open() as f:
        for row in csv.reader(line for line in f if not line.startswith("#")):
            token, user, uid = row[0], row[1], row[2]
            groups = tuple(g for g in (row[3] if len(row) > 3 else "").split(",") if g)
            found[uid] = Token(token, user, groups)
    return found


class Cluster:
    """The running local cluster, from the `export` lines of `local-cluster.sh env`."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.kubeconfig = env["KUBECONFIG"]
        self.kubectl_bin = env["KUBECTL"]
        state = Path(env["LOCAL_CLUSTER_STATE"])
        self.state = state
        self.url = f"https://127.0.0.1:{(state / 'apiserver.port').read_text().strip()}"
        self.ca_pem = (state / "pki" / "ca.crt").read_bytes()
        self._connection: http.client.HTTPSConnection | None = None

    @classmethod
    def from_environment(cls) -> Cluster:
        out = subprocess.run(
            [str(ROOT / "scripts" / "local-cluster.sh"), "env"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        env = {}
        for line in out.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value
        return cls(env)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        config = self.kubeconfig if user is None else self.user_kubeconfig(user)
        argv = [self.kubectl_bin, "--kubeconfig", config, *args]
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env={**os.environ}, timeout=120
        )
        if check and done.returncode != 0:
            raise KubectlError(list(args), done.returncode, done.stdout, done.stderr)
        return done

    def user_kubeconfig(self, user: str) -> str:
        """A kubeconfig that authenticates as one row of tokens.csv (by its uid column's user)."""
        path = self.state / f"user-{user}.kubeconfig"
        if not path.exists():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority": str(self.state / "pki" / "ca.crt"),
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": tokens()[user].token}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
                "current-context": "local",
            }
            path.write_text(json.dumps(config))
        return str(path)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def items(self, *args: str) -> list[dict[str, Any]]:
        return list(self.get(*args)["items"])

    def apply(
        self, objects: Iterable[dict[str, Any]], *, dry_run: bool = False, manager: str = "tier"
    ) -> subprocess.CompletedProcess[str]:
        docs = [json.dumps(o) for o in objects]
        args = ["apply", "--server-side", "--force-conflicts", f"--field-manager={manager}"]
        if dry_run:
            args.append("--dry-run=server")
        return self.kubectl(*args, "-f", "-", stdin="\n".join(docs))

    def create(
        self, obj: dict[str, Any], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(obj), check=check)

    def _admin_https(self) -> http.client.HTTPSConnection:
        """An HTTPS connection to the API server as the admin (its client certificate)."""
        if self._connection is None:
            context = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
            pki = self.state / "pki"
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
            port = int(self.url.rsplit(":", 1)[1])
            self._connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
        return self._connection

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        user: str = "",
        groups: Iterable[str] = (),
    ) -> tuple[int, Any]:
        """One request as the admin, or impersonating ``user`` (and ``groups``) as ``kubectl
        --as/--as-group`` does, over one kept-alive connection (hundreds of requests would cost
        a kubectl process each); returns the status and the decoded body."""
        headers = [("Content-Type", content_type), ("Accept", "application/json")]
        if user:
            headers.append(("Impersonate-User", user))
            headers += [("Impersonate-Group", g) for g in groups]  # one header per group
        data = b"" if body is None else json.dumps(body).encode()
        headers.append(("Content-Length", str(len(data))))
        for attempt in (1, 2):
            connection = self._admin_https()
            try:
                connection.putrequest(method, path)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(data)
                response = connection.getresponse()
                raw = response.read()
                break
            except (OSError, http.client.HTTPException):
                connection.close()
                self._connection = None  # the server closed the kept-alive connection
                if attempt == 2:
                    raise
        return response.status, json.loads(raw) if raw else None

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST as the admin; fails on anything but success."""
        status, data = self.call("POST", path, body)
        if status >= 300:
            raise AssertionError(f"POST {path}: {status} {data}")
        return dict(data)

    def can(self, user: str, groups: Iterable[str], attributes: dict[str, str]) -> bool:
        """The real authorizer's answer (SubjectAccessReview) for one request."""
        kind = "nonResourceAttributes" if "path" in attributes else "resourceAttributes"
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": list(groups), kind: attributes},
        }
        result = self.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(result["status"].get("allowed"))


def https_call(
    url: str,
    ca_pem: bytes,
    token: str,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """One request with a bearer token, as the app's KubeClient sends it (JSON in, JSON out);
    returns the status and the body, decoded when it is JSON (else the text). For asking the
    real API server and the fake one the same question (test_fake_vs_real.py)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    host, port = url.removeprefix("https://").rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw.decode(errors="replace")


def wait_until(
    what: str, condition: Callable[[], Any], *, timeout_s: float = 60, every_s: float = 0.2
) -> Any:
    """Poll until ``condition()`` is truthy; fail naming ``what`` and the last value. Every
    0.2 s: a check is a kubectl run or a request, about 50 ms on the local control plane."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")
