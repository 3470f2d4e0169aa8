"""The CLI's remote backend: the same methods as `runwright.access.Access`, answered by a
`runwright server` over HTTP (httpx), so each command renders the same data either way. Its API
token is read as api_token.py says.
"""

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from runwright.cli.api_token import normal_url, read_token
from runwright.errors import NotFoundError, RunwrightError
from runwright.spec import JobSpec

TIMEOUT_SECONDS = 60.0
"""A request's connect/read timeout; verifying a large checkpoint can take a while."""
RELEASE_TIMEOUT_S = 1800.0
"""A release request's read timeout: the server exports, loads and evaluates the model."""
RECONNECTS = 5
"""How often a broken event stream is resumed (Last-Event-ID) before giving up."""


class RemoteError(RunwrightError):
    """An error the server answered with; its message is the server's, as the CLI would say it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RemoteBackend:
    """`Access`'s methods over HTTP."""

    remote = True

    def __init__(self, server: str, token: str | None = None) -> None:
        self.server = normal_url(server)
        self._token = token
        self._client: httpx.Client | None = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            token = self._token or read_token(self.server)
            self._client = httpx.Client(
                base_url=self.server,
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx.Timeout(TIMEOUT_SECONDS),
            )
        return self._client

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RunwrightError(
                f"cannot reach the server at {self.server}: {exc}; is `runwright server` "
                "running there, and is --server / $RUNWRIGHT_SERVER right?"
            ) from None
        return _answer(response)

    # -- runs ---------------------------------------------------------------------------------

    def list_runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/runs", params={"limit": limit})

    def status(self, run_id: str, with_events: bool = True) -> dict[str, Any]:
        params = {"events": str(with_events).lower()}
        return self._call("GET", f"/v1/runs/{_segment(run_id)}", params=params)

    def events(
        self,
        run_id: str,
        after_seq: int = 0,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"after": after_seq, "type": types or []}
        if limit:
            params["limit"] = limit
        return self._call("GET", f"/v1/runs/{_segment(run_id)}/events", params=params)

    def follow(
        self, run_id: str, after_seq: int = 0, types: list[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every event after `after_seq` as it happens (server-sent events), until the run has
        finished; a broken connection is resumed after the last event received."""
        last, tries = after_seq, 0
        while True:
            try:
                with self.client.stream(
                    "GET",
                    f"/v1/runs/{_segment(run_id)}/events",
                    params={"follow": "true", "type": types or []},
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(last)},
                    timeout=httpx.Timeout(TIMEOUT_SECONDS, read=None),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        _answer(response)
                    for name, data, event_id in _sse(response.iter_lines()):
                        if name == "error":  # the server's feed failed: resume after `last`
                            raise httpx.ReadError(json.loads(data).get("error", "stream error"))
                        tries = 0
                        if event_id is not None:
                            last = event_id
                        if name == "end":
                            return
                        yield json.loads(data)
                # Closed without `end` (a restarting server, a proxy's timeout): resume.
                raise httpx.RemoteProtocolError("the stream closed before the run finished")
            except httpx.HTTPError as exc:
                tries += 1
                if tries > RECONNECTS:
                    raise RunwrightError(
                        f"lost the event stream of {run_id} from {self.server}: {exc}"
                    ) from None
                time.sleep(min(2.0**tries, 10.0))

    def run_state(self, run_id: str) -> str:
        return self.status(run_id, with_events=False)["state"]

    def compare(self, run_a: str, run_b: str) -> dict[str, Any]:
        return self._call("GET", "/v1/compare", params={"a": run_a, "b": run_b})

    def report(self, run_id: str) -> tuple[dict[str, Any], str]:
        answer = self._call("GET", f"/v1/runs/{_segment(run_id)}/report")
        return answer["report"], answer["html"]

    def queue(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/queue")

    def submit(
        self,
        spec: JobSpec | dict[str, Any],
        *,
        idempotency_key: str | None = None,
        workdir: Path | None = None,
        source: str = "spec",
    ) -> dict[str, Any]:
        mapping = spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec
        return self._call(
            "POST", "/v1/runs", json={"spec": mapping, "idempotency_key": idempotency_key}
        )

    def cancel(self, run_id: str, reason: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/cancel", json={"reason": reason})

    def pause(self, run_id: str, reason: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/pause", json={"reason": reason})

    def resume(self, run_id: str, reason: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/resume", json={"reason": reason})

    def rollback(self, run_id: str, reason: str, checkpoint: str) -> dict[str, Any]:
        body = {"checkpoint": checkpoint, "reason": reason}
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/rollback", json=body)

    def skip_shard(self, run_id: str, reason: str, shard: str) -> dict[str, Any]:
        body = {"shard": shard, "reason": reason}
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/skip-shard", json=body)

    def move_pool(self, run_id: str, reason: str, pool: str) -> dict[str, Any]:
        body = {"pool": pool, "reason": reason}
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/move", json=body)

    def stop_with_save(self, run_id: str, reason: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/stop", json={"reason": reason})

    # -- datasets and checkpoints --------------------------------------------------------------

    def datasets(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/datasets")

    def dataset_inspect(self, target: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/datasets/{_segment(target)}")

    def dataset_verify(self, target: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/datasets/{_segment(target)}/verify")

    def grant_dataset(self, project: str, dataset_id: str) -> dict[str, Any]:
        return self._call(
            "POST", f"/v1/projects/{_segment(project)}/datasets", json={"dataset_id": dataset_id}
        )

    def experiment_create(self, name: str, owner: str, hypothesis: str) -> dict[str, Any]:
        body = {"name": name, "owner": owner, "hypothesis": hypothesis}
        return self._call("POST", "/v1/experiments", json=body)

    def experiment_add(self, name: str, run_ids: list[str]) -> dict[str, Any]:
        path = f"/v1/experiments/{_segment(name)}/runs"
        return self._call("POST", path, json={"runs": run_ids})

    def experiment_show(self, name: str, reference: str | None = None) -> dict[str, Any]:
        params = {"reference": reference} if reference is not None else None
        return self._call("GET", f"/v1/experiments/{_segment(name)}", params=params)

    def experiment_list(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/experiments")

    def run_contaminate(
        self, run_id: str, first_step: int, last_step: int, reason: str
    ) -> dict[str, Any]:
        body = {"first_step": first_step, "last_step": last_step, "reason": reason}
        return self._call("POST", f"/v1/runs/{_segment(run_id)}/contaminated", json=body)

    def dataset_policy(self, target: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/datasets/{_segment(target)}/policy")

    def dataset_policy_set(
        self, target: str, changes: dict[str, Any], reason: str | None = None
    ) -> dict[str, Any]:
        body = {"changes": changes, "reason": reason}
        return self._call("POST", f"/v1/datasets/{_segment(target)}/policy", json=body)

    def dataset_withdraw(self, target: str, reason: str) -> dict[str, Any]:
        path = f"/v1/datasets/{_segment(target)}/withdraw"
        return self._call("POST", path, json={"reason": reason})

    def dataset_delete(
        self, target: str, reason: str, cache_dirs: list[Path] | None = None
    ) -> dict[str, Any]:
        if cache_dirs:
            raise RunwrightError(
                "--cache names a folder on this host, which a server cannot reach: delete "
                "through the server without --cache, then here on the store's host with it"
            )
        path = f"/v1/datasets/{_segment(target)}/delete"
        return self._call("POST", path, json={"reason": reason})

    def ckpt_list(self, target: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/runs/{_segment(target)}/checkpoints")

    def ckpt_inspect(self, target: str, checkpoint: str = "latest") -> dict[str, Any]:
        return self._call("GET", f"/v1/runs/{_segment(target)}/checkpoints/{_segment(checkpoint)}")

    def ckpt_verify(
        self,
        target: str,
        checkpoint: str | None = None,
        mode: str = "full",
        advance: Callable[[int], None] | None = None,
        total: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        body = {"checkpoint": checkpoint, "mode": mode}
        return self._call("POST", f"/v1/runs/{_segment(target)}/checkpoints/verify", json=body)

    def ckpt_gc(
        self, target: str, min_age_seconds: float, max_entries: int, dry_run: bool = False
    ) -> dict[str, Any]:
        body = {"min_age_seconds": min_age_seconds, "max_entries": max_entries, "dry_run": dry_run}
        return self._call("POST", f"/v1/runs/{_segment(target)}/checkpoints/gc", json=body)

    def ckpt_export(
        self,
        target: str,
        out: str,
        checkpoint: str = "latest",
        model_config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        format: str = "auto",
        spec: str | None = None,
    ) -> dict[str, Any]:
        if tokenizer is not None or spec is not None:
            raise RunwrightError(
                "--tokenizer and --spec name files on this machine, which the server cannot "
                "read: export without them, or run the export where they are"
            )
        body = {
            "out": out,
            "checkpoint": checkpoint,
            "config": model_config or {},
            "format": format,
        }
        return self._call("POST", f"/v1/runs/{_segment(target)}/checkpoints/export", json=body)

    # -- the model registry ---------------------------------------------------------------------

    def release_request(
        self,
        target: str,
        checkpoint: str = "latest",
        name: str | None = None,
        format: str = "auto",
        limits: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body = {"checkpoint": checkpoint, "name": name, "format": format, **(limits or {})}
        # The gates export, load and evaluate the model on the server: minutes for a big one.
        return self._call(
            "POST", f"/v1/runs/{_segment(target)}/releases", json=body, timeout=RELEASE_TIMEOUT_S
        )

    def release_decide(
        self, release_id: str, approve: bool, note: str | None = None
    ) -> dict[str, Any]:
        verb = "approve" if approve else "reject"
        path = f"/v1/releases/{_segment(release_id)}/{verb}"
        # Approving hashes the export again.
        return self._call("POST", path, json={"note": note}, timeout=RELEASE_TIMEOUT_S)

    def release_list(self, name: str | None = None, run: str | None = None) -> list[dict]:
        params = {k: v for k, v in (("name", name), ("run", run)) if v is not None}
        return self._call("GET", "/v1/releases", params=params)

    def release_show(self, release_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/releases/{_segment(release_id)}")

    # -- identity and access ---------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self._call("GET", "/v1/whoami")

    def create_token(
        self,
        principal: str | None = None,
        project: str | None = None,
        *,
        days: float = 90,
        role_cap: str | None = None,
        label: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "principal": principal,
            "project": project,
            "days": days,
            "role_cap": role_cap,
            "label": label,
        }
        return self._call("POST", "/v1/tokens", json=body)

    def bootstrap_admin(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RunwrightError(
            "`token create --admin` makes the first admin on the store itself: run it without "
            "--server, on a machine that reaches the store (--store)"
        )

    def list_tokens(self, project: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/tokens")

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/tokens/{_segment(token_id)}")

    def create_project(self, name: str) -> dict[str, Any]:
        return self._call("POST", "/v1/projects", json={"name": name})

    def projects(self) -> list[str]:
        return self._call("GET", "/v1/projects")

    def set_role(
        self, project: str, principal: str, role: str | None, kind: str = "user"
    ) -> dict[str, Any]:
        path = f"/v1/projects/{_segment(project)}/members/{_segment(principal)}"
        if role is None:
            return self._call("DELETE", path)
        return self._call("PUT", path, json={"role": role, "kind": kind})

    def members(self, project: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/v1/projects/{_segment(project)}/members")

    def audit_entries(self, **filters: Any) -> list[dict[str, Any]]:
        params = {
            ("after" if k == "after_seq" else k): v for k, v in filters.items() if v is not None
        }
        return self._call("GET", "/v1/audit", params=params)


def _segment(value: str) -> str:
    """One path segment, percent-encoded: a `/` or `..` in an id stays inside its segment and
    the server refuses it as an id, instead of it changing the URL's path."""
    from urllib.parse import quote

    return quote(value, safe="")


def _answer(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json()
    try:
        message = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        message = f"the server answered {response.status_code}: {response.text[:200]}"
    if response.status_code == 404:
        raise NotFoundError(message)
    raise RemoteError(message, response.status_code)


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str, int | None]]:
    """(event name, data, id) of each server-sent event (WHATWG: fields until a blank line)."""
    name, data, event_id = "message", [], None
    for line in lines:
        if not line:
            if data or name != "message":
                yield name, "\n".join(data), event_id
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id" and value.isdigit():
            event_id = int(value)
