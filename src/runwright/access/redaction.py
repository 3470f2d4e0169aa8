"""What a response may show: secrets masked for everyone, sample text only for roles allowed it.

**Secrets.** A value of the spec's `environment.env` whose name looks like a secret (contains
TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH, ...: the name test of Airflow's secrets masker,
`airflow.utils.log.secrets_masker.DEFAULT_SENSITIVE_FIELDS`) is shown as `***` in the spec, and
every occurrence of that value in any other string shown (an event attribute, a failure message
that printed it) is replaced too. Shown everywhere: status, events, report, the API, the CLI.

**Sample text.** Seed 000: training logs quote samples, so by default record hashes, lengths
and error types, and show full text only to an authorised diagnosis. Free text comes from the
workers in event attributes (failure messages, log tails), the run's state detail and the
report's incidents. For a role without `read_sample_text`, a string there passes only if it has
the shape of an identifier (no whitespace, at most 128 characters: ids, states, failure classes,
hashes, paths); anything else becomes `<redacted: N chars>`. An allow-list by shape rather than
a list of keys, so an attribute some training script invents cannot carry text past it.
"""

import re
from typing import Any

from runwright.records import Record

MASK = "***"
SECRET_NAME = re.compile(
    r"(?i)(secret|token|passw|pwd|passphrase|api_?key|access_?key|private_?key|key$|"
    r"credential|auth|session|cookie|signature|dsn)"
)
MIN_SECRET_CHARS = 4
"""Shorter values are not scrubbed from other text: masking `1` everywhere would garble it."""
IDENTIFIER = re.compile(r"[\w.:/@+=,#%~-]{0,128}")


class Disclosure(Record):
    """What one response may show."""

    sample_text: bool
    """Free text from the workers (READ_SAMPLE_TEXT)."""
    secrets: tuple[str, ...] = ()
    """Values to mask wherever they appear."""


def secret_names(env: dict[str, Any]) -> list[str]:
    return sorted(name for name in env if SECRET_NAME.search(name))


def secret_values(spec: dict[str, Any] | None) -> tuple[str, ...]:
    """The values of the spec's secret-looking environment variables, longest first (so a value
    containing another is masked whole)."""
    env = ((spec or {}).get("environment") or {}).get("env") or {}
    found = {str(env[n]) for n in secret_names(env) if len(str(env[n])) >= MIN_SECRET_CHARS}
    return tuple(sorted(found, key=len, reverse=True))


def mask_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with each secret-looking `environment.env` value replaced by `***`."""
    environment = spec.get("environment") or {}
    env = environment.get("env") or {}
    if not env:
        return spec
    masked = {k: (MASK if SECRET_NAME.search(k) else v) for k, v in env.items()}
    return {**spec, "environment": {**environment, "env": masked}}


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` with every secret value inside any string replaced by `***`."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, secrets) for v in value]
    return value


def redact_text(value: Any) -> Any:
    """Free text replaced by its length; identifiers, numbers and structure kept."""
    if isinstance(value, str):
        return value if IDENTIFIER.fullmatch(value) else f"<redacted: {len(value)} chars>"
    if isinstance(value, dict):
        return {k: redact_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_text(v) for v in value]
    return value


def worker_text(value: Any, disclosure: Disclosure) -> Any:
    """A value that may hold free text from the workers, as `disclosure` allows it."""
    value = scrub(value, disclosure.secrets)
    return value if disclosure.sample_text else redact_text(value)


def event_view(event: dict[str, Any], disclosure: Disclosure) -> dict[str, Any]:
    return {**event, "attributes": worker_text(event.get("attributes") or {}, disclosure)}


def summary_view(summary: dict[str, Any], disclosure: Disclosure) -> dict[str, Any]:
    """`run_summary`'s dict as `disclosure` allows it."""
    out = dict(summary)
    for key in ("state_detail", "incidents", "pending_recovery", "attempts"):
        out[key] = worker_text(out.get(key), disclosure)
    out["events"] = [event_view(e, disclosure) for e in out.get("events") or []]
    return out


def report_view(report: dict[str, Any], disclosure: Disclosure) -> dict[str, Any]:
    """A report.json dict as `disclosure` allows it: the spec's secrets masked, worker text of
    the run section, incidents, interventions and attempts redacted."""
    out = dict(report)
    out["spec"] = mask_spec(report.get("spec") or {})
    run = dict(out.get("run") or {})
    run["state_detail"] = worker_text(run.get("state_detail"), disclosure)
    out["run"] = run
    for key in ("incidents", "interventions", "attempts"):
        out[key] = worker_text(out.get(key), disclosure)
    return scrub(out, disclosure.secrets)
