"""Scoped worker credentials on object storage: each generation its own, revoked when it ends.

Seed 000 (8.2) asks that a worker fetching shards hold short-lived, least-scope credentials that
cannot list the whole bucket or write training data back to its source, revoked when the job
ends. Here the controller, when `RUNWRIGHT_WORKER_CREDENTIALS` names an issuer, issues each
generation of a run that uses `s3://` its own credentials before the launch:

- the scope (`worker_scope`, pure): read the spec's dataset prefix; read and write the run's
  checkpoint root (`layout.checkpoint_root`); nothing else. The worker channel, timeline and
  heartbeats live in the run folder on the controller's file system, not in the object store,
  so they need no object-store grant;
- the policy (`scope_policy`, pure): an IAM policy document of that scope. Listing is granted on
  the bucket only under the scope's prefixes (`s3:prefix` condition), so a worker cannot list the
  whole bucket on AWS;
- the issuer (`CredentialIssuer`, registry `ISSUERS`): `iam-user-v1` makes an IAM user per
  generation (`runwright-<run>-g<G>`, path `/runwright/`) with the policy inline and one access
  key; revoking deletes the key, the policy and the user, so the key is refused at once.

Workers never see the controller's credentials: the launch environment carries the scoped key,
and `scoped_environment` drops every other way botocore finds credentials (session token,
profile, shared files, web identity, container credentials) from what the workers inherit.

Each issue and revocation is an event (CREDENTIALS_ISSUED, CREDENTIALS_REVOKED) naming the user
and key id, never the secret; what is still live is read from the run's events, so a controller
that restarts revokes what its predecessor issued. A generation's credentials are revoked when a
newer generation launches (the old one's processes are gone by then: launching.kill_orphans),
when the run is paused, and when it is terminal with no worker left; one found past its expiry
(RUNWRIGHT_WORKER_CREDENTIALS_TTL_SECONDS, 24 h by default) is revoked by the next pass, and the
generation that held it fails on storage and recovers with fresh ones. docs/trust.md says what
the S3 test server enforces and what it does not.
"""

import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from runwright.errors import LaunchError
from runwright.events import EventType
from runwright.layout import checkpoint_location, checkpoint_root, run_paths
from runwright.records import Record

ISSUER_ENV = "RUNWRIGHT_WORKER_CREDENTIALS"
"""Names the issuer (`iam-user-v1`); unset: workers inherit the controller's environment."""
TTL_ENV = "RUNWRIGHT_WORKER_CREDENTIALS_TTL_SECONDS"
TTL_SECONDS = 24 * 3600.0
"""Default lifetime of one generation's credentials: 86,400 s (a day)."""
MARKER_ENV = "RUNWRIGHT_SCOPED_CREDENTIALS"
"""Set in a launch environment that carries scoped credentials (its value: the key id)."""
CONTROLLER_ONLY = (
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
)
"""botocore's other credential sources (botocore.credentials' provider chain): a worker with
scoped keys must not find the controller's through any of them."""
USER_PATH = "/runwright/"


class CredentialError(LaunchError):
    """Credentials could not be issued or revoked (a launch does not go on without them)."""


class WorkerScope(Record):
    """What one generation's workers may do on the object store."""

    run_id: str
    """The run."""
    generation: int
    """The generation the credentials are for."""
    read_prefixes: tuple[str, ...] = ()
    """`s3://bucket/prefix` locations the workers may read (the datasets)."""
    write_prefixes: tuple[str, ...] = ()
    """`s3://bucket/prefix` locations the workers may read, write and delete under (the run's
    checkpoint root)."""

    @property
    def empty(self) -> bool:
        return not (self.read_prefixes or self.write_prefixes)


class WorkerCredentials(Record):
    """One generation's issued credentials (the secret never leaves this object but into the
    launch environment)."""

    user: str
    """The IAM principal made for the generation."""
    access_key_id: str
    """Its key id (recorded in events)."""
    secret_access_key: str = Field(repr=False)
    """Its secret (only in the workers' environment)."""
    expires_unix_s: float
    """When the controller revokes it if the generation has not ended by then."""

    def env(self) -> dict[str, str]:
        """What a launch adds to the workers' environment."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            MARKER_ENV: self.access_key_id,
        }


def _s3_prefix(location: str) -> str | None:
    """`s3://bucket/prefix` without a trailing `/`, for an s3 location; else None."""
    if not location.lower().startswith("s3://"):
        return None
    return "s3://" + location.split("://", 1)[1].rstrip("/")


def worker_scope(spec: Mapping[str, Any], run_id: str, root: str, generation: int) -> WorkerScope:
    """The scope of generation `generation` of a run whose spec (canonical form) is `spec`."""
    data = spec.get("data") or {}
    dataset = _s3_prefix(str(data.get("dataset") or ""))
    ckpt = _s3_prefix(checkpoint_root(run_paths(Path(root), run_id), checkpoint_location(spec)))
    return WorkerScope(
        run_id=run_id,
        generation=generation,
        read_prefixes=(dataset,) if dataset else (),
        write_prefixes=(ckpt,) if ckpt else (),
    )


def _split(prefix: str) -> tuple[str, str]:
    bucket, _, key = prefix.removeprefix("s3://").partition("/")
    return bucket, key


def _objects(prefixes: Iterable[str]) -> list[str]:
    """The object ARNs under each prefix, and the prefix's own key: s3fs asks for that key
    (HeadObject) before it lists a "folder", and a refusal there fails the listing."""
    found: list[str] = []
    for bucket, key in map(_split, prefixes):
        found += (
            [f"arn:aws:s3:::{bucket}/{key}", f"arn:aws:s3:::{bucket}/{key}/*"]
            if key
            else [f"arn:aws:s3:::{bucket}/*"]
        )
    return found


def scope_policy(scope: WorkerScope) -> dict[str, Any]:
    """The IAM policy of `scope` (https://docs.aws.amazon.com/AmazonS3/latest/userguide/
    example-policies-s3.html, "Allow listing objects in a folder"): get under every prefix;
    put and delete under the write prefixes only; list a bucket only under the prefixes."""
    every = (*scope.read_prefixes, *scope.write_prefixes)
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ReadScope",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": _objects(every),
        },
    ]
    if scope.write_prefixes:
        statements.append(
            {
                "Sid": "WriteRunCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": _objects(scope.write_prefixes),
            }
        )
    by_bucket: dict[str, list[str]] = {}
    for bucket, key in map(_split, every):
        by_bucket.setdefault(bucket, []).extend([key, f"{key}/*"] if key else ["*"])
    for n, (bucket, keys) in enumerate(sorted(by_bucket.items())):
        # s3fs (and DCP's fsspec writer through it) probes that a bucket exists before it
        # makes a "folder": HeadBucket needs an unconditioned ListBucket, so it falls through to
        # GetBucketLocation, which says only the bucket's region.
        statements.append(
            {
                "Sid": f"BucketLocation{n}",
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
            }
        )
        statements.append(
            {
                "Sid": f"ListScope{n}",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": sorted(set(keys))}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def user_name(run_id: str, generation: int) -> str:
    """IAM user names are at most 64 characters of `[\\w+=,.@-]`: the run id is cut to fit."""
    suffix = f"-g{generation}"
    return f"rw-{run_id}"[: 64 - len(suffix)] + suffix


class CredentialIssuer(Protocol):
    """Makes and revokes one generation's credentials."""

    name: str

    def issue(self, scope: WorkerScope, ttl_seconds: float) -> WorkerCredentials: ...

    def revoke(self, user: str, access_key_id: str) -> bool:
        """Revoke; False when it was already gone."""
        ...


class IamUserIssuer:
    """`iam-user-v1`: an IAM user per generation with the scope inline and one access key,
    made with the controller's own credentials (the standard AWS configuration; the endpoint
    from AWS_ENDPOINT_URL_IAM or AWS_ENDPOINT_URL)."""

    name = "iam-user-v1"

    def __init__(self, client: Any = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import botocore.session

            endpoint = os.environ.get("AWS_ENDPOINT_URL_IAM") or os.environ.get("AWS_ENDPOINT_URL")
            self._client = botocore.session.get_session().create_client(
                "iam", endpoint_url=endpoint, region_name=os.environ.get("AWS_DEFAULT_REGION")
            )
        return self._client

    def issue(self, scope: WorkerScope, ttl_seconds: float) -> WorkerCredentials:
        user = user_name(scope.run_id, scope.generation)
        try:
            self._forget(user)  # a half-made user of an earlier try
            self.client.create_user(UserName=user, Path=USER_PATH)
            self.client.put_user_policy(
                UserName=user, PolicyName="scope", PolicyDocument=json.dumps(scope_policy(scope))
            )
            key = self.client.create_access_key(UserName=user)["AccessKey"]
        except Exception as exc:
            raise CredentialError(
                f"cannot issue worker credentials for {scope.run_id} generation "
                f"{scope.generation}: {exc}; the controller's credentials need iam:CreateUser, "
                f"iam:PutUserPolicy, iam:CreateAccessKey and their deletes, or unset {ISSUER_ENV}"
            ) from exc
        return WorkerCredentials(
            user=user,
            access_key_id=key["AccessKeyId"],
            secret_access_key=key["SecretAccessKey"],
            expires_unix_s=time.time() + ttl_seconds,
        )

    def revoke(self, user: str, access_key_id: str) -> bool:
        try:
            return self._forget(user)
        except Exception as exc:
            raise CredentialError(f"cannot revoke {access_key_id} of {user}: {exc}") from exc

    def _forget(self, user: str) -> bool:
        """Delete `user` with its keys and policies; False when there was no such user."""
        iam = self.client
        try:
            keys = iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
        except iam.exceptions.NoSuchEntityException:
            return False
        for key in keys:
            iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
        for policy in iam.list_user_policies(UserName=user)["PolicyNames"]:
            iam.delete_user_policy(UserName=user, PolicyName=policy)
        iam.delete_user(UserName=user)
        return True


ISSUERS: dict[str, type] = {IamUserIssuer.name: IamUserIssuer}


def configured_issuer(environ: Mapping[str, str] = os.environ) -> CredentialIssuer | None:
    """The issuer `RUNWRIGHT_WORKER_CREDENTIALS` names, or None when unset."""
    name = environ.get(ISSUER_ENV, "").strip()
    if not name:
        return None
    if name not in ISSUERS:
        raise CredentialError(
            f"{ISSUER_ENV}={name!r} names no issuer; use one of {', '.join(sorted(ISSUERS))} "
            "or unset it"
        )
    return ISSUERS[name]()


def ttl_seconds(environ: Mapping[str, str] = os.environ) -> float:
    text = environ.get(TTL_ENV, "").strip()
    try:
        value = float(text) if text else TTL_SECONDS
    except ValueError:
        value = -1.0
    if value <= 0:
        raise CredentialError(f"{TTL_ENV}={text!r} must be a number of seconds above 0")
    return value


def scoped_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` as the workers get it: when it carries scoped credentials (MARKER_ENV), without
    every other credential source the controller's environment had."""
    if MARKER_ENV not in env:
        return env
    return {k: v for k, v in env.items() if k not in CONTROLLER_ONLY}


READ_ONLY_FILE_MODE = 0o444
"""A local dataset's files as workers find them: readable by all, writable by none."""


def read_only_dataset(location: str | None) -> int:
    """Make a local dataset's files read-only (READ_ONLY_FILE_MODE) before workers start;
    the number of files changed (0 for a URL, a missing folder, or files already read-only).

    A dataset is content-addressed and never changed in place, so nothing of runwright writes
    into it after its build. Folders keep their modes, so `runwright data delete` (and a
    rebuild) can still remove files. What this cannot isolate (docs/trust.md): workers run as
    the controller's OS user, who owns the files and may chmod them back, and root (as the tests
    run) ignores modes altogether; it stops an accidental write, not a deliberate one."""
    if not location or ("://" in location and not location.startswith("file://")):
        return 0
    folder = Path(location.removeprefix("file://"))
    if not folder.is_dir():
        return 0
    changed = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            mode = path.stat().st_mode & 0o777
            if mode & 0o222 or mode & 0o444 != 0o444:
                path.chmod(READ_ONLY_FILE_MODE)
                changed += 1
    return changed


def live_credentials(events: Iterable[Any]) -> dict[int, dict[str, Any]]:
    """generation -> the attributes of its CREDENTIALS_ISSUED, for those not yet revoked."""
    live: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.type == EventType.CREDENTIALS_ISSUED:
            live[event.generation] = dict(event.attributes)
        elif event.type == EventType.CREDENTIALS_REVOKED:
            live.pop(event.generation, None)
    return live
