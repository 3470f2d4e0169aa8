"""Storage locations a spec names: a local folder or an object-store URL.

The spec is the user's contract, so a location is checked here, at validation, with a message
that says what to write; whether the store is reachable is checked where it is used. Object
stores runwright supports for checkpoints are those whose conditional writes its fence relies on
(docs/ckpt.md, "Object stores"): `s3://` (AWS S3 and S3-compatible servers such as MinIO). A drill
puts `faulty+` before a `file://` or `s3://` location to inject storage faults into it.
"""

import re

CHECKPOINT_SCHEMES = ("s3",)
"""URL schemes `checkpoint.location` may use besides a local folder."""
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""S3 bucket names: 3-63 characters, lower-case letters, digits, `.` and `-`, starting and
ending with a letter or digit (AWS's bucket naming rules)."""


def _check_s3(value: str) -> str:
    bucket, _, prefix = value.removeprefix("s3://").partition("/")
    if not bucket:
        raise ValueError(
            f"{value!r} names no bucket: write s3://<bucket>/<prefix>, e.g. "
            "s3://my-bucket/runwright"
        )
    if not _BUCKET.fullmatch(bucket):
        raise ValueError(
            f"{bucket!r} in {value!r} is not an S3 bucket name: 3-63 characters of lower-case "
            "letters, digits, `.` and `-`, starting and ending with a letter or digit"
        )
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(
            f"{value!r} has an empty, `.` or `..` part in its prefix; write "
            "s3://<bucket>/<prefix> with plain names between the slashes"
        )
    return value


DRILL_PREFIX = "faulty+"
"""A storage drill's location: `faulty+file:///folder` or `faulty+s3://bucket/prefix` is that
location with faults injected from a control file (runwright/ckpt/faultfs.py, docs/ckpt.md)."""


def checkpoint_location(value: str | None) -> str | None:
    """Check `checkpoint.location`: an absolute folder, `file:///folder`, or `s3://bucket/prefix`
    (a trailing `/` is dropped, so one location has one spelling and one spec hash), or either
    URL behind `faulty+` for a storage drill."""
    if value is None:
        return None
    text = value.strip()
    if text.lower().startswith(DRILL_PREFIX):
        wrapped = text[len(DRILL_PREFIX) :]
        if "://" not in wrapped or wrapped.lower().startswith(DRILL_PREFIX):
            raise ValueError(
                f"checkpoint.location {value!r}: a drill location wraps one URL, "
                "faulty+file:///absolute/path or faulty+s3://bucket/prefix"
            )
        return DRILL_PREFIX + (checkpoint_location(wrapped) or "")
    scheme, sep, rest = text.partition("://")
    text = f"{scheme}{sep}{rest.rstrip('/')}" if sep else (text.rstrip("/") or text)
    if "\0" in text or not text:
        raise ValueError("checkpoint.location is empty or holds a NUL byte; give a folder or URL")
    if "://" not in text:
        if not text.startswith("/"):
            raise ValueError(
                f"checkpoint.location {value!r} is relative; the controller and the workers run "
                "in different folders, so give an absolute folder (/data/checkpoints) or a URL "
                "(s3://bucket/prefix)"
            )
        return text
    scheme = text.split("://", 1)[0].lower()
    if scheme == "file":
        if not text.startswith("file:///"):
            raise ValueError(f"{value!r}: write a local folder as file:///absolute/path")
        return text
    if scheme not in CHECKPOINT_SCHEMES:
        supported = ", ".join(f"{s}://" for s in CHECKPOINT_SCHEMES)
        raise ValueError(
            f"checkpoint.location {value!r} uses {scheme}://, which runwright's checkpoint fence "
            f"does not support (it needs conditional writes); use {supported} or a local folder"
        )
    return _check_s3("s3://" + text.split("://", 1)[1])


def dataset_location(value: str | None) -> str | None:
    """Check `data.dataset`: any folder or fsspec URL; an `s3://` one must name a bucket."""
    if value is None or not value.lower().startswith("s3://"):
        return value
    return _check_s3("s3://" + value.split("://", 1)[1].rstrip("/"))
